import Foundation

/// When a gate's answer is released (`gate.reply_time`).
///
/// A gate's duration is a channel: held-out tasks run the candidate agent.py, which can sleep
/// or spin for as long as it likes, and whoever sees when the gate ended (the coding agent
/// through its reply, the iteration's timestamp in results.tsv, the commit's date) would read
/// what it encoded. So nothing of the gate's outcome is released, recorded or committed before
/// a time that depends only on the configured bounds:
/// - `padded` (default): the gate's duration, counted from its start, is rounded up to the
///   next power of two seconds (1, 2, 4, 8, ...). A gate can then end at one of
///   ⌈log₂ W⌉ + 1 instants, W its worst case in seconds: about log₂ of that many bits, e.g.
///   3.8 bits for W = 4800 s (8 tasks of 600 s, one at a time), 3 bits for W = 100 s. It costs
///   at most the gate's own duration again, about 0.44 of it on average.
/// - `worst_case`: every gate ends `gate.reply_after` seconds after it started: no bit, at the
///   cost of always waiting that long. A gate that runs longer falls back to the padded grid
///   (and says so in the ledger): the operator set the bound too low.
public enum ReplyTime: Sendable, Equatable {
    case padded
    case worstCase(seconds: Double)

    /// The instant, in seconds after the gate started, at which a gate that took `elapsed`
    /// seconds may answer.
    public func release(after elapsed: Double) -> Double {
        switch self {
        case .padded: return Self.grid(elapsed)
        case .worstCase(let bound): return elapsed <= bound ? bound : Self.grid(elapsed)
        }
    }

    /// Whether a gate of `elapsed` seconds ran past its configured worst case.
    public func overran(_ elapsed: Double) -> Bool {
        if case .worstCase(let bound) = self { return elapsed > bound }
        return false
    }

    /// The smallest power of two seconds (from 1 s) not below `elapsed`.
    public static func grid(_ elapsed: Double) -> Double {
        var t = 1.0
        while t < elapsed { t *= 2 }
        return t
    }

    /// The most a gate's end can say, in bits, when it takes at most `worst` seconds: log₂ of
    /// the number of instants it can end at.
    public func capacityBits(worst: Double) -> Double {
        if case .worstCase(let bound) = self, worst <= bound { return 0 }
        return log2(log2(Self.grid(worst)) + 1)
    }

    public var name: String {
        switch self {
        case .padded: return "padded"
        case .worstCase: return "worst_case"
        }
    }
}
