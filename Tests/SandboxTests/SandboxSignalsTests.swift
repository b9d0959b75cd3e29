import CSandboxLaunch
import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing

@Suite("SandboxSignals: the monitor protocol as calls")
struct SandboxSignalsTests {
    /// Ignores SIGTERM, logs SIGUSR1, and has a child of its own: only the whole-sandbox kill
    /// ends it, and that kill must take the child too (the cgroup is removable only then).
    static let stubborn = """
        import os, signal, time
        log = open('/out/log', 'a', buffering=1)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, lambda *_: log.write('usr1\\n'))
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(60)
            os._exit(0)
        log.write('ready\\n')
        for _ in range(600):
            time.sleep(0.1)
        log.write('still running\\n')
        """

    @Test("send() reaches the payload as that signal; kill() ends the whole sandbox, children and SIGTERM-ignorers included")
    func sendAndKill() throws {
        try requireRoot()
        let dir = try TempDir(mode: 0o777)
        let log = dir.path + "/log"
        var limits = Limits()
        limits.timeoutSeconds = 30
        let policy = Policy(name: "signals", mounts: minimalMounts + [MountSpec(kind: .readWrite(source: dir.path), destination: "/out")], limits: limits)
        let plan = try PlanCompiler.compile(policy: policy, command: ["/usr/bin/python3", "-c", Self.stubborn], hostEnvironment: [:])
        let signals = try SandboxSignals()
        var options = RunOptions()
        options.signals = signals
        let runOptions = options
        let result = Locked<Result<SandboxResult, SandboxError>?>(nil)
        let worker = Thread {
            let r = Result { () throws(SandboxError) in try SandboxRunner.run(plan, options: runOptions) }
            result.withLock { result.value = r }
        }
        worker.start()
        func lines() -> [String] { ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init) }
        func wait(for line: String, seconds: Double) -> Bool {
            let until = Date().addingTimeInterval(seconds)
            while Date() < until {
                if lines().contains(line) { return true }
                usleep(20_000)
            }
            return false
        }
        try #require(wait(for: "ready", seconds: 10), "the payload never started: \(lines())")

        signals.send(SIGUSR1)
        #expect(wait(for: "usr1", seconds: 5), "SIGUSR1 never reached the payload: \(lines())")

        signals.send(SIGTERM)  // ignored by the payload: it must still be running afterwards
        usleep(300_000)
        #expect(result.withLock { result.value == nil }, "the payload ended on a SIGTERM it ignores")

        let killedAt = Date()
        signals.kill()
        while result.withLock({ result.value == nil }) && Date().timeIntervalSince(killedAt) < 10 { usleep(20_000) }
        let r = try #require(result.withLock { result.value }, "kill() did not end the sandbox within 10 s").get()
        #expect(Date().timeIntervalSince(killedAt) < 5)
        #expect(r.termination != .timedOut)
        #expect(r.leftovers.isEmpty, "processes left in the sandbox's cgroup: \(r.leftovers)")
        #expect(!lines().contains("still running"))
    }

    @Test("only signal numbers 1-64 and the kill order reach the monitor")
    func requestBytes() {
        #expect(SandboxSignals.isRequest(UInt8(SIGTERM)))
        #expect(SandboxSignals.isRequest(64))
        #expect(SandboxSignals.isRequest(UInt8(AHL_CTL_KILL)))
        #expect(!SandboxSignals.isRequest(0))
        #expect(!SandboxSignals.isRequest(65))
        #expect(!SandboxSignals.isRequest(UInt8(AHL_CTL_GO)))
    }
}
