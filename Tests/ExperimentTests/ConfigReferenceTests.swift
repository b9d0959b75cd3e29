import Foundation
import Testing
import TestSupport
@testable import ExperimentModel

/// The config's keys are declared once (`ConfigSchema`, each benchmark's `Settings.keys`): the
/// reader walks them and docs/config.md's reference is printed from them.
@Suite("experiment_config.yaml: one schema, read and documented")
struct ConfigReferenceTests {
    static let begin = "<!-- keys: printed by `autoharness config keys`; scripts/config-doc rewrites them -->"
    static let end = "<!-- end of keys -->"

    @Test("docs/config.md's reference is the schema's, byte for byte (scripts/config-doc rewrites it)")
    func docsMatchSchema() throws {
        let doc = try String(contentsOfFile: Built.packageRoot + "/docs/config.md", encoding: .utf8)
        let inside = try #require(doc.components(separatedBy: Self.begin + "\n").dropFirst().first?.components(separatedBy: Self.end).first,
                                  "docs/config.md lacks its markers")
        let expected = "\n" + ConfigSchema.reference() + "\n"
        if inside != expected {
            let have = Set(inside.split(separator: "\n")), want = Set(expected.split(separator: "\n"))
            Issue.record("docs/config.md differs from the schema; run scripts/config-doc. Missing: \(want.subtracting(have).sorted().prefix(5)); stale: \(have.subtracting(want).sorted().prefix(5))")
        }
        // What a reader of the docs looks up is there, with its bounds and default.
        #expect(expected.contains("| `gate.trials` | a whole number, 1 to \(GateTrials.maximum) | `1` |"))
        #expect(expected.contains("| `gate.accept` | margin \\| at_least_best \\| paired | `margin` |"))
        #expect(expected.contains("| `sandbox.network.inference` |") && expected.contains("| `triage.network.allow` |"))
        #expect(expected.contains("### `benchmark: terminal-bench`: its own keys") && expected.contains("| `env_provider` |"))
    }

    /// The sections of the reference and the keys each holds, from its rows.
    static func sections() -> [String: [String]] {
        let rows = ConfigSchema.rows(ConfigSchema.keys, ExperimentConfig(benchmark: ""))
        var out: [String: [String]] = ["": []]
        for row in rows {
            let parts = row.key.split(separator: ".").map(String.init)
            out[parts.dropLast().joined(separator: "."), default: []].append(parts.last!)
            if row.accepts == "a mapping" && out[row.key] == nil { out[row.key] = [] }
        }
        return out
    }

    /// A key the reader does not know, in each section, is refused naming exactly the keys the
    /// reference lists for that section: the reader and the reference are one list.
    @Test("in every section, an unknown key is refused naming exactly the reference's keys of that section")
    func readerAllowsWhatReferenceLists() throws {
        let sections = Self.sections()
        #expect(sections.count >= 12, "sections: \(sections.keys.sorted())")
        for (path, keys) in sections {
            let parts = path.isEmpty ? [] : path.split(separator: ".").map(String.init)
            var yaml = "benchmark: local\ndataset: d\n"
            for (depth, part) in parts.enumerated() { yaml += String(repeating: "  ", count: depth) + part + ":\n" }
            yaml += String(repeating: "  ", count: parts.count) + "not_a_key: 1\n"
            let context = path.isEmpty ? "the config" : path
            let allowed = path.isEmpty ? keys + BenchmarkKinds.settingKeyNames : keys
            do {
                _ = try ExperimentConfig.parse(yaml, file: "f")
                Issue.record("\(context): an unknown key was accepted")
            } catch let e as ConfigErrors {
                let want = "f:\(parts.count + 3): unknown key 'not_a_key' in \(context) (allowed: \(allowed.joined(separator: ", ")))"
                #expect(e.errors.map(\.description).contains(want), "\(context): \(e.errors.map(\.description))")
            }
        }
    }

    @Test("every key says what it accepts and does, and no section names a key twice")
    func everyKeyDescribed() {
        let rows = ConfigSchema.rows(ConfigSchema.keys, ExperimentConfig(benchmark: "")) + BenchmarkKinds.all.flatMap(\.referenceRows)
        #expect(rows.count > 90, "\(rows.count) keys")
        for row in rows {
            #expect(row.summary.count > 10 && row.summary.hasSuffix("."), "\(row.key): '\(row.summary)'")
            #expect(!row.accepts.isEmpty, "\(row.key)")
        }
        let common = ConfigSchema.rows(ConfigSchema.keys, ExperimentConfig(benchmark: "")).map(\.key)
        #expect(Set(common).count == common.count, "a key twice: \(common)")
        for kind in BenchmarkKinds.all {
            let own = kind.referenceRows.map(\.key)
            #expect(Set(own).count == own.count && Set(own).isDisjoint(with: common), "\(kind.name): \(own)")
        }
    }

    @Test("a config read from a file equals the same config built in code (gate.reply_after is folded into gate.reply_time)")
    func readEqualsBuilt() throws {
        let read = try ExperimentConfig.parse("benchmark: local\ndataset: d\ngate:\n  reply_time: worst_case\n  reply_after: 90\n  trials: 3\n", file: "f")
        var built = ExperimentConfig(benchmark: "local", dataset: "d")
        built.gate.replyTime = .worstCase(seconds: 90)
        built.gate.trials = 3
        #expect(read == built)
    }

    /// Defaults are read from a fresh config, so the reference shows what a config without the
    /// key gets.
    @Test("the reference's defaults are what a config without the key gets")
    func defaultsAreTheReadOnes() throws {
        let c = try ExperimentConfig.parse("benchmark: local\ndataset: d\n", file: "f")
        let rows = Dictionary(uniqueKeysWithValues: ConfigSchema.rows(ConfigSchema.keys, ExperimentConfig(benchmark: "")).map { ($0.key, $0.shownDefault) })
        #expect(rows["threshold"] == String(ConfigReader.shown(c.threshold)) && rows["threshold"] == "0.8")
        #expect(rows["gate.disclosure"] == c.gate.disclosure.rawValue && rows["gate.vm.memory_mib"] == String(c.gate.vm.memoryMiB))
        #expect(rows["loop.candidates"] == "1" && rows["triage.policy"] == "triage" && rows["runner.policy"] == "benchmark-runner")
        #expect(rows["sandbox.scratch"] == c.scratch && rows["gate.reply_time"] == "padded" && rows["gate.ladder_step"] == .some(nil))
    }
}

