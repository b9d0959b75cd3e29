import Benchmark
import Foundation
import Glibc
import SupervisorIO

/// Checks that a benchmark's tool and keys are there, with the install hint when not.
package enum ToolCheck {
    /// The first line `binary --version` prints (within 30 s), or nil.
    package static func version(of binary: String) -> String? {
        guard let r = try? ChildProcess.run([binary, "--version"], standardError: .discarded, timeout: 30, outputCap: 65536),
              r.succeeded, let line = r.output.split(separator: "\n").first else { return nil }
        return String(line).trimmingCharacters(in: .whitespaces)
    }

    static func environment(_ names: [String], for what: String) throws {
        let missing = names.filter { ProcessInfo.processInfo.environment[$0]?.isEmpty ?? true }
        guard missing.isEmpty else {
            throw ExperimentError(.usage, "\(missing.joined(separator: ", ")) \(missing.count == 1 ? "is" : "are") not set: \(what) needs \(missing.count == 1 ? "it" : "them") (runner.env_pass lists the variables passed into its sandbox); export \(missing[0])=... before running autoharness")
        }
    }

    /// The directories of the graders' sandbox's PATH (policies/base.yaml's env).
    static let sandboxPath = ["/usr/local/bin", "/usr/bin", "/bin"]

    /// BIRD-Interact's DB environment gives each task its own database from a template with
    /// PostgreSQL's client programs, run by name (BIRD-Interact-ADK/shared/db_utils.py,
    /// _drop_and_create_db and drop_task_db, at 451fe2c3518ee1cf908d8139e2913483bd519381:
    /// psql, dropdb, createdb); it runs in the graders' sandbox, which has the host's /usr.
    static func postgresClients() throws {
        let missing = ["psql", "createdb", "dropdb"].filter { name in
            !sandboxPath.contains { dir in
                var isDirectory: ObjCBool = false
                let p = dir + "/" + name
                return FileManager.default.fileExists(atPath: p, isDirectory: &isDirectory) && !isDirectory.boolValue
                    && FileManager.default.isExecutableFile(atPath: p)
            }
        }
        guard missing.isEmpty else {
            throw ExperimentError(.usage, """
                \(missing.joined(separator: ", ")) not found in \(sandboxPath.joined(separator: ", ")) (the PATH of the sandbox \
                where BIRD-Interact's DB environment runs): it runs psql, dropdb and createdb to give each task its own \
                database (BIRD-Interact-ADK/shared/db_utils.py); install PostgreSQL's client programs: \
                apt-get install postgresql-client (as BIRD-Interact's env/Dockerfile.bird_interact_eval does)
                """)
        }
    }

    /// Checks that `python` has every distribution `file` (a pip requirements file, e.g. the
    /// ADK's: google-adk, psycopg2-binary, litellm, ...) names, by distribution name through
    /// importlib.metadata, so a missing one is named now rather than as "services did not
    /// start" from inside a sandbox. `X-binary` is also satisfied by `X` (psycopg2 built from
    /// source). No file, no check.
    static func pythonRequirements(python: String, file: String) throws {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { return }
        let names: [String] = text.split(separator: "\n").compactMap { raw in
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
            guard let c = line.first, c.isLetter || c.isNumber else { return nil }  // options (-r, -e, --index-url) and blanks
            let name = line.prefix { $0.isLetter || $0.isNumber || "._-".contains($0) }
            return name.isEmpty ? nil : String(name)
        }
        guard !names.isEmpty else { return }
        let probe = """
            import importlib.metadata as m, sys
            def has(n):
                for d in (n, n[:-len("-binary")] if n.endswith("-binary") else None):
                    try:
                        if d: m.version(d); return True
                    except m.PackageNotFoundError:
                        pass
                return False
            print(" ".join(n for n in sys.argv[1:] if not has(n)))
            """
        let r: ChildProcess.Finished
        do { r = try ChildProcess.run([locate(python) ?? python, "-c", probe] + names, standardError: .discarded) } catch {
            throw ExperimentError(.usage, "\(python): cannot run it to check \(file)", cause: error)
        }
        let missing = r.output.split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty }
        guard r.succeeded else { throw ExperimentError(.usage, "\(python) could not check \(file) (exit \(r.status))") }
        guard missing.isEmpty else {
            throw ExperimentError(.usage, "\(python) lacks \(missing.joined(separator: ", ")), named in \(file): install them into that Python (\(python) -m pip install -r \(file)) or name the Python that has them (--tool, runner.command)")
        }
    }

    /// Finds `name` on the supervisor's PATH (or takes a path), resolved; nil if absent.
    package static func locate(_ name: String) -> String? {
        func executableFile(_ p: String) -> Bool {
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: p, isDirectory: &isDirectory) && !isDirectory.boolValue
                && FileManager.default.isExecutableFile(atPath: p)
        }
        guard !name.isEmpty else { return nil }
        if name.contains("/") { return executableFile(name) ? name : nil }
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":") {
            let p = "\(dir)/\(name)"
            if executableFile(p) { return p }
        }
        return nil
    }

    /// Where a tool is installed, to bind read-only: for `X/bin/tool` inside a Python
    /// virtual environment (X/pyvenv.cfg), X; otherwise the executable's directory.
    /// Its interpreter's home too, when the venv's pyvenv.cfg names one outside /usr (uv's
    /// managed Pythons live under ~/.local/share/uv/python).
    ///
    /// The venv is looked for beside the path as given first: a venv's `bin/python` is a
    /// symbolic link to the base interpreter, and following it first would bind the base
    /// install without the venv, whose packages would then be missing in the sandbox. Then
    /// beside the resolved path (a link *into* a venv, e.g. ~/.local/bin/harbor).
    package static func installRoots(of tool: String) -> [String] {
        guard let found = locate(tool) else { return [] }
        let absolute = found.hasPrefix("/") ? found : FileManager.default.currentDirectoryPath + "/" + found
        let real = URL(fileURLWithPath: absolute).resolvingSymlinksInPath().path
        func venv(of path: String) -> (String, String)? {
            // The directory holding bin/ must itself be reached without links for the bind.
            let parent = URL(fileURLWithPath: ((path as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent)
                .resolvingSymlinksInPath().path
            return smallText(parent + "/pyvenv.cfg").map { (parent, $0) }
        }
        guard let (parent, cfg) = venv(of: absolute) ?? venv(of: real) else { return [(real as NSString).deletingLastPathComponent] }
        var roots = [parent]
        for line in cfg.split(separator: "\n") {
            let kv = line.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            if kv.count == 2, kv[0] == "home", !kv[1].hasPrefix("/usr") {
                roots.append(((URL(fileURLWithPath: kv[1]).resolvingSymlinksInPath().path) as NSString).deletingLastPathComponent)
            }
        }
        return roots + editableSources(venv: parent).filter { e in !roots.contains { e == $0 || e.hasPrefix($0 + "/") } }
    }

    /// Directories an editable install (`pip install -e`) put on the venv's path: the plain
    /// directory lines of its site-packages' `.pth` files (hatchling and setuptools in
    /// compat mode write the project's source directory there, e.g. tau2-bench's src/).
    /// Import-hook `.pth` lines (`import ...`) are not followed.
    static func editableSources(venv: String) -> [String] {
        let fm = FileManager.default
        var out: [String] = []
        for lib in ["lib", "lib64"] {
            for python in ((try? fm.contentsOfDirectory(atPath: venv + "/" + lib)) ?? []).sorted() where python.hasPrefix("python") {
                let site = venv + "/" + lib + "/" + python + "/site-packages"
                for pth in ((try? fm.contentsOfDirectory(atPath: site)) ?? []).sorted() where pth.hasSuffix(".pth") {
                    guard let text = smallText(site + "/" + pth) else { continue }
                    for line in text.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }) where line.hasPrefix("/") {
                        var isDirectory: ObjCBool = false
                        let real = URL(fileURLWithPath: line).resolvingSymlinksInPath().path
                        if fm.fileExists(atPath: real, isDirectory: &isDirectory), isDirectory.boolValue, !out.contains(real) { out.append(real) }
                    }
                }
            }
        }
        return out
    }

    /// A venv's pyvenv.cfg or a .pth file: a few lines; nil when unreadable or over 64 KiB.
    static func smallText(_ path: String) -> String? {
        guard case .success(let bytes) = InputFile.read(path, cap: 64 << 10) else { return nil }
        return String(validating: bytes, as: UTF8.self)
    }

    /// The virtual environment `python` belongs to (standardised) and the first of its
    /// site-packages directories for which `holds` is true. `setting` names the config key in
    /// messages, `what` what the install must hold.
    package static func virtualEnvironment(of python: String, setting: String, what: String, hint: String,
                                           holds: (_ sitePackages: String) -> Bool) throws -> (environment: String, sitePackages: String) {
        let fm = FileManager.default
        let venv = ((python as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent
        guard fm.fileExists(atPath: venv + "/pyvenv.cfg") else {
            throw ExperimentError(.usage, "\(setting) \(python): not the Python of a virtual environment (no \(venv)/pyvenv.cfg): \(hint)")
        }
        let lib = venv + "/lib"
        for dir in ((try? fm.contentsOfDirectory(atPath: lib)) ?? []).sorted() where dir.hasPrefix("python") {
            let site = "\(lib)/\(dir)/site-packages"
            if holds(site) { return (URL(fileURLWithPath: venv).standardizedFileURL.path, site) }
        }
        throw ExperimentError(.usage, "\(venv) has no \(what): \(hint)")
    }

    /// The interpreter named by a script's `#!` line (`#!/usr/bin/env python3` gives python3).
    package static func interpreter(of tool: String) -> String? {
        // Only the first line: the tool may be a binary of many megabytes.
        guard let found = locate(tool), let data = InputFile.prefix(found, count: 256) else { return nil }
        let head = String(decoding: data, as: UTF8.self)
        guard head.hasPrefix("#!"), let line = head.dropFirst(2).split(separator: "\n").first else { return nil }
        let words = line.split(separator: " ").map(String.init)
        guard let first = words.first else { return nil }
        return first.hasSuffix("/env") ? words.dropFirst().first : first
    }

    static func tool(_ argv: [String]?, default name: String, hint: String) throws -> [String] {
        let argv = argv ?? [name]
        guard let first = argv.first, locate(first) != nil else {
            throw ExperimentError(.usage, "\(argv.first ?? name) not found (runner.command: \(argv.joined(separator: " "))): \(hint)")
        }
        return argv
    }
}
