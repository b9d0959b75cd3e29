import Yams

/// A benchmark's own keys in experiment_config.yaml, typed. Upstream auto-harness writes them
/// at the top level beside the common ones (`env_provider: e2b`, `user_model: ...`); each
/// `BenchmarkKind` names the type that holds the keys it reads (`BenchmarkKind.Settings`,
/// declared in the kind's own file), the config reader fills it where each value's line is
/// known (numbers bounded, choices named), and only that kind reads the fields
/// (`BenchmarkKind.settings(_:)`).
package protocol BenchmarkSettings: Sendable, Equatable {
    init()
    /// The keys, each with the field it fills and what it accepts.
    static var keys: [ConfigKey<Self>] { get }
}

/// For a benchmark that reads no keys of its own.
package struct NoSettings: BenchmarkSettings {
    package init() {}
    package static var keys: [ConfigKey<Self>] { [] }
}

/// The configured benchmark's settings inside `ExperimentConfig` (which stays `Equatable`).
struct BenchmarkSettingsBox: Sendable, Equatable {
    let value: any BenchmarkSettings
    init(_ value: any BenchmarkSettings = NoSettings()) { self.value = value }
    static func == (a: Self, b: Self) -> Bool { a.value.isEqual(to: b.value) }
}

extension BenchmarkSettings {
    func isEqual(to other: any BenchmarkSettings) -> Bool { (other as? Self) == self }
}

extension BenchmarkKind {
    /// The names of the keys this benchmark reads.
    var keyNames: [String] { Settings.keys.map(\.name) }

    /// This benchmark's settings as `config` holds them (the defaults when it holds another
    /// benchmark's).
    func settings(_ config: ExperimentConfig) -> Settings {
        config.benchmarkSettings.value as? Settings ?? Settings()
    }

    /// The settings from `entries`, the benchmark keys as written (keys this benchmark does
    /// not read are left to the caller).
    func readSettings(_ entries: [(key: String, node: Node)], _ r: ConfigReader) -> BenchmarkSettingsBox {
        var s = Settings()
        for e in entries { Settings.keys.first { $0.name == e.key }?.store(r, e.node, e.key, &s) }
        return BenchmarkSettingsBox(s)
    }
}

extension BenchmarkKinds {
    /// Every key some benchmark reads.
    static var settingKeyNames: [String] {
        var seen = Set<String>()
        return all.flatMap(\.keyNames).filter { seen.insert($0).inserted }
    }

    /// The configured benchmark's settings from the benchmark keys as written. A key only other
    /// benchmarks read is still checked (by the first that reads it), so a typo in a value
    /// copied from another benchmark's config is found, and then ignored.
    static func readSettings(for benchmark: String, _ entries: [(key: String, node: Node)], _ r: ConfigReader) -> BenchmarkSettingsBox {
        let kind = named(benchmark)
        let own = Set(kind?.keyNames ?? [])
        for e in entries where !own.contains(e.key) {
            _ = all.first { $0.keyNames.contains(e.key) }?.readSettings([e], r)
        }
        return kind?.readSettings(entries.filter { own.contains($0.key) }, r) ?? BenchmarkSettingsBox()
    }
}
