import ArgumentParser

@main
struct Autoharness: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "autoharness",
        abstract: "Supervise self-improving agents so that benchmark cheating is structurally impossible.",
        discussion: """
            autoharness runs the auto-harness loop (benchmark -> coding agent edits agent/agent.py -> \
            gate -> record) with the coding agent and every benchmark task inside sandboxes built \
            from policy files. The sandbox is also usable on its own:

              autoharness sandbox exec --policy base -- python3 -c 'print(1)'
              autoharness policy show benchmark-task

            Sandboxes need root (user/mount/pid/net namespaces, id maps, cgroups).
            """,
        subcommands: [SandboxCommand.self, PolicyCommand.self]
    )
}

/// Exit statuses of the CLI itself (sandboxed commands pass theirs through; see
/// `SandboxResult.exitCode` for 124-127).
enum Exit {
    static let ok: Int32 = 0
    static let failure: Int32 = 1
    static let usage: Int32 = 2
    static let timeout: Int32 = 124
    static let sandboxSetup: Int32 = 125
}
