import ArgumentParser
import Experiment
import ExperimentModel
import Foundation
import Sandbox
import SandboxCLI
import SandboxPolicy
import SupervisorIO
import WireCoding

struct PolicySuggestCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "suggest",
        abstract: "From an audit file of a benign session, the smallest policy extending the one it ran under that would have refused none of it.",
        discussion: """
            Reads the audit (JSON Lines: an experiment's .autoharness/run/audit.jsonl for the coding agent, or \
            `sandbox exec --audit FILE`) and prints a policy file: `extends:` the policy the session ran under, \
            plus each refused system call allowed, each refused host added to the proxy's allowlist, each limit \
            reached doubled, every entry with how often it was refused. Never suggested, and listed as what no \
            policy makes clean: hard-denied calls, calls the default profile withholds as a channel (the \
            page-cache oracles, clone3), calls refused by an argument rule, other ABIs, what a policy of the \
            chain denies on purpose, and integrity records (reward tampering, planted links). sched_setaffinity \
            and pidfd_open are suggested as `seccomp.quiet` (still refused, not reported). For the coding \
            agent, a runner or triage, the hosts are the experiment's setting to change, not the policy's. \
            The policy is POLICY, or the role's in -C EXP, or the one the audit names. Exit 0 when the \
            suggestion covers every record, 1 when some cannot be made clean (the file is still written).
            """
    )

    @Option(name: .customLong("from-audit"), help: ArgumentHelp("The audit file.", valueName: "AUDIT"))
    var audit: String

    @Option(name: .customLong("policy-dir"), help: "Directory searched for policies named by `extends:`.")
    var policyDirs: [String] = []

    @Option(help: ArgumentHelp("The sandbox the policy is for: \(PolicyRole.allCases.map(\.rawValue).joined(separator: ", ")).", valueName: "ROLE"))
    var role: String?

    @Option(name: [.customShort("C"), .customLong("dir")], help: "An experiment: its policy directory is searched, and --role names its policy.")
    var directory: String?

    @Option(help: ArgumentHelp("Only this sandbox's records (its id, `sbx-...`).", valueName: "ID"))
    var sandbox: String?

    @Flag(help: "Refuse without a report what would be allowed (seccomp.quiet), for a session that did without it.")
    var quiet = false

    @Option(name: [.customShort("o"), .customLong("output")], help: ArgumentHelp("Write the policy to FILE (it must not exist) instead of standard output.", valueName: "FILE"))
    var output: String?

    @Argument(help: "The policy the session ran under (a file or name).")
    var policy: String?

    func run() throws {
        let chosen = try PolicyLintCommand.role(role)
        var dirs = policyDirs
        var name = policy
        if let directory {
            let exp = try PolicyLintCommand.experiment(directory)
            if let d = exp.config.policyDirectory { dirs.insert(d.hasPrefix("/") ? d : exp.root + "/" + d, at: 0) }
            if name == nil, let chosen {
                name = exp.config.rolePolicies.first { $0.role == chosen }?.name
                if name == nil { throw ValidationError("--role \(chosen.rawValue): the experiment runs no such sandbox") }
            }
        }
        let text: String
        switch InputFile.read(audit, cap: 256 << 20) {
        case .success(let bytes): text = String(decoding: bytes, as: UTF8.self)
        case .failure(let why): throw ValidationError("--from-audit \(audit): \(why.explanation("an audit file"))")
        }
        let records = try PolicySuggest.records(text, file: audit)
        let named = Set(records.compactMap(\.policy))
        if name == nil {
            guard named.count == 1, let only = named.first else {
                throw ValidationError(named.isEmpty
                    ? "\(audit) names no policy: give the policy the session ran under (POLICY, or -C EXP --role ROLE)"
                    : "\(audit) has records of \(named.sorted().map(PolicySuggest.commentSafe).joined(separator: ", ")): give the policy to suggest for")
            }
            // Printed in errors and written into the file: the supervisor's names are plain.
            guard PolicySuggest.commentSafe(only) == only else {
                throw ValidationError("\(audit) names the policy \(PolicySuggest.commentSafe(only)), which is no policy's name")
            }
            name = only
        }
        if let sandbox, !records.contains(where: { $0.sandbox == sandbox }) {
            throw ValidationError("--sandbox \(sandbox): no record of it in \(audit)")
        }
        let loader = PolicyLocator.loader(dirs)
        var suggestion: PolicySuggest.Suggestion?
        var file = ""
        try PolicyCheck.judge([name!], loader) { n in
            let input = try loader.lintInput(n)
            let allowed = try SeccompCompiler.compile(input.policy.effectiveSeccomp).allowedNames
            // The audit's spellings of this policy: a name, or a path relative to where the
            // session started; compared by the file each one is here.
            let file0 = PolicySearch.canonical(input.file) ?? input.file
            let spellings = Set(named.filter { $0 == n || $0 == input.policy.name || (try? loader.resolvePath($0)).flatMap(PolicySearch.canonical) == file0 })
            let s = PolicySuggest.suggest(records, input: input, policyNames: spellings.union([input.policy.name]), allowed: allowed,
                                          role: chosen, sandbox: sandbox, quietly: quiet)
            // A policy found by name is extended by name; one given as a file, by its absolute
            // path (a relative one would be read beside the new file).
            let byName = !n.contains("/") && !n.hasSuffix(".yaml") && !n.hasSuffix(".yml")
            file = PolicySuggest.yaml(s, parent: byName ? n : file0, policy: input.policy, audit: audit)
            suggestion = s
            return true
        }
        guard let s = suggestion else { return }
        if let output {
            let fd = open(output, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw ExperimentError(.io, "--output \(output): \(ErrnoName.describe(errno))") }
            defer { close(fd) }
            if let e = Descriptor.writeAll(fd, Array(file.utf8)) { throw ExperimentError(.io, "--output \(output): \(ErrnoName.describe(e))") }
        } else {
            print(file, terminator: "")
        }
        for (p, n) in s.otherPolicies.sorted(by: { $0.key < $1.key }) { printErr("left out: \(n) record(s) of sandboxes under \(PolicySuggest.commentSafe(p))") }
        if let key = s.hostsKey, !s.hosts.isEmpty {
            printErr("add to experiment_config.yaml's \(key): \(s.hosts.map(\.host).joined(separator: ", "))")
        }
        for u in s.unclean { printErr("not clean by any policy: \(PolicySuggest.commentSafe(u.what)) (\(u.count)): \(PolicySuggest.commentSafe(u.why))") }
        if s.considered == 0 { printErr("\(audit): nothing refused under \(PolicySuggest.commentSafe(name!)): nothing to suggest") }
        if !s.complete { throw ExitCode(Exit.failure) }
    }
}
