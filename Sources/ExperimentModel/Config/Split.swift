import Foundation

/// The train/test split, in upstream auto-harness's JSON shape:
/// `{"train":[ids],"test":[ids],"metadata":{"created":ISO,"total_tasks":N,"seed":42}}`.
/// It lives in the supervisor-private directory: the test ids never reach a sandbox.
public struct SplitFile: Codable, Sendable, Equatable {
    public struct Metadata: Codable, Sendable, Equatable {
        public var created: String
        public var totalTasks: Int
        public var seed: UInt64
        enum CodingKeys: String, CodingKey {
            case created
            case totalTasks = "total_tasks"
            case seed
        }

        package init(created: String, totalTasks: Int, seed: UInt64) {
            self.created = created
            self.totalTasks = totalTasks
            self.seed = seed
        }
    }

    public var train: [String]
    public var test: [String]
    public var metadata: Metadata

    /// Splits `ids` 70/30, stratified on whether the baseline passed each task, so both
    /// splits start with the same pass rate. Deterministic: the same ids, baseline results and
    /// seed give the same split on every machine (SplitMix64 + Fisher-Yates over sorted ids).
    public static func make(baselinePassed: [String: Bool], trainFraction: Double = 0.7, seed: UInt64 = 42,
                            created: String) -> SplitFile {
        var rng = SplitMix64(seed: seed)
        var train: [String] = []
        var test: [String] = []
        for stratum in [true, false] {
            var ids = baselinePassed.filter { $0.value == stratum }.map(\.key).sorted()
            for i in stride(from: ids.count - 1, to: 0, by: -1) {
                let j = Int(rng.next() % UInt64(i + 1))
                ids.swapAt(i, j)
            }
            let nTrain = Int((Double(ids.count) * trainFraction).rounded())
            train += ids.prefix(nTrain)
            test += ids.dropFirst(nTrain)
        }
        return SplitFile(train: train.sorted(), test: test.sorted(),
                         metadata: Metadata(created: created, totalTasks: baselinePassed.count, seed: seed))
    }

    public func encoded() throws -> Data {
        let e = JSONEncoder()
        e.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try e.encode(self)
    }

    package init(train: [String], test: [String], metadata: Metadata) {
        self.train = train
        self.test = test
        self.metadata = metadata
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny, well-distributed, seedable generator whose
/// output is the same on every platform, unlike the system generator.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// RFC 3339 with an explicit +00:00 offset, as upstream's Python `isoformat()` writes it.
public func isoTimestamp(_ date: Date = Date()) -> String {
    let f = DateFormatter()
    f.locale = Locale(identifier: "en_US_POSIX")
    f.timeZone = TimeZone(identifier: "UTC")
    f.dateFormat = "yyyy-MM-dd'T'HH:mm:ss'+00:00'"
    return f.string(from: date)
}
