import Glibc
import Sandbox
import SupervisorIO

/// A tool that reads train evidence and writes one file, in a sandbox of its own (`triage:`):
/// the supervisor's inputs at /work/in, a read-only tree at /work/run (links never followed),
/// its output on the run's tmpfs at /work/out, its model API behind the proxy's inference gate
/// when `settings.networkInference` names one. Nothing of agent.py is mounted. The output is
/// read after the sandbox is gone, relative to the output directory, without following a
/// link, capped; then the tmpfs is unmounted.
public enum EvidenceTool {
    /// Where the sandbox finds the CA bundle that trusts the inference gate.
    public static let trustBundlePath = ToolRun.trustBundlePath

    public struct Result: Sendable {
        /// The output file's bytes, or why it could not be taken.
        public var output: Swift.Result<[UInt8], InputFile.Problem>
        /// How the sandbox ended ("exited 0", "timed out", ...), and whether it exited 0.
        public var exit: String
        public var succeeded: Bool
        /// The ends of its stderr and stdout (train evidence only went in: the operator may
        /// read them).
        public var stderrTail: String
        public var stdoutTail: String
        public var seconds: Double
    }

    /// Runs `argv` under `settings` (its `runnerPolicy` is the policy) with `inputs` written to
    /// /work/in and `tree` bound at /work/run, and takes /work/out/`output` (at most `cap`
    /// bytes).
    public static func run(settings: ToolSettings, context: AdapterRunContext, argv: [String], environment: [String],
                           inputs: [(name: String, bytes: [UInt8])], tree: String, output: String, cap: Int,
                           label: String) throws(BenchmarkError) -> Result {
        let run = try ToolRun(settings: settings, context: context, ids: [])
        defer { run.finish() }
        for (name, bytes) in inputs { try run.writeInput(name, bytes) }
        let inv = ToolInvocation(policy: settings.runnerPolicy, argv: argv, withAgent: false, environment: environment,
                                 runDirectory: tree, outputName: "app", label: label)
        let exit = run.launch(inv, total: 0)
        let dir = run.openOutput()
        defer { if dir >= 0 { close(dir) } }
        let taken: Swift.Result<[UInt8], InputFile.Problem> = dir < 0 ? .failure(.missing) : InputFile.read(at: dir, output, cap: cap, strict: true)
        let out = FileSystem.readCapped(at: run.scratch.outFD, "app.stdout", cap: 1 << 20).map { String(decoding: $0.suffix(2048), as: UTF8.self) } ?? ""
        return Result(output: taken, exit: exit.summary, succeeded: exit.succeeded, stderrTail: ToolRun.printable(exit.stderrTail),
                      stdoutTail: ToolRun.printable(out), seconds: exit.seconds)
    }
}
