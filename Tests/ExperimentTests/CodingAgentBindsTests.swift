import Foundation
import Testing
import TestSupport

/// The coding agent's binds and home seed, checked like the runner's and the triage's (issue
/// 70): a bind of the dataset's parent let a coding agent list every task and read the
/// held-out instructions, and nothing said so.
@Suite("coding_agent.binds and home_seed: checked against the experiment, the dataset and the scorer's answers")
struct CodingAgentBindsTests {
    /// The experiment's config with `settings` (key, value) under `coding_agent:`, each
    /// replacing the template's line for it or added first; returns each one's line number.
    @discardableResult
    static func configure(_ exp: Experiment, _ settings: [(String, String)]) throws -> [String: Int] {
        let path = exp.root + "/experiment_config.yaml"
        var lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let section = try #require(lines.firstIndex(of: "coding_agent:"), "no coding_agent section")
        let end = lines[(section + 1)...].firstIndex { !$0.isEmpty && !$0.hasPrefix(" ") } ?? lines.count
        for (key, value) in settings {
            if let i = lines[section..<end].firstIndex(where: { $0.hasPrefix("  \(key):") }) {
                lines[i] = "  \(key): \(value)"
            } else {
                lines.insert("  \(key): \(value)", at: section + 1)
            }
        }
        try lines.joined(separator: "\n").write(toFile: path, atomically: true, encoding: .utf8)
        var at: [String: Int] = [:]
        for (i, l) in lines.enumerated() { for (key, _) in settings where l.hasPrefix("  \(key):") && i > section { at[key] = i + 1 } }
        return at
    }

    @Test("a bind reaching the dataset, one inside the experiment and a home seed holding its private directory are refused at their line before anything runs; the agent's install and a seed of its own pass")
    func refused() throws {
        try requireRoot()
        let parent = (Experiment.fixture as NSString).deletingLastPathComponent
        let exp = try Experiment(prepare: false)
        let original = try String(contentsOfFile: exp.root + "/experiment_config.yaml", encoding: .utf8)
        let cases: [(setting: (String, String), error: String)] = [
            (("binds", "[/usr/lib, \(parent)]"), "coding_agent.binds: \(parent) contains the benchmark's tasks"),
            (("binds", "[\(Experiment.fixture)/tasks]"), "coding_agent.binds: \(Experiment.fixture)/tasks lies inside \(Experiment.fixture), which the coding agent must never see"),
            (("binds", "[\(exp.root)/workspace]"), "coding_agent.binds: \(exp.root)/workspace lies inside \(exp.root), which the coding agent must never see"),
            (("home_seed", ".autoharness"), "coding_agent.home_seed: \(exp.root)/.autoharness contains this experiment's private directory"),
            (("home_seed", "."), "coding_agent.home_seed: \(exp.root)/. contains this experiment's private directory"),
        ]
        for c in cases {
            try original.write(toFile: exp.root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
            let line = try #require(try Self.configure(exp, [c.setting])[c.setting.0])
            let p = try exp.run("prepare")
            #expect(p.status == 2 && p.stderr.contains("experiment_config.yaml:\(line): " + c.error), "\(c.setting): \(p.stdout)\(p.stderr)")
            #expect(!FileManager.default.fileExists(atPath: exp.root + "/.autoharness/split.json"), "\(c.setting): prepare ran")
        }
        // The agent's own install, and a seed directory of the experiment's that is not its private one.
        try FileManager.default.createDirectory(atPath: exp.root + "/seed/.codex", withIntermediateDirectories: true)
        try original.write(toFile: exp.root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        try Self.configure(exp, [("binds", "[/usr/lib]"), ("home_seed", "seed")])
        let ok = try exp.run("prepare")
        #expect(ok.status == 0, "\(ok.stdout)\(ok.stderr)")
    }
}
