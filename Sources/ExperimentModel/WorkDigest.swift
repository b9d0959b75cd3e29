import Crypto
import Foundation
import SupervisorIO

/// The digests autoharness compares and records: the running executable, the policy files
/// the loader would read, a task directory's files (`taskFiles`).
public enum WorkDigest {
    public static func hex(_ bytes: some Sequence<UInt8>) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    /// SHA-256 of the running executable (read through /proc/self/exe).
    public static func executable() throws -> String { try file("/proc/self/exe") }

    /// SHA-256 of a file (an executable: up to 1 GiB).
    public static func file(_ path: String) throws -> String {
        switch InputFile.read(path, cap: 1 << 30) {
        case .success(let bytes): return hex(SHA256.hash(data: bytes))
        case .failure(let p): throw ExperimentError(.io, "\(path): \(p.explanation("an executable"))")
        }
    }

    /// SHA-256 over every `*.yaml` of the search paths' directories, by name (first found
    /// wins, as the loader resolves them) and content.
    public static func policies(_ searchPaths: [String]) throws -> String {
        var seen: [String: [UInt8]] = [:]
        for dir in searchPaths {
            for name in FileSystem.names(in: dir).sorted() where name.hasSuffix(".yaml") && seen[name] == nil {
                switch InputFile.read(dir + "/" + name, cap: 4 << 20) {
                case .success(let bytes): seen[name] = bytes
                case .failure(let p): throw ExperimentError(.io, "\(dir)/\(name): \(p.explanation("a policy"))")
                }
            }
        }
        var hasher = SHA256()
        for name in seen.keys.sorted() {
            hasher.update(data: Array(name.utf8) + [0])
            hasher.update(data: Array(String(seen[name]!.count).utf8) + [0])
            hasher.update(data: seen[name]!)
        }
        return hex(hasher.finalize())
    }
}

extension WorkDigest {
    /// Files larger than this are measured by size only (`TaskFilesDigest` says how many).
    static let maxTaskFile = 256 << 20

    /// The `sha256sum`-style manifest digest of every regular file under `root`.
    public static func taskFiles(_ root: String) -> TaskFilesDigest? {
        var lines: [(path: [UInt8], line: String)] = []
        func walk(_ dir: Int32, _ prefix: String) {
            guard let names = FileSystem.entries(of: dir) else { return }
            for name in names {
                let shown = FileSystem.display(name)
                guard let st = FileSystem.entryStatus(at: dir, name) else { continue }
                if FileSystem.isDirectory(st) {
                    let sub = FileSystem.openDirectory(at: dir, name)
                    guard sub >= 0 else { continue }
                    defer { close(sub) }
                    walk(sub, prefix + shown + "/")
                } else if FileSystem.isRegular(st), let bytes = FileSystem.readCapped(at: dir, shown, cap: maxTaskFile) {
                    let path = prefix + shown
                    lines.append((Array(path.utf8), WorkDigest.hex(SHA256.hash(data: bytes)) + "  " + path + "\n"))
                }
            }
        }
        let fd = FileSystem.openDirectory(root)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        walk(fd, "")
        lines.sort { $0.path.lexicographicallyPrecedes($1.path) }
        let manifest = lines.map(\.line).joined()
        return TaskFilesDigest(path: root, files: lines.count, manifestSHA256: WorkDigest.hex(SHA256.hash(data: Array(manifest.utf8))))
    }
}

extension WorkDigest {
    /// SHA-256 over `paths` in the order given, each by path, size and content (a tool's files
    /// a worker node must hold as the supervisor does: `NodeTool.digestedFiles`). Empty `paths`
    /// digest to nil. A file that cannot be read throws, naming it.
    public static func files(_ paths: [String]) throws -> String? {
        guard !paths.isEmpty else { return nil }
        var hasher = SHA256()
        for path in paths {
            switch InputFile.read(path, cap: 1 << 30) {
            case .success(let bytes):
                hasher.update(data: Array(path.utf8) + [0] + Array(String(bytes.count).utf8) + [0])
                hasher.update(data: bytes)
            case .failure(let p): throw ExperimentError(.io, "\(path): \(p.explanation("a file of the tool's"))")
            }
        }
        return hex(hasher.finalize())
    }
}

extension WorkDigest {
    /// Feeds what `fd` reads, to its end, into `hasher`, a MiB at a time; its size, or nil when
    /// a read fails.
    public static func feed(_ fd: Int32, into hasher: inout SHA256) -> Int? {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var size = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return nil }
            if n == 0 { return size }
            hasher.update(data: buffer[..<n])
            size += n
        }
    }

    /// SHA-256 over everything under `root` (not following links), in name order: each entry's
    /// relative path, kind, owner, group and permission bits, a file's content, a link's
    /// target (a directory a node and the supervisor must hold alike: the verifier tools).
    /// With `cache` (a private directory), a digest is kept under the tree's fingerprint (each
    /// entry's path, inode, size, owners, mode, and modification and change times): the
    /// contents are read again only when an entry changed, which moves its change time.
    /// Throws, naming it, when an entry cannot be read.
    public static func tree(_ root: String, cache: String? = nil) throws -> String {
        guard let cache else { return try treeContents(root) }
        let file = cache + "/tree-" + (try treeWalk(root, contents: false))
        if case .success(let bytes) = InputFile.read(file, cap: 128) {
            let text = String(decoding: bytes, as: UTF8.self)
            if text.count == 64, text.allSatisfy(\.isHexDigit) { return text }
        }
        let digest = try treeContents(root)
        if FileSystem.makeDirectories(cache, mode: 0o700) == nil {
            try? AtomicFile.write(Array(digest.utf8), to: file, mode: 0o600)
        }
        return digest
    }

    static func treeContents(_ root: String) throws -> String { try treeWalk(root, contents: true) }

    /// The tree's digest by contents, or its fingerprint by status alone.
    static func treeWalk(_ root: String, contents: Bool) throws -> String {
        var hasher = SHA256()
        var unread: String?
        do throws(IOFailure) {
            try TreeVisit.visit(root) { path, st, content in
                hasher.update(data: Array("\(path)\0\(st.st_mode & S_IFMT) \(st.st_uid) \(st.st_gid) \(st.st_mode & 0o7777)\0".utf8))
                if !contents {
                    hasher.update(data: Array("\(st.st_dev) \(st.st_ino) \(st.st_size) \(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec) \(st.st_ctim.tv_sec).\(st.st_ctim.tv_nsec)\0".utf8))
                }
                switch content {
                case .none: break
                case .link(let target): hasher.update(data: target + [0])
                case .file(let fd):
                    guard contents else { break }
                    guard let size = feed(fd, into: &hasher) else {
                        unread = unread ?? "\(root)/\(path)"
                        break
                    }
                    hasher.update(data: Array("\0\(size)\0".utf8))
                }
            }
        } catch {
            throw ExperimentError(.io, "digesting \(root)", cause: error)
        }
        if let unread { throw ExperimentError(.io, "\(unread): cannot be read") }
        return hex(hasher.finalize())
    }
}
