import Foundation
import Testing

/// The rules of docs/architecture.md, read from the sources: which target may import what,
/// and that only SupervisorIO touches files the way a sandbox-written tree needs.
@Suite("Architecture: what each target may import and touch")
struct ArchitectureTests {
    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Sources").path

    /// docs/architecture.md's import rules, as data. A target not listed here fails the test: a new target
    /// gets its row in both places.
    static let allowed: [String: Set<String>] = [
        // Glibc for the one write-all (`Descriptor.writeAll`); no Foundation.
        "WireCoding": ["Glibc"],
        "SupervisorIO": ["Glibc", "CSystemCalls", "WireCoding"],
        "PolicyModel": ["SupervisorIO", "WireCoding"],
        // No YAML and no Foundation: the `sandbox exec` front finds cached policies with it.
        "PolicyStore": ["Glibc", "PolicyModel", "SupervisorIO", "WireCoding"],
        "SandboxPolicy": ["Glibc", "Foundation", "Yams", "PolicyModel", "PolicyStore", "SupervisorIO"],
        // No SandboxPolicy (which imports Foundation): a launch needs the model, not the loader.
        "Sandbox": ["Glibc", "PolicyModel", "SupervisorIO", "WireCoding", "CSandboxLaunch", "CSandboxSpawn", "CSystemCalls", "CSeccomp", "CCap", "CTLS", "Logging"],
        "Benchmark": ["Glibc", "Dispatch", "FoundationEssentials", "Sandbox", "SandboxPolicy", "SupervisorIO"],
        "Ledger": ["Glibc", "Foundation", "GRDB", "Crypto", "SupervisorIO"],
        // Experiment's four targets import downwards only: the model runs nothing, Execution
        // runs tasks without knowing the operations that call it, Evidence measures what both
        // did, and Experiment's operations put them together.
        "ExperimentModel": ["Glibc", "Foundation", "Synchronization", "ArgumentParser", "Yams", "Crypto", "Benchmark", "Ledger",
                            "Sandbox", "SandboxPolicy", "SupervisorIO", "BrokerWire"],
        "Execution": ["Glibc", "Foundation", "Synchronization", "Crypto", "Benchmark", "Sandbox", "SandboxPolicy", "SupervisorIO",
                      "WireCoding", "ExperimentModel"],
        "Evidence": ["Glibc", "Foundation", "Crypto", "Ledger", "Sandbox", "SupervisorIO", "ExperimentModel", "Execution"],
        "Experiment": ["Glibc", "Foundation", "Dispatch", "Synchronization", "ArgumentParser", "Yams", "Crypto", "Benchmark", "Ledger",
                       "Sandbox", "SandboxPolicy", "SupervisorIO", "BrokerWire", "WireCoding", "ExperimentModel", "Execution", "Evidence"],
        // The digest of the launch code's sources (generated), and the plugin that makes it.
        "LaunchCode": [],
        "LaunchCodeDigestPlugin": ["Foundation", "PackagePlugin"],
        // What the full CLI and its front share of `sandbox exec`: nothing the front must not link.
        "SandboxCLI": ["Glibc", "CSystemCalls", "LaunchCode", "Logging", "PolicyModel", "PolicyStore", "Sandbox", "SupervisorIO", "WireCoding"],
        "autoharness": ["Glibc", "Foundation", "ArgumentParser", "Logging", "Benchmark", "Experiment", "ExperimentModel", "Execution",
                        "Evidence", "Ledger", "Sandbox",
                        "SandboxCLI", "SandboxPolicy", "SupervisorIO", "WireCoding"],
        "autoharness-front": ["Glibc", "CSystemCalls", "PolicyModel", "PolicyStore", "Sandbox", "SandboxCLI", "SupervisorIO"],
        "BrokerWire": ["Glibc", "WireCoding"],
        "autoharness-client": ["Glibc", "BrokerWire", "WireCoding"],
        "autoharness-exec": ["Glibc", "CSystemCalls", "WireCoding"],
    ]

    /// The targets Experiment was split into, lowest first.
    static let experimentTargets = ["ExperimentModel", "Execution", "Evidence", "Experiment"]

