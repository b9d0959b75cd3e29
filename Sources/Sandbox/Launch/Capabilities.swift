import CCap
import Glibc

/// Capability facts from libcap, for the launcher (how many bounding-set entries to drop)
/// and for reports.
public enum Capabilities {
    /// The highest capability number the running kernel knows (e.g. 40 = CAP_CHECKPOINT_RESTORE).
    public static let lastCap: Int = {
        // libcap asks the kernel (it probes /proc/sys/kernel/cap_last_cap and prctl), so a
        // kernel newer than this libcap's headers still has every capability dropped.
        let bits = Int(cap_max_bits())
        return max(bits - 1, Int(CAP_LAST_CAP))
    }()

    /// `cap_sys_admin` for 21; `cap_41` for numbers libcap has no name for.
    public static func name(_ cap: Int) -> String {
        guard let p = cap_to_name(cap_value_t(cap)) else { return "cap_\(cap)" }
        defer { cap_free(p) }
        return String(cString: p)
    }
}
