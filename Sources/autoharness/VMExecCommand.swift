import SandboxCLI
import ArgumentParser
import Glibc
import Sandbox

/// `autoharness vm-exec`: how the supervisor starts the held-out VM's qemu, never by hand: in
/// namespaces of its own on a read-only root, as an unprivileged uid, the shares it exports
/// bound read-only and noatime; qemu dies with this process, which kills it when the
/// supervisor is gone (ReadOnlyShares).
struct VMExecCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vm-exec",
        abstract: "Start qemu with least privilege (its own namespaces and read-only root, an unprivileged uid), its shares read-only and noatime, tied to the supervisor's life.",
        shouldDisplay: false)

    @Option(name: .customLong("share"), help: "SOURCE=TARGET: bind SOURCE read-only and noatime at TARGET (an empty directory below WORK/export).")
    var shares: [String] = []

    @Option(name: .customLong("read"), help: "A file the program reads, bound read-only at its own path.")
    var reads: [String] = []

    @Option(name: .customLong("work"), help: "The program's working directory, the one place it writes (given to --uid).")
    var work: String

    @Option(name: .customLong("uid"), help: "The unprivileged uid the program runs as.")
    var uid: UInt32

    @Option(name: .customLong("gid"), help: "Its gid.")
    var gid: UInt32

    @Argument(parsing: .postTerminator, help: "The program and its arguments.")
    var command: [String] = []

    func run() throws {
        var pairs: [(source: String, target: String)] = []
        for s in shares {
            guard let eq = s.firstIndex(of: "="), s.first == "/", s[s.index(after: eq)...].first == "/" else {
                printErr("vm-exec: --share '\(s)': expected /SOURCE=/TARGET")
                throw ExitCode(2)
            }
            pairs.append((String(s[..<eq]), String(s[s.index(after: eq)...])))
        }
        guard work.hasPrefix("/"), reads.allSatisfy({ $0.hasPrefix("/") }), uid != 0, gid != 0 else {
            printErr("vm-exec: --work and --read take absolute paths, --uid and --gid an unprivileged id")
            throw ExitCode(2)
        }
        guard let program = command.first, program.hasPrefix("/") else {
            printErr("vm-exec: expected -- /absolute/program [arguments]")
            throw ExitCode(2)
        }
        do {
            let status = try ReadOnlyShares.run(.init(shares: pairs, reads: reads, work: work, uid: uid, gid: gid), argv: command)
            // The child's wait status, as a shell would report it.
            if status & 0x7f == 0 { throw ExitCode((status >> 8) & 0xff) }
            throw ExitCode(128 + (status & 0x7f))
        } catch let e as SandboxError {
            printErr("vm-exec: \(e)")
            throw ExitCode(125)
        }
    }
}