    /// Swift files of a target with their text.
    static func files(_ target: String) -> [(path: String, text: String)] {
        let root = sources + "/" + target
        let walker = FileManager.default.enumerator(atPath: root)
        var out: [(String, String)] = []
        while let rel = walker?.nextObject() as? String {
            guard rel.hasSuffix(".swift"), let text = try? String(contentsOfFile: root + "/" + rel, encoding: .utf8) else { continue }
            out.append((target + "/" + rel, text))
        }
        return out
    }

    /// Module imports: top-level lines only (Python inside a string literal is indented).
    static func imports(_ text: String) -> [String] {
        text.split(separator: "\n").compactMap { line in
            guard line.hasPrefix("import ") || line.hasPrefix("@") else { return nil }
            let words = line.split(separator: " ")
            guard let i = words.firstIndex(of: "import"), i + 1 < words.count,
                  words[..<i].allSatisfy({ $0.hasPrefix("@") }) else { return nil }
            return String(words[i + 1])
        }
    }

    @Test("every Swift target imports only what the table allows")
    func importsFollowTheTable() throws {
        let targets = try FileManager.default.contentsOfDirectory(atPath: Self.sources)
            .filter { !Self.files($0).isEmpty && $0 != "sandbox-probe" }
        #expect(Set(targets) == Set(Self.allowed.keys), "targets with Swift sources vs the table")
        for target in targets {
            for (path, text) in Self.files(target) {
                for module in Self.imports(text) where !(Self.allowed[target] ?? []).contains(module) {
                    Issue.record("\(path) imports \(module), which \(target) may not")
                }
            }
        }
    }

    /// `autoharness run` is a sequencer over parts with one concern each (RunLoop.swift's
    /// header names them): the compiler checks who shares what, and nothing stops a run by
    /// sleeping.
    @Test("Experiment/Run: no file over 400 lines, no @unchecked Sendable, no implicitly unwrapped state, no sleeping or detached threads")
    func runIsASequencer() {
        let run = Self.files("Experiment").filter { $0.path.hasPrefix("Experiment/Run/") }
        #expect(run.count >= 8, "the run's parts: \(run.map(\.path))")
        for (path, text) in run {
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            #expect(lines.count <= 400, "\(path) has \(lines.count) lines")
            for (n, line) in lines.enumerated() {
                let code = line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
                for banned in ["@unchecked Sendable", "Thread.detachNewThread", "Thread.sleep", "usleep(", " sleep(", "NSLock"] where code.contains(banned) {
                    Issue.record("\(path):\(n + 1) uses \(banned)")
                }
                if code.range(of: #"(var|let)\s+\w+\s*:\s*[\w<>.\[\]]+!"#, options: .regularExpression) != nil {
                    Issue.record("\(path):\(n + 1) declares implicitly unwrapped state: \(line)")
                }
            }
        }
    }

