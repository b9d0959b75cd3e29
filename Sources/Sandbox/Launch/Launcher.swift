import CSystemCalls
import Glibc
import SupervisorIO

/// The launcher executable (`autoharness-launch`) that becomes a sandbox's monitor.
///
/// Forking the supervisor for every sandbox copies its page tables (a 100 MB binary with its
/// heap and threads) into the monitor, again into init and the payload, and tears them down
/// at the payload's exec: about 2 ms of CPU per sandbox on a 2-core host. The launcher is the
/// same C code as a small static program, started with the plan as bytes.
///
/// It is found once per process: `$AUTOHARNESS_LAUNCHER`, else next to this executable, else
/// `../libexec/autoharness/` from it. The supervisor runs it as root, so it is used only if it
/// is a regular file owned by root and writable by no one else, in a directory the same holds
/// for, checked on the descriptor that is later executed (`execveat`): the path is never looked
/// up again. Without a usable one
/// sandboxes are forked from the supervisor as before, and `why` says why.
public struct Launcher: Sendable {
    /// An O_PATH descriptor of the checked file, kept open for the life of the process.
    public let fd: Int32
    public let path: String

    /// The launcher of this process, or nil (see `unavailableReason`).
    public static var shared: Launcher? { try? located.get() }

    /// Why there is no launcher (nil if there is one), for `-v` and bench output.
    public static var unavailableReason: String? {
        if case .failure(let why) = located { return why.message }
        return nil
    }

    private static let located = find()

    /// Where the launcher is looked for instead of this executable's directory: the
    /// `sandbox exec` front names the full CLI's, so both find the same launcher. Set before
    /// the first launch (the lookup happens once).
    public static func lookBeside(executableIn directory: String) {
        besideOverride.withLock { besideOverride.value = directory }
    }
    private static let besideOverride = Locked<String?>(nil)

    public struct Problem: Error {
        public var message: String
        public init(message: String) { self.message = message }
    }

    static func find() -> Result<Launcher, Problem> {
        var candidates: [String] = []
        if let env = getenv("AUTOHARNESS_LAUNCHER") {
            candidates = [String(cString: env)]
        } else {
            let dir = besideOverride.withLock { besideOverride.value } ?? executableDirectory()
            candidates = [dir + "/autoharness-launch", dir + "/../libexec/autoharness/autoharness-launch"]
        }
        var problems: [String] = []
        for path in candidates {
            switch open(path: path) {
            case .success(let l): return .success(l)
            case .failure(let p): problems.append(p.message)
            }
        }
        return .failure(Problem(message: problems.joined(separator: "; ")))
    }

    /// Opens `path` (O_PATH, not following a final symlink) and checks what it is, and that
    /// only root can change which file the name in its directory is (a directory others may
    /// write could hold a link to any root-owned program under that name). Also how the
    /// `sandbox exec` front (autoharness-front) opens the full CLI it hands over to.
    public static func open(path: String) -> Result<Launcher, Problem> {
        let dir = path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        var dst = stat()
        guard stat(dir, &dst) == 0 else { return .failure(Problem(message: "\(dir): \(String(cString: strerror(errno)))")) }
        guard dst.st_uid == 0, dst.st_mode & 0o022 == 0 else {
            return .failure(Problem(message: "\(path): its directory \(dir) is not root-owned and writable only by root (uid \(dst.st_uid), mode \(String(dst.st_mode & 0o7777, radix: 8)))"))
        }
        let fd = ahs_open_path(path)
        guard fd >= 0 else { return .failure(Problem(message: "\(path): \(String(cString: strerror(errno)))")) }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let e = errno
            close(fd)
            return .failure(Problem(message: "\(path): fstat: \(String(cString: strerror(e)))"))
        }
        var why: String?
        if (st.st_mode & S_IFMT) != S_IFREG {
            why = "not a regular file"
        } else if st.st_uid != 0 {
            why = "owned by uid \(st.st_uid), not root"
        } else if st.st_mode & 0o022 != 0 {
            why = "writable by group or others (mode \(String(st.st_mode & 0o7777, radix: 8)))"
        } else if st.st_mode & 0o100 == 0 {
            why = "not executable by its owner"
        }
        if let why {
            close(fd)
            return .failure(Problem(message: "\(path): \(why)"))
        }
        return .success(Launcher(fd: fd, path: path))
    }

    /// The directory of the running executable (`/proc/self/exe`).
    public static func executableDirectory() -> String {
        POSIX.readLink("/proc/self/exe").map { POSIX.split($0).directory } ?? "."
    }
}
