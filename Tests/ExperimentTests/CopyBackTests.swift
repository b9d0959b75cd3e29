import BrokerWire
@testable import Experiment
@testable import Execution
@testable import ExperimentModel
import Foundation
import Testing
import TestSupport
import WireCoding

// Copy-back is the only way anything written by the coding agent reaches the supervisor:
// each refusal below is one decision of `AgentFile.read`, tested on real files.

@Suite("Copy-back from the staging directory")
struct CopyBackTests {
    /// Lives as long as the test (a new instance per test).
    let dir: TempDir

    init() throws { dir = try TempDir() }

    func staging(_ agent: String = "print(1)\n") throws -> (TempDir, Staging) {
        let s = try Staging.create(at: dir.path + "/agent", from: Array(agent.utf8), owner: (getuid(), getgid()))
        return (dir, s)
    }

    func refusal(_ s: Staging) throws -> String? {
        if case .failure(let r) = try s.takeAgent() { return r.reason }
        return nil
    }

    @Test("a regular agent.py is taken byte for byte")
    func regular() throws {
        let (_, s) = try staging("class HarnessAgent: pass\n")
        guard case .success(let bytes) = try s.takeAgent() else { Issue.record("refused"); return }
        #expect(String(decoding: bytes, as: UTF8.self) == "class HarnessAgent: pass\n")
    }

    @Test("a symlink is refused, not followed (even to a readable file)")
    func symlink() throws {
        let (dir, s) = try staging()
        let secret = try dir.file("secret.txt", "TOKEN")
        unlink(s.path + "/agent.py")
        #expect(Glibc.symlink(secret, s.path + "/agent.py") == 0)
        #expect(try refusal(s)?.contains("symbolic link") == true)
    }

    @Test("a FIFO is refused without blocking the supervisor")
    func fifo() throws {
        let (_, s) = try staging()
        unlink(s.path + "/agent.py")
        #expect(mkfifo(s.path + "/agent.py", 0o644) == 0)
        #expect(try refusal(s) == "is not a regular file")
    }

    @Test("a directory is refused")
    func directory() throws {
        let (_, s) = try staging()
        unlink(s.path + "/agent.py")
        #expect(mkdir(s.path + "/agent.py", 0o755) == 0)
        #expect(try refusal(s) != nil)
    }

    @Test("a file with a second hard link is refused")
    func hardLink() throws {
        let (_, s) = try staging()
        #expect(link(s.path + "/agent.py", s.path + "/other") == 0)
        #expect(try refusal(s)?.contains("hard links") == true)
    }

    @Test("a file over the size cap is refused")
    func oversized() throws {
        let (_, s) = try staging(String(repeating: "#", count: AgentFile.maxBytes + 1))
        #expect(try refusal(s)?.contains("limit") == true)
    }

    @Test("a missing agent.py is refused")
    func missing() throws {
        let (_, s) = try staging()
        unlink(s.path + "/agent.py")
        #expect(try refusal(s) == "does not exist")
    }

    @Test("every other entry is listed as extra, never followed, and classed: routine, dropped, or an import hook")
    func extras() throws {
        let (_, s) = try staging()
        _ = FileManager.default.createFile(atPath: s.path + "/helper.py", contents: Data("x".utf8))
        #expect(Glibc.symlink("/etc/shadow", s.path + "/link") == 0)
        for d in ["__pycache__", "pkg", "plain"] { try FileManager.default.createDirectory(atPath: s.path + "/" + d, withIntermediateDirectories: true) }
        _ = FileManager.default.createFile(atPath: s.path + "/pkg/__init__.py", contents: Data())
        // A link named like a package's marker does not make a package.
        #expect(Glibc.symlink("/usr/lib/python3/dist-packages", s.path + "/linked") == 0)
        for f in [".agent.py.swp", "agent.py~", ".#agent.py", "x.pth", "sitecustomize.py"] {
            _ = FileManager.default.createFile(atPath: s.path + "/" + f, contents: Data())
        }
        let got = Dictionary(uniqueKeysWithValues: try s.extraEntries().entries.map { ($0.name, $0.kind) })
        #expect(got == ["helper.py": .dropped, "link": .dropped, "__pycache__": .routine, "pkg": .importHook, "plain": .dropped,
                        "linked": .dropped, ".agent.py.swp": .routine, "agent.py~": .routine, ".#agent.py": .routine,
                        "x.pth": .importHook, "sitecustomize.py": .importHook])
        let capped = try s.extraEntries(limit: 1)
        #expect(capped.entries.count == 1 && capped.total == 11)
    }

    @Test("restoring agent.py replaces a planted symlink instead of writing through it")
    func restoreDoesNotFollow() throws {
        let (dir, s) = try staging()
        let target = try dir.file("target.txt", "UNTOUCHED")
        unlink(s.path + "/agent.py")
        #expect(Glibc.symlink(target, s.path + "/agent.py") == 0)
        #expect(Glibc.symlink(target, s.path + "/.agent.py.autoharness-\(getpid())") == 0)
        try s.replaceAgent(with: Array("restored\n".utf8))
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "UNTOUCHED")
        guard case .success(let bytes) = try s.takeAgent() else { Issue.record("refused"); return }
        #expect(String(decoding: bytes, as: UTF8.self) == "restored\n")
    }

    @Test("a name with control characters is escaped before it is recorded: C0, DEL, C1 (U+009B is a terminal's CSI), bidi overrides and line separators")
    func printableNames() {
        #expect(printable("a\nb\u{1B}[2J") == "a\\x0ab\\x1b[2J")
        #expect(printable("x\u{9B}2Jy\u{202E}z\u{2028}") == "x\\u{009b}2Jy\\u{202e}z\\u{2028}")
        #expect(noteLine("a\u{9B}b\u{202E}c") == "a bc", "a note: C1 made a space, a bidi override dropped")
        #expect(printable(String(repeating: "x", count: 500)).count == 201)
    }
}

