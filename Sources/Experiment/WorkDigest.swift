import Crypto
import Foundation
import SupervisorIO

/// The digests a node and the supervisor compare: the running executable, and the policy
/// files the loader would read.
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