    /// A newcomer reads RunLoop.swift's header to find a run's parts: it names every file of
    /// `Run/` (the header's lines are `///   Name   what it does`).
    @Test("RunLoop.swift's header names every other file in Experiment/Run, and only those")
    func runLoopHeaderNamesEveryFile() throws {
        let run = Self.files("Experiment").filter { $0.path.hasPrefix("Experiment/Run/") }
        let loop = try #require(run.first { $0.path.hasSuffix("/RunLoop.swift") }).text
        let named = Set(loop.split(separator: "\n").compactMap { line -> String? in
            guard let m = line.firstMatch(of: #/^///   ([A-Z]\w+) /#) else { return nil }
            return String(m.1)
        })
        let files = Set(run.map { String($0.path.split(separator: "/").last!.dropLast(".swift".count)) }).subtracting(["RunLoop"])
        #expect(named == files, "named but missing: \(named.subtracting(files).sorted()); not named: \(files.subtracting(named).sorted())")
    }

    /// Adding a benchmark touches one folder (ExperimentModel/Benchmarks: a BenchmarkKind and its
    /// entry in `BenchmarkKinds.all`) and its templates; nothing else switches on its name.
    @Test("benchmarks are registered in one place: every BenchmarkKind is in BenchmarkKinds.all with its templates, and no other code compares benchmark names")
    func benchmarksRegisteredOnce() throws {
        let kinds = Self.files("ExperimentModel").filter { $0.path.hasPrefix("ExperimentModel/Benchmarks/") }
        let registry = try #require(kinds.first { $0.path.hasSuffix("/BenchmarkKind.swift") }).text
        var names: [String] = []
        for (path, text) in kinds {
            for m in text.matches(of: #/struct (\w+): BenchmarkKind \{\n(?:.*\n)*?    (?:package )?let name = "([a-z0-9-]+)"/#) {
                #expect(registry.contains(String(m.1) + "()"), "\(path): \(m.1) is not in BenchmarkKinds.all")
                names.append(String(m.2))
            }
        }
        #expect(Set(names) == ["local", "terminal-bench", "tau-bench", "bird-interact", "command", "bfcl", "inspect"], "kinds found: \(names)")
        let templates = URL(fileURLWithPath: Self.sources).deletingLastPathComponent().path + "/templates/"
        for name in names {
            for file in ["keys.yaml", "runner.yaml", "PROGRAM.md", "agent.py"] {
                #expect(FileManager.default.fileExists(atPath: templates + name + "/" + file), "templates/\(name)/\(file) is missing")
            }
        }
        let external = names.filter { $0.contains("-") }.map { "\"" + $0 + "\"" }
        let targets = try FileManager.default.contentsOfDirectory(atPath: Self.sources)
        for target in targets {
            for (path, text) in Self.files(target) where !path.hasPrefix("ExperimentModel/Benchmarks/") && !path.hasPrefix("Benchmark/Adapters/") {
                for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    if line.contains(#/benchmark\s*[!=]=\s*"/#) { Issue.record("\(path):\(n + 1) compares a benchmark's name: \(line)") }
                    for name in external where line.contains(name) { Issue.record("\(path):\(n + 1) names the benchmark \(name)") }
                }
            }
        }
    }

    /// Files stay a size a reader takes in at once: a file that grows past these is split by
    /// concern (as launch.c, the config reader and the launch service were).
    @Test("no Swift file of Experiment's four targets is over 400 lines, and no Swift or C file under Sources over 600")
    func filesStaySmall() throws {
        let walker = FileManager.default.enumerator(atPath: Self.sources)
        var checked = 0
        while let rel = walker?.nextObject() as? String {
            guard rel.hasSuffix(".swift") || rel.hasSuffix(".c") || rel.hasSuffix(".h"),
                  let text = try? String(contentsOfFile: Self.sources + "/" + rel, encoding: .utf8) else { continue }
            checked += 1
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).count - 1
            let cap = Self.experimentTargets.contains { rel.hasPrefix($0 + "/") } ? 400 : 600
            #expect(lines <= cap, "Sources/\(rel) has \(lines) lines (at most \(cap))")
        }
        #expect(checked > 200, "files checked: \(checked)")
    }

    /// Foundation's `String(contentsOfFile:)` and `Data(contentsOf:)` stop at the first short
    /// read of a file whose size says 0, and the kernel hands /proc's seq_files out a page at a
    /// time: a test that read /proc/self/mountinfo that way missed the newest mounts whenever
    /// the host had more than a page of them (the sweep tests failed in CI for a session).
    @Test("no code reads a /proc file through Foundation's whole-file readers (they stop at a page of a seq_file)")
    func procReadThroughReadLoops() throws {
        let root = URL(fileURLWithPath: Self.sources).deletingLastPathComponent().path
        var offenders: [String] = []
        for dir in ["Sources", "Tests"] {
            let walker = FileManager.default.enumerator(atPath: root + "/" + dir)
            while let rel = walker?.nextObject() as? String {
                guard rel.hasSuffix(".swift"), let text = try? String(contentsOfFile: root + "/\(dir)/" + rel, encoding: .utf8) else { continue }
                for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
                where line.contains("contentsOfFile: \"/proc") || line.contains("fileURLWithPath: \"/proc") {
                    offenders.append("\(dir)/\(rel):\(n + 1)")
                }
            }
        }
        #expect(offenders.isEmpty, "read with procText (tests) or SmallFile.contents: \(offenders)")
    }

