// autoharness-front: `autoharness sandbox exec` without the full CLI's start-up.
//
// The full CLI is a 120 MB static executable (Foundation, YAML, SQLite, ArgumentParser); its
// start-up and the first use of its generic types, looked up among all its conformances, cost
// more than a millisecond of every one-shot launch. This front links only what a launch needs
// (SandboxCLI, Sandbox, PolicyModel) and runs a launch itself when:
// - the command line is `sandbox exec` in the plain spellings `ExecArguments` reads;
// - the policy it names is in the full CLI's policy cache (`PolicyCache`): stored by that very
//   binary (its file's identity is in the key), with every layer file found again by the same
//   lookup and equal byte for byte;
// - the plan compiles (sources resolved afresh, as on every launch).
// Before all this, before even the Swift runtime starts, a launch service (`autoharness sandbox
// serve`, `LaunchService`) answering at its socket is asked to run the launch (Sources/
// CFrontStart); it declines what it would not run as this front would, and nothing has run then.
// Everything else, and every failure before the launch, goes to the full CLI unchanged
// (`execveat` of the checked file), which answers as it always has: help, errors, every other
// command, and a miss, after which it stores the policy for the next launch.
//
// Installed by scripts/install as `bin/autoharness`, with the full CLI in
// `libexec/autoharness/autoharness`; in a build directory it is `autoharness-front` and the full
// CLI is the `autoharness` beside it.
import CSystemCalls
import Glibc
import PolicyModel
import PolicyStore
import Sandbox
import SandboxCLI
import SupervisorIO

Timing.mark("process started (loader, static initialisers)")
// As in the full CLI: a closed pipe fails a write with EPIPE instead of killing the supervisor.
signal(SIGPIPE, SIG_IGN)

let fullCLI: Launcher
switch FullCLI.locate() {
case .success(let found): fullCLI = found
case .failure(let problem):
    printErr("autoharness: cannot find the full command line this front hands over to (the full CLI must be root's and writable only by root, in a directory the same holds for): \(problem.message)")
    exit(2)
}

let arguments = Array(CommandLine.arguments.dropFirst())
if let prepared = FullCLI.preparedLaunch(arguments, fullCLI: fullCLI) {
    // No launch service answered at its socket (Sources/CFrontStart): one is started there for
    // the next launches, as Bazel's client starts its server; this launch goes on here.
    if ahs_launch_service_absent() != 0, let socket = LaunchService.frontSocket(), LaunchService.frontStarts(at: socket) {
        let start = LaunchService.frontStart(socket: socket, fullCLI: fullCLI.path, environment: hostEnvironment())
        let argv = start.arguments.map { strdup($0) } + [nil]
        let envp = start.environment.map { strdup($0) } + [nil]
        let e = ahs_start_detached(fullCLI.fd, argv, envp)
        if e != 0 { printErr("autoharness: could not start a launch service at \(socket) (this launch runs here): \(String(cString: strerror(e)))") }
        Timing.mark("launch service started for the next launches")
    }
    // The first change to the host: as the full CLI does before any `sandbox` command.
    let host = CgroupHost.current
    if let done = host.delegation { printErr("autoharness: \(done)") }
    for line in host.endOrphanedSandboxes() { printErr("autoharness: \(line)") }
    Timing.mark("cgroup host detected, orphans swept")
    exit(SandboxExecution.launch(prepared))
}
FullCLI.handOver(fullCLI)
