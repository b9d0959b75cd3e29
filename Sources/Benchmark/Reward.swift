// Reading the verifier's reward.
//
// The reward is the only thing that crosses from a task's sandboxes back into the
// supervisor's decisions, and the directory it is read from was writable by the verifier,
// which ran code the agent left behind. So the file is opened relative to the logs
// directory's fd with O_NOFOLLOW (a symlink to some host file is refused, not read), must be
// a regular file of at most 4096 bytes, and must hold one finite number in [0, 1]. Anything
// else scores 0: a malformed reward must never be mistaken for a good one, nor silently
// dropped from the mean.

import FoundationEssentials
import Glibc
import SupervisorIO

enum Reward {
    /// Largest reward file read; a reward is one number.
    static let maxBytes = 4096

    enum Reading: Equatable {
        /// A valid reward and the bytes it was read from.
        case value(Double, raw: [UInt8])
        case missing
        /// Present but unusable; `raw` is what was read, if anything.
        case invalid(String, raw: [UInt8]?)
    }

    /// Reads `reward.json`, else `reward.txt`, from the logs directory `logs` (an fd): the
    /// precedence of Harbor's own verifier (harbor 0.25.0, harbor/verifier/verifier.py,
    /// `Verifier.verify`: reward_json_path is checked before reward_text_path).
    static func read(logs: Int32) -> Reading {
        for file in ["reward.json", "reward.txt"] {
            switch FileSystem.readSmallFile(at: logs, file, limit: maxBytes) {
            case .failure(.missing):
                continue
            case .failure(.notRegular), .failure(.symlink), .failure(.hardLinked):
                return .invalid("\(file) is not a regular file", raw: nil)
            case .failure(.tooLarge(let n, _)):
                return .invalid("\(file) is \(n) bytes (limit \(maxBytes))", raw: nil)
            case .failure(.failed(let e)):
                return .invalid("\(file): \(FileSystem.errorText(e))", raw: nil)
            case .success(let bytes):
                let parsed = file == "reward.txt" ? parseText(bytes) : parseJSON(bytes)
                switch parsed {
                case .success(let v): return .value(v, raw: bytes)
                case .failure(let why): return .invalid("\(file): \(why.message)", raw: bytes)
                }
            }
        }
        return .missing
    }

    struct ParseError: Error { var message: String }

    /// A plain decimal number (`1`, `0.5`, `1.0`, `5e-1`, surrounding whitespace allowed).
    /// `nan`, `inf`, hex floats and anything Swift's `Double(_:)` would accept beyond that
    /// are refused: the grammar is checked first, then the range.
    static func parseText(_ bytes: [UInt8]) -> Result<Double, ParseError> {
        guard let text = String(validating: bytes, as: UTF8.self) else { return .failure(ParseError(message: "not UTF-8 text")) }
        let trimmed = text.trimmingASCIIWhitespace()
        guard isDecimalNumber(trimmed), let v = Double(trimmed) else {
            return .failure(ParseError(message: "\(quote(trimmed)) is not a number"))
        }
        return inRange(v, trimmed)
    }

    /// `{"reward": x}` (other keys ignored) or a bare number. An object naming a key twice is
    /// refused: Python's json, which verifiers write it with, keeps the last value and
    /// Foundation's decoder the first, so the file has no single meaning.
    static func parseJSON(_ bytes: [UInt8]) -> Result<Double, ParseError> {
        struct Object: Decodable { var reward: Double }
        if let key = JSONValue.firstDuplicateKey(bytes) {
            return .failure(ParseError(message: "key \(quote(key)) appears twice in one object (which one counts is ambiguous)"))
        }
        let data = Data(bytes)
        let decoder = JSONDecoder()
        if let v = try? decoder.decode(Double.self, from: data) { return inRange(v, String(v)) }
        if let o = try? decoder.decode(Object.self, from: data) { return inRange(o.reward, String(o.reward)) }
        let text = String(decoding: bytes, as: UTF8.self).trimmingASCIIWhitespace()
        return .failure(ParseError(message: "\(quote(text)) is neither a number nor {\"reward\": number}"))
    }

    static func inRange(_ v: Double, _ text: String) -> Result<Double, ParseError> {
        guard v.isFinite, v >= 0, v <= 1 else { return .failure(ParseError(message: "\(text) is outside [0, 1]")) }
        return .success(v == 0 ? 0 : v)  // no -0 in records
    }

    /// `[+-]?(digits[.digits?]|.digits)([eE][+-]?digits)?`
    static func isDecimalNumber(_ s: String) -> Bool {
        let c = Array(s.utf8)
        var i = 0
        func digits() -> Int {
            let start = i
            while i < c.count, c[i] >= 0x30, c[i] <= 0x39 { i += 1 }
            return i - start
        }
        if i < c.count, c[i] == 0x2B || c[i] == 0x2D { i += 1 }
        var mantissa = digits()
        if i < c.count, c[i] == 0x2E {
            i += 1
            mantissa += digits()
        }
        guard mantissa > 0 else { return false }
        if i < c.count, c[i] == 0x65 || c[i] == 0x45 {
            i += 1
            if i < c.count, c[i] == 0x2B || c[i] == 0x2D { i += 1 }
            guard digits() > 0 else { return false }
        }
        return i == c.count
    }

    /// A short, printable rendering of untrusted text for a detail line.
    static func quote(_ s: String) -> String {
        var out = ""
        for u in s.unicodeScalars.prefix(40) {
            out += (u.value >= 0x20 && u.value < 0x7F) ? String(u) : "?"
        }
        return "\"" + out + (s.unicodeScalars.count > 40 ? "…" : "") + "\""
    }
}

fileprivate extension String {
    func trimmingASCIIWhitespace() -> String {
        let ws: Set<UInt8> = [0x20, 0x09, 0x0A, 0x0D, 0x0B, 0x0C]
        let bytes = Array(utf8)
        guard let first = bytes.firstIndex(where: { !ws.contains($0) }) else { return "" }
        let last = bytes.lastIndex(where: { !ws.contains($0) })!
        return String(decoding: bytes[first...last], as: UTF8.self)
    }
}