    /// README's source tree names every folder of the large libraries: a folder added
    /// without a line there is a part of the code a newcomer cannot find.
    @Test("README's source tree names every folder under Sources/Sandbox, Sources/Benchmark and Experiment's four targets")
    func readmeTreeMatchesSources() throws {
        let root = URL(fileURLWithPath: Self.sources).deletingLastPathComponent().path
        let readme = try String(contentsOfFile: root + "/README.md", encoding: .utf8)
        let tree = try #require(readme.range(of: "## The source tree").map { readme[$0.upperBound...] })
        let section = tree.range(of: "\n## ").map { tree[..<$0.lowerBound] } ?? tree
        var missing: [String] = []
        for library in ["Sandbox", "Benchmark"] + Self.experimentTargets {
            for entry in try FileManager.default.contentsOfDirectory(atPath: Self.sources + "/" + library).sorted() {
                var isDir: ObjCBool = false
                guard FileManager.default.fileExists(atPath: Self.sources + "/\(library)/\(entry)", isDirectory: &isDir), isDir.boolValue else { continue }
                if !section.contains("`Sources/\(library)/\(entry)") { missing.append("Sources/\(library)/\(entry)") }
            }
        }
        #expect(missing.isEmpty, "not in README's source tree: \(missing)")
    }

    /// The Python drivers are code of ours that runs in or beside sandboxes: each is listed in
    /// docs/architecture.md's table and kept under the size cap scripts/lint-python enforces.
    @Test("every Python driver (templates/*/autoharness_*.py) is in docs/architecture.md's driver table, and every row names one; each is at most 500 lines")
    func pythonDriversListed() throws {
        let root = URL(fileURLWithPath: Self.sources).deletingLastPathComponent().path
        var drivers: Set<String> = []
        for bench in try FileManager.default.contentsOfDirectory(atPath: root + "/templates") {
            for f in (try? FileManager.default.contentsOfDirectory(atPath: root + "/templates/" + bench)) ?? []
            where f.hasPrefix("autoharness_") && f.hasSuffix(".py") {
                let path = "templates/\(bench)/\(f)"
                drivers.insert(path)
                let lines = try String(contentsOfFile: root + "/" + path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).count - 1
                #expect(lines <= 500, "\(path): \(lines) lines")
            }
        }
        let doc = try String(contentsOfFile: root + "/docs/architecture.md", encoding: .utf8)
        let section = try #require(doc.range(of: "## Python drivers").map { doc[$0.upperBound...] })
        let rows = Set(section.split(separator: "\n").prefix { !$0.hasPrefix("## ") }.compactMap { line -> String? in
            guard line.hasPrefix("| `templates/") else { return nil }
            return line.dropFirst(3).prefix { $0 != "`" }.description
        })
        #expect(!drivers.isEmpty && rows == drivers, "listed but missing: \(rows.subtracting(drivers)); not listed: \(drivers.subtracting(rows))")
    }

    /// Comments say what the code does and why, not which issue or session asked for it: those
    /// numbers mean nothing to a reader of the code (the history and docs/CHANGELOG.md keep them).
    /// Another project's issue or PR, named with its project, is a reference and stays.
    @Test("no comment in the code, policies, templates or scripts cites this project's issue or session numbers")
    func noIssueNumbersInComments() throws {
        let root = URL(fileURLWithPath: Self.sources).deletingLastPathComponent().path
        let cite = try Regex(#"\b(issue|session) [0-9]+"#)
        var offenders: [String] = []
        for dir in ["Sources", "Tests", "policies", "templates", "scripts"] {
            let walker = FileManager.default.enumerator(atPath: root + "/" + dir)
            while let rel = walker?.nextObject() as? String {
                let ext = (rel as NSString).pathExtension
                guard ["swift", "c", "h", "py", "yaml", "sh", ""].contains(ext),
                      let text = try? String(contentsOfFile: root + "/\(dir)/" + rel, encoding: .utf8) else { continue }
                for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    let slashes = ["swift", "c", "h"].contains(ext)
                    let comment = slashes ? line.firstRange(of: "//").map { line[$0.lowerBound...] }
                        : line.firstRange(of: "#").map { line[$0.lowerBound...] }
                    guard let comment, comment.contains(cite), !comment.contains("in-toto/attestation") else { continue }
                    offenders.append("\(dir)/\(rel):\(n + 1)")
                }
            }
        }
        #expect(offenders.isEmpty, "\(offenders)")
    }