@Suite("autoharness config check and config keys")
struct ConfigCommandTests {
    @Test("config check: 0 and ok for a valid file; 1 and every problem at file:line for a bad one; config keys prints the reference")
    func checkAndKeys() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ah-config-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let good = dir + "/good.yaml", bad = dir + "/bad.yaml"
        try "benchmark: local\ndataset: d\ngate:\n  trials: 3\n  accept: paired\n".write(toFile: good, atomically: true, encoding: .utf8)
        try "benchmark: local\ndataset: d\ngate:\n  trials: 30\n  alpha: 0.1\nloop:\n  reveiw: auto\n".write(toFile: bad, atomically: true, encoding: .utf8)
        let ok = try autoharness(["config", "check", good])
        #expect(ok.status == 0 && ok.stdout.contains("\(good): ok (benchmark: local)"), "\(ok.stdout)\(ok.stderr)")
        let refused = try autoharness(["config", "check", good, bad])
        #expect(refused.status == 1, "\(refused.status)")
        #expect(refused.stderr.contains("\(bad):4: gate.trials: must be a whole number from 1 to \(GateTrials.maximum) (got '30')"), "\(refused.stderr)")
        #expect(refused.stderr.contains("\(bad):7: unknown key 'reveiw' in loop (allowed: batch_size, batch_iterations, review, candidates)"), "\(refused.stderr)")
        #expect(refused.stderr.contains("\(bad):5: gate.alpha: only with gate.accept: paired"), "\(refused.stderr)")
        let keys = try autoharness(["config", "keys"])
        #expect(keys.status == 0 && keys.stdout == ConfigSchema.reference())
    }
}
