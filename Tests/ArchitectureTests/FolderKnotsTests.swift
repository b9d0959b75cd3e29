import Foundation
import Testing

extension ArchitectureTests {
    /// Pairs of folders of one of Experiment's targets whose files name each other's types,
    /// both ways: knots that keep a target from splitting further along its folders. Listed
    /// so that a new knot fails, and so that untying one fails until it leaves this list too.
    /// Operations, Run and Views are the orchestration layer (one target); Benchmarks <->
    /// Config is the benchmark kinds' settings, read by the config's parser.
    static let knots: Set<String> = [
        "ExperimentModel: Benchmarks <-> Config", "Experiment: Operations <-> Views", "Experiment: Run <-> Views",
    ]

    /// For each folder of a target (`.` for files at its top), the folders whose top-level
    /// types its files name (outside `//` comments).
    static func folderReferences(_ target: String) -> [String: Set<String>] {
        let files = Self.files(target).map { f -> (folder: String, text: String) in
            let parts = f.path.split(separator: "/")
            return (parts.count > 2 ? String(parts[1]) : ".", f.text)
        }
        let declaration = #/^(?:(?:public|package|fileprivate|private|final|indirect) )*(?:struct|enum|class|protocol|actor|typealias) +([A-Z]\w*)/#.anchorsMatchLineEndings()
        var owner: [String: String] = [:]
        for f in files.sorted(by: { $0.folder < $1.folder }) {
            for m in f.text.matches(of: declaration) where owner[String(m.1)] == nil { owner[String(m.1)] = f.folder }
        }
        var refs: [String: Set<String>] = [:]
        for f in files {
            let code = f.text.replacing(#/\/\/[^\n]*/#, with: "")
            // Identifiers as tokens (Regex's default `\b` is Unicode word segmentation, which
            // skips some of them).
            for m in code.matches(of: #/[A-Za-z_0-9]+/#) {
                if let o = owner[String(m.0)], o != f.folder { refs[f.folder, default: []].insert(o) }
            }
        }
        return refs
    }

    @Test("the folders of Experiment's targets: no two name each other's types both ways beyond the knots listed, and each listed knot is still one")
    func folderKnots() {
        var found: Set<String> = []
        for target in Self.experimentTargets {
            let refs = Self.folderReferences(target)
            for (a, targets) in refs {
                for b in targets where a < b && refs[b]?.contains(a) == true { found.insert("\(target): \(a) <-> \(b)") }
            }
        }
        for k in found.subtracting(Self.knots).sorted() { Issue.record("a new knot: \(k) (move the type that one of them owns by mistake)") }
        for k in Self.knots.subtracting(found).sorted() { Issue.record("\(k) is untied: take it off ArchitectureTests.knots") }
    }
}

extension ArchitectureTests {
    @Test("one path runs tasks on a kernel: the host's executor, a worker node and a held-out VM's guest all go through LocalExecution, and a VM's phase through HeldOutVM.runSettled; no other file of Experiment's targets builds a task run's context, settles held-out sandboxes or a VM, or scores a missing task 0")
    func oneExecutionPath() throws {
        for path in ["Execution/Executors/HostExecutor.swift", "Execution/Remote/RemoteWorker.swift", "Execution/HeldOutVM/HeldOutGuest.swift"] {
            let text = try String(contentsOfFile: Self.sources + "/" + path, encoding: .utf8)
            #expect(text.contains("LocalExecution("), "\(path) does not run its tasks through LocalExecution")
        }
        for path in ["Execution/Executors/HeldOutVMExecutor.swift", "Execution/Remote/RemoteWorker.swift"] {
            let text = try String(contentsOfFile: Self.sources + "/" + path, encoding: .utf8)
            #expect(text.contains(".runSettled("), "\(path) does not run its VM through HeldOutVM.runSettled")
        }
        // Triage runs a tool, not tasks. A VM's phase (the supervisor's or a node's) settles
        // through HeldOutVM.runSettled.
        let allowed: [String: Set<String>] = [
            "AdapterRunContext(": ["Execution/LocalExecution.swift", "Experiment/Operations/Triage.swift"],
            "HeldOutSettle.settle(cache, onHost: true": ["Execution/LocalExecution.swift"],
            "HeldOutSettle.settle(cache, onHost: false": ["Execution/HeldOutVM/SettledRun.swift"],
            "PageCacheEviction(": ["Execution/LocalExecution.swift", "Execution/HeldOutVM/SettledRun.swift"],
            "status: .missingResult": ["Execution/LocalExecution.swift", "ExperimentModel/Gate/HeldOutScore.swift"],
        ]
        // A node's guest gets typed settings (`NodeGuestSettings`), never a config written as text.
        for (path, text) in Self.files("Execution") where text.contains("experiment_config.yaml") || text.contains("yaml +=") {
            Issue.record("\(path) writes an experiment config as text: give the guest typed settings")
        }
        for (path, text) in Self.experimentTargets.flatMap(Self.files) {
            let code = text.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }.joined(separator: "\n")
            for (call, places) in allowed where code.contains(call) && !places.contains(path) {
                Issue.record("\(path) has \(call): a copy of LocalExecution's steps")
            }
        }
    }
}

