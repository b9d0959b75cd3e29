import Foundation
@_exported import TestSupport
import TestSupport
import Testing

/// `autoharness sandbox exec [extra] --ro PROBE:/probe -- /probe ACTION ARGS...`
func probe(_ action: String, _ args: String..., options: [String] = [], policy: String = "base") throws -> Run {
    try autoharness(["sandbox", "exec", "--policy", policy, "--timeout", "30", "--ro", "\(Built.probe):/probe"] + options
        + ["--", "/probe", action] + args)
}

