import ExperimentModel
import Glibc
import SupervisorIO

/// The coding agent's writable copy of `agent/`, and what the supervisor takes from it.
///
/// The agent may create, rename and delete freely in here (editors save by rename); the
/// supervisor takes `agent.py` only, read through `AgentFile`, and reports every other
/// entry as a violation without reading it.
struct Staging {
    let path: String
    let owner: (uid_t, gid_t)

    /// Creates the directory (owned by the sandbox user) holding a copy of `source`.
    static func create(at path: String, from source: [UInt8], owner: (uid_t, gid_t)) throws -> Staging {
        try removeTree(path)
        guard mkdir(path, 0o755) == 0, chown(path, owner.0, owner.1) == 0 else {
            throw ExperimentError(.io, "\(path): \(String(cString: strerror(errno)))")
        }
        let s = Staging(path: path, owner: owner)
        try s.replaceAgent(with: source)
        return s
    }

    func withDirectory<T>(_ body: (Int32) throws -> T) throws -> T {
        let dir = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard dir >= 0 else { throw ExperimentError(.io, "staging \(path): \(String(cString: strerror(errno)))") }
        defer { close(dir) }
        return try body(dir)
    }

    /// The agent.py a request will judge, or why it cannot be taken.
    func takeAgent() throws -> Result<[UInt8], CopyBackRefusal> {
        try withDirectory { AgentFile.read(directoryFD: $0, maxBytes: AgentFile.maxBytes) }
    }

    /// Puts `bytes` back as the staging agent.py (after a rejected gate, `on_reject: revert`).
    func replaceAgent(with bytes: [UInt8]) throws {
        try withDirectory { try AgentFile.write(bytes, directoryFD: $0, owner: owner, directory: path) }
    }

    /// What an entry of staging other than agent.py is, for the record. None is ever taken.
    enum Extra: Equatable {
        /// Python's `__pycache__`, editors' swap and backup files: not worth a word.
        case routine
        /// Anything else: dropped, with a notice in the broker's reply.
        case dropped
        /// What would change imports if it were taken (`*.pth`, sitecustomize/usercustomize,
        /// a package): recorded as a violation.
        case importHook
    }

    static func classify(_ name: String, isPackage: Bool) -> Extra {
        if name == "__pycache__" || name.hasSuffix("~") || name.hasPrefix(".#")
            || (name.hasPrefix(".") && [".swp", ".swo", ".swx"].contains { name.hasSuffix($0) }) { return .routine }
        if isPackage || name.hasSuffix(".pth") || ["sitecustomize.py", "usercustomize.py"].contains(name) { return .importHook }
        return .dropped
    }

    /// Entries other than agent.py with their class (names as listed; nothing is followed: a
    /// package is a real directory holding an `__init__.py` entry): at most `limit` names,
    /// and how many there are in all.
    func extraEntries(limit: Int = .max) throws -> (entries: [(name: String, kind: Extra)], total: Int) {
        try withDirectory { dir in
            let agent = FileSystem.name(AgentFile.name)
            guard let listed = FileSystem.entries(of: dir, keeping: limit, where: { $0 != agent }) else {
                throw ExperimentError(.io, "staging \(path): \(ErrnoName.describe(errno))")
            }
            let entries = listed.names.map { n in
                // A package is a real directory (never a link to one) holding an __init__.py entry.
                var isPackage = false
                if let st = FileSystem.entryStatus(at: dir, n), FileSystem.isDirectory(st) {
                    let sub = FileSystem.openDirectory(at: dir, n)
                    if sub >= 0 {
                        isPackage = FileSystem.entryStatus(at: sub, FileSystem.name("__init__.py")) != nil
                        close(sub)
                    }
                }
                let name = FileSystem.display(n)
                return (name: name, kind: Self.classify(name, isPackage: isPackage))
            }
            return (entries.sorted { $0.name < $1.name }, listed.total)
        }
    }
}

/// Removes a tree the sandbox user may have built (arbitrarily deep, any names), never
/// following a link or leaving the filesystem (`FileSystem.removeTree`).
func removeTree(_ path: String) throws {
    let problems = FileSystem.removeTree(path)
    guard problems.isEmpty else {
        throw ExperimentError(.io, "could not remove \(path): \(problems.prefix(3).joined(separator: "; "))\(problems.count > 3 ? " (and \(problems.count - 3) more)" : "")")
    }
}
