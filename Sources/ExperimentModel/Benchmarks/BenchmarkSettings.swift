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
    static var keys: [SettingKey<Self>] { get }
}

/// For a benchmark that reads no keys of its own.
package struct NoSettings: BenchmarkSettings {
    package init() {}
    package static var keys: [SettingKey<Self>] { [] }
}

/// One key: its name in experiment_config.yaml and the typed field it fills.
package struct SettingKey<Settings> {
    enum Value {
        /// Any non-empty string.
        case text(WritableKeyPath<Settings, String?>)
        case choice(WritableKeyPath<Settings, String?>, [String])
        /// A non-empty list, each item one of the choices, none twice.
        case choices(WritableKeyPath<Settings, [String]?>, [String])
        case integer(WritableKeyPath<Settings, Int?>, ClosedRange<Int>)
        case number(WritableKeyPath<Settings, Double?>, ClosedRange<Double>)
        /// A list of `host:port` entries (an egress allowlist).
        case hostPorts(WritableKeyPath<Settings, [String]?>)
    }
    let name: String
    let value: Value

    init(_ name: String, _ value: Value) {
        self.name = name
        self.value = value
    }

    static var portRange: ClosedRange<Int> { 1024...65535 }

    /// Checks `node` and, if it is good, sets the field; a problem is recorded at its line.
    func read(_ node: Node, into settings: inout Settings, _ r: ConfigReader) {
        switch value {
        case .text(let field): if let s = r.string(node, name) { settings[keyPath: field] = s }
        case .choice(let field, let allowed): if let s = r.oneOf(node, name, allowed) { settings[keyPath: field] = s }
        case .choices(let field, let allowed): if let s = r.subset(node, name, allowed) { settings[keyPath: field] = s }
        case .integer(let field, let range): if let x = r.integer(node, name, range) { settings[keyPath: field] = x }
        case .number(let field, let range): if let x = r.number(node, name, range) { settings[keyPath: field] = x }
        case .hostPorts(let field): if let x = r.hostPorts(node, name) { settings[keyPath: field] = x }
        }
    }
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
        for e in entries { Settings.keys.first { $0.name == e.key }?.read(e.node, into: &s, r) }
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
