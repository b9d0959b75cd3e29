import Foundation
import Testing

@testable import SandboxPolicy
import SupervisorIO

/// Inputs are bounded: file sizes before reading, numbers before use.
@Suite("Policy input bounds")
struct InputBoundsTests {
    @Test("a policy file over the 1 MiB cap is refused with its size and the cap, without being parsed")
    func oversizedFile() throws {
        let dir = try PolicyDirectory([:])
        let path = dir.path + "/big.yaml"
        // Sparse: 2 MiB of NULs a parser would reject for another reason if it ever read them.
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        #expect(truncate(path, 2 << 20) == 0)
        let e = try #require(dir.error("big"))
        #expect(e.message == "policy file \(path): 2097152 bytes (2 MiB), over the 1 MiB cap for a policy file", "\(e)")
    }

    @Test("a FIFO named as a policy is refused at once, not waited on")
    func fifo() throws {
        let dir = try PolicyDirectory([:])
        let path = dir.path + "/fifo.yaml"
        #expect(mkfifo(path, 0o600) == 0)
        // The loader only looks up regular files by name; a path reaches the reader directly.
        switch InputFile.read(path, cap: 1 << 20) {
        case .failure(let problem): #expect(problem == .notRegular)
        case .success: Issue.record("a FIFO was read")
        }
    }

    @Test("numeric limits beyond their bound are refused at file:line, naming the value and the bound", arguments: [
        ("limits:\n  pids: 99999999\n", "limits.pids must be a positive integer no larger than 4194304 (got '99999999')"),
        ("limits:\n  nofile: 2000000\n", "limits.nofile must be a positive integer no larger than 1048576 (got '2000000')"),
        ("limits:\n  cpu_seconds: 99999999999\n", "no larger than 31536000 (got '99999999999')"),
        ("limits:\n  memory: 2048T\n", "limits.memory must be a positive size such as 1024, 512K, 64M or 1.5G, at most 1024T (got '2048T')"),
        ("limits:\n  cpus: 5000\n", "at most 1024, e.g. 0.5 or 2 (got '5000')"),
        ("limits:\n  timeout: 100000000000000000000000000000\n", "at most 168h, or none (got '100000000000000000000000000000')"),
        ("limits:\n  timeout: 8000h\n", "at most 168h, or none (got '8000h')"),
    ])
    func boundedLimits(yaml: String, fragment: String) throws {
        let dir = try PolicyDirectory(["p.yaml": yaml])
        let e = try #require(dir.error("p"))
        #expect(e.where_ == "p.yaml:2", "\(e)")
        #expect(e.message.contains(fragment), "\(e.message)")
    }

    @Test("a tmpfs size is bounded like the other sizes")
    func boundedTmpfs() throws {
        let dir = try PolicyDirectory(["p.yaml": "filesystem:\n  mounts:\n    - tmpfs: /tmp\n      size: 4096T\n"])
        let e = try #require(dir.error("p"))
        #expect(e.where_ == "p.yaml:4", "\(e)")
        #expect(e.message.contains("at most 1024T (got '4096T')"), "\(e.message)")
    }

    @Test("the largest allowed values still load")
    func boundsInclusive() throws {
        let dir = try PolicyDirectory(["p.yaml": "limits:\n  pids: 4194304\n  memory: 1024T\n  cpus: 1024\n  timeout: 168h\n"])
        let p = try dir.load("p")
        #expect(p.limits.pids == 4_194_304 && p.limits.memory == 1 << 50 && p.limits.cpus == 1024 && p.limits.timeoutSeconds == 604_800)
    }
}
