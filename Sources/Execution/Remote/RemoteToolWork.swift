import Benchmark
import ExperimentModel
import Foundation
import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

/// A worker node's run of a shard of a tool benchmark's run (`WorkRequest.tool`): the tool's
/// adapter, rebuilt for the shard's ids (before the nonce is claimed, so that a node whose copy
/// of the tool lacks one refuses it), runs as it runs on the supervisor's host (its runner
/// sandbox with agent.py, then its scorer without), with the request's agent.py; the tool's
/// install, binds and `env_pass` variables are this node's own, at the supervisor's paths and
/// names. The answer is a local request's: held-out outcomes stripped to reward and status.
enum NodeToolWork {
    /// An id a tool may be handed: text without NUL or a line break (its ids file holds one a
    /// line), at most 512 bytes. It names no file on the node: its trace directory is encoded.
    static func isValidID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 512 && !id.utf8.contains { $0 == 0 || $0 == 0x0A || $0 == 0x0D }
    }

    /// The name of the one file a tool's task may carry: what only the supervisor holds of it
    /// (`RunsInShards.nodeData`; inspect's frozen sample line).
    static let dataFile = "node-data"

    /// Whether `files` are what a task of `tool`'s request may carry: inspect's, one data file;
    /// the others', none.
    static func filesFit(_ tool: NodeTool, _ files: [WorkFile]) -> Bool {
        guard case .inspect = tool else { return files.isEmpty }
        return files.count == 1 && files[0].path == dataFile && !files[0].executable && (1...WorkLimits.maxFile).contains(files[0].bytes.count)
    }

    /// The tool's adapter for `request`'s ids, with the data each task carries.
    static func adapter(_ tool: NodeTool, _ request: WorkRequest) throws(BenchmarkError) -> any BenchmarkAdapter {
        var data: [String: [UInt8]] = [:]
        for t in request.tasks { if let f = t.files.first { data[t.id] = Array(f.bytes) } }
        return try tool.adapter(ids: request.tasks.map(\.id), data: data)
    }

    /// Why this node's copy of the tool would show agent.py's runner what the supervisor's host
    /// keeps from it, or nil: the supervisor checked its own paths; links and binds on this node
    /// are the node's (BFCL, inspect: the install resolves elsewhere, or a runner bind reaches
    /// it; tau-bench: its data directory is a link here, or a runner bind reaches it;
    /// bird-interact: its ADK or data file is a link here, or a runner bind reaches them).
    static func exposure(_ tool: NodeTool) -> String? {
        let binds: [(setting: String, path: String)], protected: [RunnerBinds.Protected]
        switch tool {
        case .command:
            return nil
        case .bfcl(let b):
            let here = InstalledTree.realPath(b.environmentDirectory)
            if here != b.environmentRealPath {
                return "bfcl-eval's install \(b.environmentDirectory) resolves to \(here), not to \(b.environmentRealPath) as on the supervisor's host"
            }
            (binds, protected) = (b.tool.binds.map { ("runner.binds", $0) }, [.bfclInstall(b.environmentDirectory)])
        case .tau2(let t):
            // The supervisor sends its data directory resolved: here it must be no link either.
            let here = InstalledTree.realPath(t.dataDirectory)
            if here != t.dataDirectory {
                return "tau2's data directory \(t.dataDirectory) resolves to \(here), not to itself as on the supervisor's host"
            }
            // The scripts and the srt shim are mounted into the runner too.
            var mounted = [("runner.scripts", t.scriptsDirectory)]
            if t.layout.shell { mounted.append(("runner.srt_shim", t.tool.shellCalls ?? t.scriptsDirectory + "/srt-shim")) }
            (binds, protected) = (t.tool.binds.map { ("runner.binds", $0) } + mounted, RunnerBinds.Protected.tau2Data(t.dataDirectory, domain: t.domain))
        case .inspect(let n):
            let here = InstalledTree.realPath(n.environmentDirectory)
            let site = InstalledTree.realPath(n.sitePackages)
            if here != n.environmentRealPath || site != n.sitePackagesRealPath {
                return "inspect_ai's install \(n.environmentDirectory) (site-packages \(n.sitePackages)) resolves to \(here) (\(site)), not to \(n.environmentRealPath) (\(n.sitePackagesRealPath)) as on the supervisor's host"
            }
            (binds, protected) = (n.tool.binds.map { ("runner.binds", $0) }, RunnerBinds.Protected.inspect(venv: n.environmentDirectory, taskSpec: n.taskSpec))
        case .bird(let b):
            // The supervisor sends the ADK and the data file resolved: here they must be no
            // links either (the runner's binds are checked against these paths).
            for (name, path) in [("the BIRD-Interact ADK", b.adkDirectory), ("the BIRD-Interact data file", b.dataPath)] where InstalledTree.realPath(path) != path {
                return "\(name) \(path) resolves to \(InstalledTree.realPath(path)), not to itself as on the supervisor's host"
            }
            (binds, protected) = (b.tool.binds.map { ("runner.binds", $0) }, RunnerBinds.Protected.bird(data: b.dataPath, adk: b.adkDirectory))
        }
        do { try RunnerBinds.refuse(binds, exposing: protected) } catch let e as ExperimentError {
            return e.message
        } catch {
            return "runner.binds cannot be checked"
        }
        return nil
    }
}

extension NodeToolWork {
    /// Why the databases this node's server holds for `ids` are not the supervisor's, or nil
    /// (bird-interact: the template databases its tasks copy, by fingerprint).
    static func databaseMismatch(_ tool: NodeTool, _ adapter: (any BenchmarkAdapter)?, ids: [String]) -> String? {
        guard case .bird(let b) = tool, let bird = adapter as? BirdAdapter else { return nil }
        return b.databaseMismatch(ids: ids, adapter: bird)
    }
}

extension RemoteWorker {
    /// Runs `request`'s ids through `adapter` on this node, each task's trace (train requests)
    /// in `traces(id)`, and answers; `memory`: what later untrusted runs can hold at once.
    static func runTool(_ adapter: any BenchmarkAdapter, _ request: WorkRequest, traces: @escaping (String) -> String, memory: UInt64?,
                        work: String, _ s: Settings) throws -> WorkAnswer {
        let ids = request.tasks.map(\.id)
        let agent = AuditLog(), toolAudit = AuditLog()
        let here = LocalExecution(adapter: adapter, policyLoader: PolicyLoader(searchPaths: s.policySearchPaths), scratchRoot: s.scratchRoot,
                                  concurrency: request.concurrency, log: s.log, evictionJournal: s.stateDirectory + "/held-out-pages",
                                  untrustedMemory: memory, withheld: "sent")
        let split: SplitClass = request.heldOut ? .heldOut : .train(traces: traces)
        let all: [TaskOutcome]
        do {
            all = try here.run(ids, agentDirectory: work + "/agent", split: split, audit: (agent, toolAudit), oneTaskPerRun: request.oneTaskPerRun == true)
        } catch let e as ExperimentError {
            throw e
        } catch {
            throw ExperimentError(.io, "running the tool", cause: error)
        }
        return try answer(request, outcomes: all, audit: (agent, toolAudit), traces: traces, s)
    }
}
