// A benchmark run by its own tool, as a worker node rebuilds its adapter for one shard of a
// run's ids (`executor: ray`). It carries the operator's settings for the tool and nothing of
// the benchmark's task list: the shard's ids travel beside it in the request, and a train
// request is signed but not sealed, so it must never name a held-out id. The tool's install,
// its binds and the variables `env_pass` names (keys) are the node's own, at the same paths and
// names as on the supervisor's host: none of them is in the request.

/// What a node needs to run a shard of a tool benchmark's run.
public enum NodeTool: Codable, Sendable, Equatable {
    /// `benchmark: command`: the runner's settings, the scorer's argv and its binds.
    case command(tool: ToolSettings, scorer: [String]?, scorerBinds: [String])

    /// The adapter for `ids`, a shard of the supervisor's run.
    public func adapter(ids: [String]) -> any BenchmarkAdapter {
        switch self {
        case .command(let tool, let scorer, let scorerBinds):
            var a = CommandAdapter(taskIDs: ids, tool: tool)
            a.scorer = scorer
            a.scorerBinds = scorerBinds
            return a
        }
    }

    /// The host paths the tool's settings name, which a node must have at the same paths: its
    /// binds, the scorer's, the executables named by path, the gate's CA file, the shell-call
    /// shim.
    public var requiredPaths: [String] {
        var paths = settings.binds + [settings.upstreamCA, settings.shellCalls].compactMap { $0 }
        if let first = settings.command.first, first.contains("/") { paths.append(first) }
        if case .command(_, let scorer, let scorerBinds) = self {
            paths += scorerBinds
            if let first = scorer?.first, first.contains("/") { paths.append(first) }
        }
        return paths
    }

    /// The tool's settings: its policies, time limits and binds.
    public var settings: ToolSettings {
        switch self {
        case .command(let tool, _, _): tool
        }
    }
}

extension CommandAdapter {
    /// This adapter as a node rebuilds it (`NodeTool`).
    public var nodeTool: NodeTool { .command(tool: tool, scorer: scorer, scorerBinds: scorerBinds) }
}
