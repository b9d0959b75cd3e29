import ArgumentParser
import Execution
import Experiment
import SandboxCLI

/// `autoharness vm-guest`: run by the held-out VM's init, never by hand. It runs the held-out
/// tasks of the request and writes the answer to the results port (HeldOutGuest).
struct VMGuestCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vm-guest",
        abstract: "Inside a held-out VM: run the request's tasks and answer on the results port.",
        shouldDisplay: false)

    @Option(help: "The request file (in the guest's initramfs).")
    var request: String

    @Option(help: "The results port's device.")
    var answer: String

    @Option(help: "The egress port's device (to the host's proxy), when the request has egress.")
    var egress: String?

    func run() throws {
        do {
            try HeldOutGuest.serve(requestPath: request, answerPath: answer, egressPath: egress, log: { line in printErr("vm-guest: \(line)") })
        } catch {
            printErr("vm-guest: \(error)")
            throw ExitCode(1)
        }
    }
}