extension ArchitectureTests {
    /// Types over the cap across their extensions, each to be split by concern as
    /// ExperimentSupervisor was (into operation types over a shared context); listed so that
    /// a new one fails, and one that shrinks below the cap must leave the list.
    /// Types over the cap, each to be split by concern (none now; a new one fails).
    static let largeTypes: Set<String> = []
    static let typeLineCap = 600

    /// Lines of every type's top-level declaration and extensions, across Sources' Swift
    /// files: from a column-0 `struct`/`enum`/`class`/`actor`/`extension` line that opens a
    /// brace to the next line that is exactly `}`.
    static func typeLines() -> [String: Int] {
        let opener = #/^(?:@\w+ )*(?:(?:public|package|final|private|fileprivate|indirect|nonisolated) )*(?:struct|enum|class|actor|extension) ([A-Z]\w*)[^{]*\{\s*$/#
        var lines: [String: Int] = [:]
        let walker = FileManager.default.enumerator(atPath: sources)
        while let rel = walker?.nextObject() as? String {
            guard rel.hasSuffix(".swift"), let text = try? String(contentsOfFile: sources + "/" + rel, encoding: .utf8) else { continue }
            var open: (name: String, start: Int)?
            for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                if open == nil, let m = try? opener.wholeMatch(in: line) {
                    open = (String(m.1), n)
                } else if let o = open, line == "}" {
                    lines[o.name, default: 0] += n - o.start + 1
                    open = nil
                }
            }
        }
        return lines
    }

    @Test("no type spans more than 600 lines across its extensions, beyond the ones listed, and each listed one still does")
    func typesStayReadable() {
        let lines = Self.typeLines()
        #expect((lines["ExperimentSupervisor"] ?? 0) > 100, "types measured: \(lines.count)")
        for (name, n) in lines.sorted(by: { $0.key < $1.key }) where n > Self.typeLineCap && !Self.largeTypes.contains(name) {
            Issue.record("\(name) spans \(n) lines across its extensions (at most \(Self.typeLineCap)): split it by concern")
        }
        for name in Self.largeTypes.sorted() where (lines[name] ?? 0) <= Self.typeLineCap {
            Issue.record("\(name) is \(lines[name] ?? 0) lines now: take it off ArchitectureTests.largeTypes")
        }
    }
}

extension ArchitectureTests {
    @Test("an error reporting another keeps it as its cause: no error's message interpolates the caught error")
    func errorsKeepTheirCause() {
        let rewrap = #/[A-Z][A-Za-z]*Error\((\.[a-zA-Z]+, )?"[^"\n]*\\\(error(\.[a-z]+)?\)/#
        var checked = 0
        let walker = FileManager.default.enumerator(atPath: Self.sources)
        while let rel = walker?.nextObject() as? String {
            guard rel.hasSuffix(".swift"), let text = try? String(contentsOfFile: Self.sources + "/" + rel, encoding: .utf8) else { continue }
            checked += 1
            for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() where line.contains(rewrap) {
                Issue.record("Sources/\(rel):\(n + 1) puts the caught error in a message: pass it as `cause:`")
            }
        }
        #expect(checked > 200)
    }
}
