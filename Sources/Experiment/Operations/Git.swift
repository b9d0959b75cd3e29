import Benchmark
import ExperimentModel
import Foundation
import SupervisorIO

/// The experiment's git repository, driven only by the supervisor.
///
/// Accepted snapshots are committed with plumbing (hash-object, a private index, write-tree,
/// commit-tree, update-ref), so the commit holds exactly the agent.py the gate judged even if
/// the file changed during the gate, and the user's index and working tree are never touched.
public struct Git: Sendable {
    public let root: String
    let privateIndex: String

    public init(root: String, privateIndex: String) {
        self.root = root
        self.privateIndex = privateIndex
    }

    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var command: String
        public var output: String
        public var description: String { "git \(command): \(output.trimmingCharacters(in: .whitespacesAndNewlines))" }
    }

    @discardableResult
    func run(_ args: [String], input: String? = nil, env: [String: String] = [:]) throws -> String {
        var environment = ProcessInfo.processInfo.environment
        for (k, v) in env { environment[k] = v }
        // Never let a repository config or hook run code: the supervisor is root.
        environment["GIT_CONFIG_NOSYSTEM"] = "1"
        let r = try ChildProcess.run(
            ["/usr/bin/git", "-C", root, "-c", "user.name=autoharness", "-c", "user.email=supervisor@autoharness.invalid",
             "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null"] + args,
            environment: environment, input: input)
        guard r.succeeded else { throw Failure(command: args.joined(separator: " "), output: r.output) }
        return r.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `git init` and a first commit of the files given (paths relative to the root).
    public func initialize(committing paths: [String], message: String) throws {
        try run(["init", "-q", "-b", "main"])
        try run(["add", "--"] + paths)
        try run(["commit", "-q", "-m", message])
    }

    /// Creates (but does not publish) a commit whose tree is HEAD's with `path` replaced by
    /// the contents of `file`. Returns the commit id.
    public func prepareCommit(file: String, at path: String, message: String) throws -> String {
        let env = ["GIT_INDEX_FILE": privateIndex]
        let blob = try run(["hash-object", "-w", "--", file])
        try run(["read-tree", "HEAD"], env: env)
        try run(["update-index", "--add", "--cacheinfo", "100644,\(blob),\(path)"], env: env)
        let tree = try run(["write-tree"], env: env)
        let head = try run(["rev-parse", "HEAD"])
        return try run(["commit-tree", tree, "-p", head, "-F", "-"], input: message)
    }

    /// Moves the current branch to `commit` (only forward from its parent).
    public func publish(_ commit: String) throws {
        let parent = try run(["rev-parse", "\(commit)^"])
        try run(["update-ref", "HEAD", commit, parent])
    }

    /// The `Ledger-Head: SEQ:HASH` trailer of the newest commit that has one.
    public func latestLedgerHead() -> (seq: Int64, hash: String)? {
        guard let line = try? run(["log", "-1", "--format=%(trailers:key=Ledger-Head,valueonly)", "--grep=Ledger-Head:"]),
              let colon = line.firstIndex(of: ":"), let seq = Int64(line[..<colon]) else { return nil }
        return (seq, String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces))
    }

    public func exists(_ commit: String) -> Bool { (try? run(["cat-file", "-e", "\(commit)^{commit}"])) != nil }

    /// Whether `commit` is an ancestor of (or equal to) HEAD.
    public func isPublished(_ commit: String) -> Bool { (try? run(["merge-base", "--is-ancestor", commit, "HEAD"])) != nil }
}

extension Git.Failure: AutoharnessError {
    /// git refusing the supervisor's own commit: the repository's or the system's fault.
    public var category: ErrorCategory { .io }
}
