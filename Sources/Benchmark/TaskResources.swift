// What a task's task.toml says its sandboxes may use, in Harbor's words (0.25:
// harbor/models/task/config.py, `EnvironmentConfig`; its Docker environment gives the
// container exactly these, harbor/environments/docker/docker.py):
//
//   [environment] memory_mb = 4096        (an integer number of MB: MiB, as Docker's "4096M")
//                 memory = "4G"           (the older spelling: a number and G, M or K, as
//                                          Harbor's `_parse_size_to_mb` reads it)
//                 cpus = 2                (cores, a decimal allowed)
//                 storage_mb = 10240      (the task's disk, MB; `storage = "10G"` the older
//                                          spelling, read as memory is)
//
// Each replaces the task and verifier policies' `limits.memory` and `limits.cpus` for that
// task's two sandboxes, lower or higher: Terminal-Bench 2.0's tasks declare 2 to 8 GB and
// their reference solutions need it (portfolio-optimization's benchmark, gcode-to-text's
// renderer). The task files are the operator's, as the policies are; agent.py cannot change
// them. Silent: the policies' limits. Storage gives a train run's task file systems on disk of
// that size (`TaskDisks`); silent, or a held-out run: the task's 2 GiB tmpfs.

import FoundationEssentials
import Glibc

/// A task's declared resources (`BenchmarkTask.memory`, `.cpus`).
struct TaskResources: Sendable, Equatable {
    var memory: UInt64?
    var cpus: Double?
    var storage: UInt64?

    /// The least storage a task may declare: an ext4 of less is mostly its own metadata.
    static let minStorageMB = 64

    /// The largest a task may declare: far more than a host has, less than a typo's `1e300`.
    static let maxMemoryMB = 1 << 30
    /// The least: a sandbox's monitor joins its cgroup before it starts the payload, and a
    /// limit it cannot start under fails the launch rather than the task.
    static let minMemoryMB = 32
    static let maxCPUs = 1024.0

    /// Reads `[environment]` of `toml` (a task's task.toml at `path`).
    static func read(_ toml: TaskToml, path: String) throws(BenchmarkError) -> TaskResources {
        func fail(_ entry: TaskToml.Entry, _ why: String) -> BenchmarkError {
            BenchmarkError(.invalidTaskFile, "\(path):\(entry.line): [environment] \(why)")
        }
        // A size in whole megabytes (`name`_mb) or as text (`name`, "4G"), both agreeing if given.
        func size(_ name: String, least: Int, example: String) throws(BenchmarkError) -> UInt64? {
            var megabytes: Int?
            if let entry = toml.entry("environment", name + "_mb") {
                guard case .number(let v, _) = entry.value, v >= Double(least), v <= Double(maxMemoryMB), v == v.rounded() else {
                    throw fail(entry, "\(name)_mb must be a whole number of megabytes from \(least) to \(maxMemoryMB) (got \(entry.value.metadataText))")
                }
                megabytes = Int(v)
            }
            if let entry = toml.entry("environment", name) {
                guard case .string(let text) = entry.value, let mb = sizeInMB(text), mb >= least, mb <= maxMemoryMB else {
                    throw fail(entry, "\(name) must be a size such as \(example), at least \(least)M (got \(entry.value.metadataText))")
                }
                if let declared = megabytes, declared != mb {
                    throw fail(entry, "\(name) (\(text), \(mb) MB) and \(name)_mb (\(declared)) disagree: keep one")
                }
                megabytes = mb
            }
            return megabytes.map { UInt64($0) << 20 }
        }
        var out = TaskResources()
        out.memory = try size("memory", least: minMemoryMB, example: "\"4G\", \"512M\" or \"1048576K\"")
        out.storage = try size("storage", least: minStorageMB, example: "\"10G\" or \"512M\"")
        if let entry = toml.entry("environment", "cpus") {
            guard case .number(let v, _) = entry.value, v > 0, v <= maxCPUs else {
                throw fail(entry, "cpus must be a number of cores greater than 0 and at most \(Int(maxCPUs)) (got \(entry.value.metadataText))")
            }
            out.cpus = v
        }
        return out
    }

    /// Harbor's reading of a size: trimmed, upper-cased, a decimal number ending in G (× 1024),
    /// M or K (÷ 1024), truncated to whole megabytes; nil for anything else.
    static func sizeInMB(_ text: String) -> Int? {
        let s = text.trimmingCharacters(in: .whitespaces).uppercased()
        guard let unit = s.last, let factor: Double = ["G": 1024, "M": 1, "K": 1.0 / 1024][unit] else { return nil }
        let digits = s.dropLast()
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }), digits.filter({ $0 == "." }).count <= 1,
              let number = Double(digits), number.isFinite else { return nil }
        let mb = number * factor
        return mb < Double(maxMemoryMB) + 1 ? Int(mb) : nil
    }
}