    /// A benchmark's own keys are declared by its settings type, in its kind's file, and read
    /// nowhere else: the config reader takes every key from the kinds (`BenchmarkKinds
    /// .settingKeyNames`) and a kind reads its fields through `settings(_:)`.
    @Test("each benchmark's keys are declared once, by its kind's settings type, and no other code of the supervisor names them")
    func benchmarkKeysOwnedByTheirKind() throws {
        let experiment = Self.experimentTargets.flatMap(Self.files)
        var declaring: [String: Set<String>] = [:]
        for (path, text) in experiment where path.hasPrefix("ExperimentModel/Benchmarks/") {
            let keys = text.matches(of: #/\.(?:text|choice|choices|integer|number|hostPorts|path|paths|flag|strings|variables)\("([a-z0-9_]+)", \\\./#)
                .map { String($0.1) }
            if !keys.isEmpty {
                #expect(text.contains("struct Settings: BenchmarkSettings {"), "\(path) declares keys outside a settings type")
            }
            for key in keys { declaring[key, default: []].insert(path) }
        }
        #expect(declaring.count >= 19 && declaring["env_provider"] != nil && declaring["seed"] != nil, "keys found: \(declaring.keys.sorted())")
        // One-word keys (seed, mode, domain, patience) are also ordinary words of other files
        // (the split's seed): the compound ones are checked.
        for (path, text) in experiment {
            for (key, owners) in declaring where key.contains("_") && !owners.contains(path) && text.contains("\"\(key)\"") {
                Issue.record("\(path) names \(key), a key of \(owners.sorted().joined(separator: ", "))")
            }
        }
    }

    /// docs/architecture.md's "Targets" is the one target table: every target of
    /// Package.swift, in its order, of the kind Package.swift declares.
    @Test("docs/architecture.md's target table lists exactly Package.swift's targets, in order, with their kinds")
    func targetTable() throws {
        let root = URL(fileURLWithPath: Self.sources).deletingLastPathComponent().path
        let manifest = try String(contentsOfFile: root + "/Package.swift", encoding: .utf8)
        let declared = manifest.matches(of: #/\.(target|executableTarget|systemLibrary|testTarget|plugin)\(\s*name:\s*"([^"]+)"/#)
            .map { (name: String($0.2), kind: String($0.1)) }
        #expect(declared.count > 20, "targets read from Package.swift: \(declared.map(\.name))")
        let doc = try String(contentsOfFile: root + "/docs/architecture.md", encoding: .utf8)
        let section = try #require(doc.components(separatedBy: "\n## Targets\n").dropFirst().first?.components(separatedBy: "\n## ").first)
        let rows = section.matches(of: #/\n\| `([^`]+)` \| ([a-zA-Z ]+) \|/#).map { (name: String($0.1), kind: String($0.2)) }
        #expect(rows.map(\.name) == declared.map(\.name), "the table's targets vs Package.swift's, in order")
        let kinds = ["systemLibrary": ["system library"], "executableTarget": ["executable"], "testTarget": ["test"], "target": ["library", "C"],
                     "plugin": ["build tool plugin"]]
        for row in rows {
            guard let d = declared.first(where: { $0.name == row.name }) else { continue }
            #expect(kinds[d.kind]?.contains(row.kind) == true, "\(row.name): the table says \(row.kind), Package.swift declares .\(d.kind)")
        }
        #expect(doc.components(separatedBy: "| target | kind |").count == 2, "one target table")
    }

    /// The docs back each claim with a test, written `(test: File.swift, name, "display name")`:
    /// every one named must exist, so a renamed or deleted test cannot leave a claim unbacked.
    @Test("every test docs/, README and container/README cite exists: the file under Tests/, and each function or display name in it")
    func docsCiteRealTests() throws {
        let root = URL(fileURLWithPath: Self.sources).deletingLastPathComponent().path
        var testFiles: [String: String] = [:]
        let walker = FileManager.default.enumerator(atPath: root + "/Tests")
        while let rel = walker?.nextObject() as? String {
            guard rel.hasSuffix(".swift"), let text = try? String(contentsOfFile: root + "/Tests/" + rel, encoding: .utf8) else { continue }
            testFiles[URL(fileURLWithPath: rel).lastPathComponent, default: ""] += text
        }
        let pages = try FileManager.default.contentsOfDirectory(atPath: root + "/docs").filter { $0.hasSuffix(".md") }.map { "docs/" + $0 }
            + ["README.md", "container/README.md"]
        var cited = 0
        for page in pages {
            let text = try String(contentsOfFile: root + "/" + page, encoding: .utf8)
                .replacing(#/\s*\n\s*/#, with: " ")
            for m in text.matches(of: #/test: (\w+\.swift), ((?:"[^"]*"|[^;)"])+)/#) {
                let file = String(m.1)
                guard let source = testFiles[file] else {
                    Issue.record("\(page) cites \(file), which is not under Tests/")
                    continue
                }
                // Names separated by commas; the first thing that is not one (prose after the
                // names) ends the list.
                var rest = Substring(String(m.2))
                while !rest.isEmpty {
                    if let quoted = rest.prefixMatch(of: #/\s*"([^"]*)"(\s*,)?/#) {
                        cited += 1
                        if !source.contains(String(quoted.1)) { Issue.record("\(page): \(file) has no test named \"\(quoted.1)\"") }
                        rest = quoted.2 == nil ? "" : rest[quoted.range.upperBound...]
                    } else if let named = rest.prefixMatch(of: #/\s*([A-Za-z_][\w.]*)\s*(?:,|$)/#) {
                        cited += 1
                        let function = named.1.split(separator: ".").last ?? named.1
                        if !source.contains("func \(function)(") { Issue.record("\(page): \(file) has no test function \(named.1)") }
                        rest = rest[named.range.upperBound...]
                    } else {
                        break
                    }
                }
            }
        }
        #expect(cited > 300, "citations read: \(cited)")
    }

    @Test("the launch C modules are imported only by the launch code (Sandbox/Launch)")
    func launchModuleStaysInLaunch() {
        for target in Self.allowed.keys {
            for module in ["CSandboxLaunch", "CSandboxSpawn"] {
                for (path, text) in Self.files(target) where Self.imports(text).contains(module) {
                    #expect(path.hasPrefix("Sandbox/Launch/"), "\(path) imports \(module)")
                }
            }
        }
    }

    @Test("every public error type has the project's one shape (AutoharnessError: a category the exit status follows from, a description, a cause)")
    func errorShape() {
        // Reasons inside a Result, never thrown to a caller: BrokerWire's RequestError (the
        // wire's parse result, answered over the socket; BrokerWire imports only Glibc), and
        // InputFile's and SandboxPath's Problem (their callers name the path and throw their
        // target's error), and YAMLReader's YAMLProblem (each reader turns it into its own).
        let exempt: Set<String> = ["RequestError", "Problem", "YAMLProblem"]
        var declared: [(type: String, path: String)] = []
        var conforming: Set<String> = []
        for target in Self.allowed.keys {
            for (path, text) in Self.files(target) {
                for line in text.split(separator: "\n") {
                    let words = line.split(whereSeparator: { " :,{".contains($0) }).map(String.init)
                    if words.count >= 3, words[0] == "public", ["struct", "enum"].contains(words[1]), words.dropFirst(3).contains("Error") {
                        declared.append((words[2], path))
                    }
                    if line.hasPrefix("extension "), line.contains(": AutoharnessError"), words.count > 1 {
                        conforming.insert(String(words[1].split(separator: ".").last!))
                    }
                }
            }
        }
        #expect(declared.count >= 9, "the scan finds the error types: \(declared)")
        for d in declared where !conforming.contains(d.type) && !exempt.contains(d.type) {
            Issue.record("\(d.path): \(d.type) is an Error without `extension \(d.type): AutoharnessError`")
        }
    }

    @Test("one YAML reader: only SandboxPolicy/YAMLReader.swift composes YAML, and no other file reads nodes into errors of its own (policies and the experiment config share its shapes and messages)")
    func oneYAMLReader() {
        for target in Self.allowed.keys {
            for (path, text) in Self.files(target) {
                if text.contains("Yams.compose(") || text.contains("Yams.load(") {
                    #expect(path == "SandboxPolicy/YAMLReader.swift", "\(path) composes YAML itself")
                }
                // A typed read of a node that reports shapes by itself: the two readers before.
                for shape in ["must be a mapping of key: value", "must be a list, not", "expected a mapping of keys", "expected a list of strings"]
                where text.contains(shape) {
                    #expect(path == "SandboxPolicy/YAMLReader.swift", "\(path) words a YAML shape itself: '\(shape)'")
                }
            }
        }
    }

    @Test("TLS (OpenSSL) is imported only by the proxy's inference gate (Sandbox/Network/Inference)")
    func tlsStaysInTheInferenceGate() {
        for target in Self.allowed.keys {
            for (path, text) in Self.files(target) where Self.imports(text).contains("CTLS") {
                #expect(path.hasPrefix("Sandbox/Network/Inference/"), "\(path) imports CTLS")
            }
        }
    }

    @Test("above SupervisorIO nobody walks, removes or links files by descriptor, spawns rm, or uses FileManager on a sandbox's tree")
    func fileAccessGoesThroughSupervisorIO() {
        // The *at() family and directory streams are how trees a sandbox wrote must be read;
        // SupervisorIO does it once, right. (Sandbox's page-cache eviction walks the host's
        // read-only bind sources, which no sandbox can write.)
        let fdCalls = ["openat(", "unlinkat(", "mkdirat(", "renameat(", "fdopendir(", "fstatat(", "readlinkat(", "symlinkat(",
                       "fchownat("]
        for target in ["Benchmark", "autoharness"] + Self.experimentTargets {
            for (path, text) in Self.files(target) {
                for call in fdCalls where text.contains(call) { Issue.record("\(path) calls \(call)") }
            }
        }
        for target in Self.allowed.keys {
            for (path, text) in Self.files(target) where text.contains("\"/bin/rm\"") || text.contains("\"rm\"") {
                Issue.record("\(path) runs rm")
            }
        }
        for target in ["SupervisorIO", "Sandbox", "Benchmark"] {
            for (path, text) in Self.files(target) where text.contains("FileManager") { Issue.record("\(path) uses FileManager") }
        }
        // Foundation's whole-file reads follow links, block on a FIFO and have no cap: above
        // SupervisorIO they read only files the operator or autoharness itself provides, named
        // here with why. Everything a sandbox wrote or could replace (a view in the agent's
        // workspace, a sandbox's output, a snapshot of agent.py) goes through InputFile.
        let operatorFiles: [String: String] = [
            "Experiment/Operations/Initialize.swift": "the shipped templates",
            "ExperimentModel/Benchmarks/ToolCheck.swift": "the benchmark tool's requirements file, from its install",
            "autoharness/RunCommand.swift": "the demo's config, which it just wrote",
        ]
        for target in ["autoharness"] + Self.experimentTargets {
            for (path, text) in Self.files(target) where operatorFiles[path] == nil {
                for call in ["Data(contentsOf:", "String(contentsOfFile:", ".contents(atPath:", "FileHandle(forReadingAtPath:"] where text.contains(call) {
                    Issue.record("\(path) reads a file with \(call): use SupervisorIO's InputFile (capped, no link followed)")
                }
            }
        }
        // The coding agent's staging copy and home are handled by these files; they must not
        // reach for Foundation's file calls.
        for path in ["Experiment/Run/Staging.swift"] {
            let text = (try? String(contentsOfFile: Self.sources + "/" + path, encoding: .utf8)) ?? ""
            #expect(!text.isEmpty && !text.contains("FileManager") && !text.contains("Process()"), "\(path)")
        }
    }
}
