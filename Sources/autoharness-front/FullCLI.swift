import CSystemCalls
import Glibc
import PolicyModel
import PolicyStore
import Sandbox
import SandboxCLI
import SupervisorIO

/// The full CLI behind the front: where it is, what it cached, and handing a command line to it.
enum FullCLI {
    /// `../libexec/autoharness/autoharness` from the front (an installation), else the
    /// `autoharness` beside it (a build directory); never the front itself. Checked as the
    /// launcher is (`Launcher.open`): a regular file owned by root and writable by no one
    /// else, in a directory the same holds for, executed through the descriptor checked.
    static func locate() -> Result<Launcher, Launcher.Problem> {
        let dir = Launcher.executableDirectory()
        var problems: [String] = []
        for path in [dir + "/../libexec/autoharness/autoharness", dir + "/autoharness"] {
            switch Launcher.open(path: path) {
            case .success(let cli):
                var own = stat(), found = stat()
                if stat("/proc/self/exe", &own) == 0, fstat(cli.fd, &found) == 0, own.st_dev == found.st_dev, own.st_ino == found.st_ino {
                    close(cli.fd)
                    problems.append("\(path): is this front")
                    continue
                }
                return .success(cli)
            case .failure(let p):
                problems.append(p.message)
            }
        }
        return .failure(Launcher.Problem(message: problems.joined(separator: "; ")))
    }

    /// Whether `arguments` are `sandbox exec` with something to run and no request for help.
    static func asksForLaunch(_ arguments: [String]) -> Bool {
        arguments.count > 2 && arguments[0] == "sandbox" && arguments[1] == "exec" && !ExecArguments.asksForHelp(arguments.dropFirst(2))
    }

    /// The launch `arguments` ask for, prepared, if the front can run it: `sandbox exec` in
    /// the plain spellings, a policy cached by `cli`, a plan that compiles. Nil hands the
    /// line to the full CLI. Nothing on the host changes here.
    static func preparedLaunch(_ arguments: [String], fullCLI cli: Launcher) -> SandboxExecution.Prepared? {
        guard asksForLaunch(arguments), let request = ExecArguments.parse(arguments.dropFirst(2)), request.benchRepeat == 1,
              let command = try? SandboxExecution.command(of: request),
              let variables = try? SandboxExecution.variables(of: request) else { return nil }
        Timing.mark("arguments parsed")
        // What the full CLI computes from its own /proc/self/exe: the kernel's name for the
        // file and its identity, read through the descriptor that would be executed.
        let descriptor = "/proc/self/fd/\(cli.fd)"
        guard let binary = RootOwnedCache.identity(ofFile: descriptor), let path = POSIX.readLink(descriptor) else { return nil }
        let directory = POSIX.split(path).directory
        let searchPaths = PolicySearch.paths(explicit: request.policyDirs, executableDirectory: directory)
        let files = PolicyFiles(searchPaths: searchPaths)
        let key = PolicyCache.key(searchPaths: searchPaths, nameOrPath: request.policy, variables: variables, strict: true,
                                  binary: binary, launchCode: SandboxExecution.launchCode)
        guard let top = try? files.locate(request.policy, besideDirectory: nil),
              let policy = PolicyCache.lookup(key: key, top: top, files: files, in: RootOwnedCache.directory("policy")) else { return nil }
        Timing.mark("policy loaded")
        guard let prepared = try? SandboxExecution.prepare(request, command: command, policy: policy) else { return nil }
        // The monitor the full CLI would start, not one that happens to lie beside the front.
        Launcher.lookBeside(executableIn: directory)
        if request.debug {
            printErr("autoharness[debug]: sandbox exec by the front: policy \(policy.name) from the cache of \(path)")
        }
        return prepared
    }

    /// Runs the full CLI with this process's arguments and environment; returns only if it
    /// cannot (then exits 2, saying why).
    static func handOver(_ cli: Launcher) -> Never {
        Timing.mark("handed over to the full CLI")
        let argv = CommandLine.arguments.map { strdup($0) } + [nil]
        _ = ahs_execveat_fd(cli.fd, argv, environ)
        printErr("autoharness: cannot run the full command line \(cli.path): \(String(cString: strerror(errno)))")
        exit(2)
    }
}
