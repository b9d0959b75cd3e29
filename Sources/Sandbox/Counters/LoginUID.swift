import Glibc
import SupervisorIO

/// The audit login uid, set for the supervisor's whole process tree before any sandbox starts.
///
/// A process whose loginuid is unset (4294967295: started by systemd, a container runtime or
/// a CI runner rather than a PAM login) may set it once, without any capability, by writing
/// `/proc/self/loginuid`; each such write takes the next number of one host-wide counter, the
/// audit session id, which `/proc/self/sessionid` shows exactly. A sandbox that inherited an
/// unset loginuid could so move the counter from a held-out run and read it from a later one
/// (Landlock refuses the write where it is on; `landlock: off`, or a kernel without it, left
/// it open: a review measured 5, 6, 7 from inside a sandbox). Once set, changing it
/// needs CAP_AUDIT_CONTROL in the initial user namespace, which no sandbox has: so the
/// supervisor sets its own (to its uid) once at start, and every sandbox inherits a set
/// loginuid and one session id, the same for all of them.
public enum LoginUID {
    static let unset = "4294967295"

    /// Sets this process's loginuid to its uid if it is unset. Returns why that failed, or nil
    /// (set now, or set already by a login).
    public static func pin() -> String? {
        let path = "/proc/self/loginuid"
        guard SmallFile.contents(of: path).split(separator: "\n").first == Substring(unset) else { return nil }
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return "\(path): \(ErrnoName.describe(errno))" }
        defer { close(fd) }
        let text = Array(String(getuid()).utf8)
        let n = text.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        return n == text.count ? nil : "\(path): \(ErrnoName.describe(errno))"
    }
}
