import SandboxCLI
import ArgumentParser
import Glibc
import Sandbox

/// `autoharness vm-exec`: how the supervisor starts the held-out VM's qemu, never by hand. The
/// shares qemu exports are bound read-only and noatime in a mount namespace of its own, and
/// qemu dies with this process, which kills it when the supervisor is gone (ReadOnlyShares).
struct VMExecCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vm-exec",
        abstract: "Start qemu with its shares bound read-only and noatime, tied to the supervisor's life.",
        shouldDisplay: false)

    @Option(name: .customLong("share"), help: "SOURCE=TARGET: bind SOURCE read-only and noatime at TARGET (an empty directory).")
    var shares: [String] = []

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
        guard let program = command.first, program.hasPrefix("/") else {
            printErr("vm-exec: expected -- /absolute/program [arguments]")
            throw ExitCode(2)
        }
        do {
            let status = try ReadOnlyShares.run(shares: pairs, argv: command)
            // The child's wait status, as a shell would report it.
            if status & 0x7f == 0 { throw ExitCode((status >> 8) & 0xff) }
            throw ExitCode(128 + (status & 0x7f))
        } catch let e as SandboxError {
            printErr("vm-exec: \(e)")
            throw ExitCode(125)
        }
    }
}
