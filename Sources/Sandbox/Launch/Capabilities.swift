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

    /// What root on a task's image keeps (`LaunchPlan.keptCapabilities`), as a container's root
    /// installs packages and runs services with: chown files to the image's system users
    /// (dpkg), read and write past their modes, keep or set a file's set-id bits, switch ids
    /// (apt's `_apt`, su, a service dropping root), signal its own processes, and chroot (sshd
    /// confines each connection's unprivileged child in /run/sshd before it reads a byte, and
    /// refuses the connection when it cannot; a test runs a program in a jail). Each counts
    /// only in the payload's own user namespace (ids 0-65535 there, the image's host range
    /// outside): over the image's files and its own processes, never over a file owned by a
    /// host id outside that range, a mount (the mount namespace belongs to the namespace
    /// above), the network, or the host. A chroot leads nowhere the payload could not already
    /// reach: the root it can climb back to through `..` is its own mount namespace's, the
    /// image. Docker's default set has all eight. Not kept: CAP_SYS_ADMIN, CAP_NET_ADMIN,
    /// CAP_SYS_PTRACE, CAP_MKNOD, CAP_SETFCAP, CAP_SETPCAP, and every other.
    public static let imageRoot: UInt64 = [CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID, CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SYS_CHROOT]
        .reduce(0) { $0 | 1 << UInt64($1) }

    /// CAP_SYS_CHROOT's bit: a plan that keeps it lets `chroot` through its filter.
    public static let sysChroot: UInt64 = 1 << UInt64(CAP_SYS_CHROOT)

    /// The names of the capabilities in `mask` (bit n: capability n).
    public static func names(_ mask: UInt64) -> [String] { (0..<64).filter { mask >> UInt64($0) & 1 == 1 }.map(name) }

    /// `cap_sys_admin` for 21; `cap_41` for numbers libcap has no name for.
    public static func name(_ cap: Int) -> String {
        guard let p = cap_to_name(cap_value_t(cap)) else { return "cap_\(cap)" }
        defer { cap_free(p) }
        return String(cString: p)
    }
}