@Suite("Broker wire format")
struct BrokerWireTests {
    @Test("a request round-trips, empty arguments included")
    func roundTrip() throws {
        let argv = ["benchmark", "--task-ids", "", "add-1", "ünï"]
        let bytes = BrokerWire.encodeRequest(argv)
        guard case .success(let n) = BrokerWire.bodyLength(header: Array(bytes[0..<8])) else { Issue.record("header"); return }
        #expect(n == bytes.count - 8)
        #expect(try BrokerWire.decodeArguments(Array(bytes[8...])).get() == argv)
    }

    @Test("bad magic, oversized bodies, too many arguments and invalid UTF-8 are refused")
    func refusals() {
        #expect(BrokerWire.bodyLength(header: Array("GET / HT".utf8)) == .failure(.badMagic))
        #expect(BrokerWire.bodyLength(header: BrokerWire.magic + Frame.u32(UInt32(BrokerWire.maxRequest + 1)))
                == .failure(.tooLarge(BrokerWire.maxRequest + 1)))
        #expect(BrokerWire.bodyLength(header: Array("AHB1".utf8)) == .failure(.truncated))
        let many = [UInt8](repeating: 0, count: BrokerWire.maxArguments)
        #expect(BrokerWire.decodeArguments(many) == .failure(.tooManyArguments(BrokerWire.maxArguments + 1)))
        #expect(BrokerWire.decodeArguments([0x61, 0xFF]) == .failure(.notUTF8))
    }
}

@Suite("Run configuration")
struct RunConfigTests {
    func parse(_ extra: String) throws -> ExperimentConfig {
        try ExperimentConfig.parse("benchmark: local\ndataset: d\n" + extra, file: "c.yaml")
    }

    @Test("min_improvement defaults to one test task's worth; auto says so explicitly; 0 means strictly greater")
    func minImprovement() throws {
        #expect(try parse("").requiredImprovement(testTasks: 4) == 0.25)
        #expect(try parse("gate:\n  min_improvement: auto\n").requiredImprovement(testTasks: 20) == 0.05)
        #expect(try parse("gate:\n  min_improvement: 0\n").requiredImprovement(testTasks: 4) == 0)
    }

    @Test("coding_agent and sandbox.network keys are read and checked, with the line of each problem")
    func codingAgentKeys() throws {
        let c = try parse("""
            sandbox:
              network:
                inference: [api.anthropic.com:443]
                allow: [mirror.example:443]
                upstream_ca: /etc/corp-ca.pem
                tunnelled_keys: [MIRROR_TOKEN]
            coding_agent:
              command: [claude, -p, "{prompt}"]
              env_pass: [ANTHROPIC_API_KEY, MIRROR_TOKEN]
              binds: [/opt/claude]
              restart_backoff: 1
              max_crashes: 2
            gate:
              on_reject: keep
              max_non_improving: 3
            """)
        #expect(c.networkAllow == ["mirror.example:443"] && c.agentInference == ["api.anthropic.com:443"])
        #expect(c.agentUpstreamCA == "/etc/corp-ca.pem" && c.agentTunnelledKeys == ["MIRROR_TOKEN"])
        #expect(AgentGate.credentialNames(c) == ["ANTHROPIC_API_KEY"], "a tunnelled key is passed as it is")
        #expect(c.codingAgent.command == ["claude", "-p", "{prompt}"])
        #expect(c.codingAgent.envPass == ["ANTHROPIC_API_KEY", "MIRROR_TOKEN"] && c.codingAgent.binds == ["/opt/claude"])
        #expect(c.codingAgent.restartBackoff == 1 && c.codingAgent.maxCrashes == 2)
        #expect(c.gate.onReject == .keep && c.gate.maxNonImproving == 3)

        let bad = """
            sandbox:
              network:
                allow: [https://api.anthropic.com]
            coding_agent:
              env_pass: [BAD-NAME]
              binds: [relative/dir]
            """
        let text = try refusal(bad)
        #expect(text.contains("c.yaml:5: sandbox.network.allow: 'https://api.anthropic.com' is not host:port"), "\(text)")
        #expect(text.contains("c.yaml:7:") && text.contains("c.yaml:8:"), "\(text)")
        #expect(text.contains("'BAD-NAME' is not a variable name"))
        #expect(text.contains("'relative/dir' must be an absolute path"))

        // A model API as a plain tunnel would put the real key in the sandbox: refused at its
        // line; a tunnelled key must be one the agent is passed.
        let plain = """
            sandbox:
              network:
                allow: [api.anthropic.com:443]
                tunnelled_keys: [OTHER_KEY]
            coding_agent:
              env_pass: [ANTHROPIC_API_KEY]
            """
        let tunnel = try refusal(plain)
        #expect(tunnel.contains("sandbox.network.allow: api.anthropic.com:443 is a model API: list it under sandbox.network.inference"), "\(tunnel)")
        #expect(tunnel.contains("the real key"), "\(tunnel)")
        #expect(tunnel.contains("sandbox.network.tunnelled_keys: OTHER_KEY is not in coding_agent.env_pass"), "\(tunnel)")
    }

    /// What `parse` refuses `text` with (the test fails if it accepts it).
    func refusal(_ text: String) throws -> String {
        do {
            _ = try parse(text)
        } catch let e as ConfigErrors {
            return e.description
        }
        Issue.record("accepted: \(text)")
        return ""
    }
}
