// Which verifiers ran agent code.
//
// A test that imports what agent.py wrote in /app, or builds and runs a program from it, runs
// agent code with the verifier's rights, before the verdict: an `__eq__` that is always true,
// an `os._exit(0)`, a file that reads the test's own expected values. Nothing outside the
// test script can tell that from solving; it is the task's design (docs/benchmarks.md, the
// "code under test" row). What can be told is that it happened: while each verifier runs,
// fanotify on /app's file system (the task's own tmpfs, nothing else on it moves) reports
// every file opened there with the opener's program, each opener held until both are read
// where the kernel allows (`OpenWatch`). Counted as agent code run: a file executed from /app;
// any file there a compiler, linker, build tool or the dynamic loader opened; a file whose
// name is code (sources, scripts, bytecode, pickles, build files) opened by any program but
// those that only read bytes (git, grep, checksums, diff); a file there a shell runs as its
// script (`bash /app/run`, whatever its name: its command line says so; a `source` of a file
// whose name is not code, or a redirection, is not told apart from a read and not counted);
// a file sed or awk was given as its script (`sed -f /app/fix.sed`: GNU sed's `e` runs
// commands). A file elsewhere on that file system (the verifier's /tmp is a directory there)
// counts when its bytes are those of a file agent.py left and it is executed or opened as
// above (`cp /app/prog /tmp/p; /tmp/p`: `AgentFiles`). A flag is a reason to look, not a
// verdict: the rewards stand. Not seen: a copy whose bytes changed on the way (unpacked,
// decoded, concatenated), or one run from outside that file system (a memfd).

import Glibc
import Sandbox
import SupervisorIO

enum AgentCodeRuns {
    /// Names that are code to their usual reader (an interpreter, a compiler, the loader, a
    /// shell, a build tool, pickle).
    /// Serialized objects whose loading runs code (pickle and its kin: torch checkpoints,
    /// numpy with allow_pickle, joblib, dill, compressed pickles) count as code.
    static let codeSuffixes = [".py", ".pyc", ".pyz", ".pth", ".pyx", ".ipynb", ".pkl", ".pickle", ".joblib", ".dill", ".sav",
                               ".pt", ".ckpt", ".npy", ".npz", ".h5", ".keras", ".pkl.gz", ".pkl.bz2", ".pkl.xz", ".so", ".sh",
                               ".bash", ".zsh", ".awk", ".sql",
                               ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".rb", ".pl", ".pm", ".php", ".lua", ".tcl", ".r", ".jl",
                               ".jar", ".class", ".wasm", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".rs", ".go",
                               ".java", ".kt", ".scala", ".swift", ".zig", ".ml", ".hs", ".cs", ".f90", ".f", ".cob",
                               ".cbl", ".v", ".sv", ".vhd", ".s", ".asm", ".mk", ".cmake"]
    static let codeNames: Set<String> = ["makefile", "gnumakefile", "cmakelists.txt", "pyproject.toml", "setup.cfg", "cargo.toml",
                                         "build.gradle", "pom.xml", "package.json", "conftest.py"]
    /// Programs whose every open of a file is building or loading code.
    static let codeReaders: Set<String> = ["cc1", "cc1plus", "cc1obj", "as", "ld", "ld.bfd", "ld.gold", "collect2", "rustc",
                                           "javac", "make", "gmake", "cmake", "ninja", "ld-linux-x86-64.so.2",
                                           "ld-linux-aarch64.so.1", "ld-linux.so.2", "ld.so", "compile", "link"]
    /// Programs that read a file's bytes and run nothing of it.
    static let dataReaders: Set<String> = ["git", "grep", "egrep", "fgrep", "rg", "sha1sum", "sha256sum", "sha512sum", "md5sum",
                                           "b2sum", "cksum", "wc", "diff", "cmp"]
    /// Shells: a file of /app given them as their script (`bash /app/run`).
    static let shells: Set<String> = ["bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "fish"]
    /// Programs whose `-f FILE` (`--file=FILE`) is a script they run.
    static let scriptFlagReaders: Set<String> = ["sed", "gsed", "awk", "gawk", "mawk", "nawk", "busybox"]
    /// Lines kept per task.
    static let limit = 20

    /// The file as the verifier saw it (`/app/...`), or nil when it is not in the working
    /// copy. fanotify's descriptor names a file opened through the verifier's bind by its
    /// path in the verifier's mount namespace (`/app/...`); one opened on the host, by its
    /// host path under `app`.
    static func inApp(_ path: String, app: String) -> String? {
        // A file removed while it was open reads as "PATH (deleted)": it is PATH.
        let path = path.hasSuffix(" (deleted)") ? String(path.dropLast(10)) : path
        if path.hasPrefix("/app/") { return path }
        if path.hasPrefix(app + "/") { return "/app" + path.dropFirst(app.count) }
        return nil
    }

    /// `path` (as the verifier saw it) when the agent's upper layer holds it, not as a whiteout.
    static func inUpper(_ path: String, upper: String) -> String? {
        let path = path.hasSuffix(" (deleted)") ? String(path.dropLast(10)) : path
        guard path.hasPrefix("/"), !path.hasPrefix(upper + "/"),
              let st = TaskImage.inUpper(upper, String(path.dropFirst())), st.st_mode & S_IFMT == S_IFREG else { return nil }
        return path
    }

    /// Whether an open of the working copy (`app`: its host path) is agent code run. On a
    /// task's image (`upper`: the agent's upper layer) a file anywhere counts as the agent's
    /// when that layer holds it: the agent made or changed it (installed, built, replaced).
    static func counts(_ open: OpenWatch.Open, app: String, upper: String? = nil) -> Bool {
        guard let path = inApp(open.path, app: app) ?? upper.flatMap({ inUpper(open.path, upper: $0) }) else { return false }
        if runsAsProgram(open, path) || codeReaders.contains(open.exe) { return true }
        if dataReaders.contains(open.exe) { return false }
        let name = path[path.index(after: path.lastIndex(of: "/")!)...].lowercased()
        return codeNames.contains(name) || codeSuffixes.contains { name.hasSuffix($0) } || name.contains(".so.")
    }

    /// Programs that run a script named as their first argument (`python3 /tmp/s.py`), by the
    /// start of their executable's name (`python3.11`).
    static let scriptRunners = ["python", "node", "nodejs", "perl", "ruby", "php", "lua", "Rscript", "tclsh", "julia", "deno", "bun"]

    /// `counts`, and a file elsewhere whose bytes are one of agent.py's (`event.file`) run as a
    /// program: executed, or the script a shell, an interpreter or sed/awk `-f` is given. Noted
    /// with the file it copies. A copy only imported or loaded as a library is not looked at:
    /// a test's own environment holds byte-identical packages of what agent.py installed (a
    /// review's venv: 707 false lines when every code open was compared).
    static func counts(_ open: inout OpenWatch.Open, _ event: OpenWatch.Event, app: String, upper: String?, agentFiles: AgentFiles) -> Bool {
        if counts(open, app: app, upper: upper) { return true }
        guard event.file >= 0, runsAsProgram(open, open.path), let original = agentFiles.original(of: event) else { return false }
        open.note = "a copy of \(original)"
        return true
    }

    /// Whether the open runs `path` (as the verifier saw it) as a program: executed, or the
    /// script a shell or an interpreter is given as its first argument, or sed/awk `-f`'s.
    static func runsAsProgram(_ open: OpenWatch.Open, _ path: String) -> Bool {
        open.executed
            || ((shells.contains(open.exe) || scriptRunners.contains { open.exe.hasPrefix($0) }) && runsScript(open.arguments, path))
            || (scriptFlagReaders.contains(open.exe) && givesScript(open.arguments, path))
    }

    /// Whether `arguments` hand `path` (a file's path, compared by its last component, the
    /// arguments being relative to the opener's directory) to its program as a script:
    /// `-f FILE`, `-fFILE`, `--file=FILE`, `--file FILE`, or `-f` last in a cluster (`-nf FILE`).
    static func givesScript(_ arguments: [String], _ path: String) -> Bool {
        func same(_ a: String) -> Bool { a.split(separator: "/").last == path.split(separator: "/").last }
        for (i, a) in arguments.enumerated().dropFirst() {
            let next = i + 1 < arguments.count ? arguments[i + 1] : nil
            if a == "--file" || (a.hasPrefix("-") && !a.hasPrefix("--") && a.hasSuffix("f")) { if let next, same(next) { return true } }
            if a.hasPrefix("--file="), same(String(a.dropFirst(7))) { return true }
            if a.hasPrefix("-f"), a.count > 2, same(String(a.dropFirst(2))) { return true }
        }
        return false
    }

    /// Whether a shell's `arguments` name `path` (compared by its last component) as the
    /// script it runs: the first argument that is not an option (`bash -e /app/run x`).
    static func runsScript(_ arguments: [String], _ path: String) -> Bool {
        guard let script = arguments.dropFirst().first(where: { !$0.hasPrefix("-") && !$0.hasPrefix("+") }) else { return false }
        return script.split(separator: "/").last == path.split(separator: "/").last
    }

    /// One line per file (`/app/...` as the verifier saw it), nil when nothing ran.
    static func lines(_ seen: OpenWatch.Seen, app: String) -> [String]? {
        var out = seen.opens.prefix(limit).map { o in
            "\(o.executed ? "executed" : "opened") \(inApp(o.path, app: app) ?? o.path)\(o.exe.isEmpty ? "" : " (\(o.exe))")"
                + (o.note.map { ", \($0)" } ?? "")
        }
        let more = seen.more + max(0, seen.opens.count - limit)
        if more > 0 { out.append("and \(more) more") }
        if seen.overflowed { out.append("more opens than could be read: the list is incomplete") }
        if !seen.blocking && !out.isEmpty {
            out.append("(this kernel has no fanotify permission events: opens were read after the fact, a quick one may be missing)")
        }
        return out.isEmpty ? nil : out
    }
}

/// The regular files agent.py left (the working copy; on an image, its whole upper layer), by
/// size, to tell whether a program the verifier ran elsewhere is a copy of one: indexed at the
/// first question, compared byte for byte, each reopened beneath its tree through no link and
/// no other mount and only if it is still the file indexed (the verifier can change the tree
/// meanwhile; a link it made must not lead the supervisor anywhere on the host). Asked only on
/// one open watch's thread: each watch has its own (no lock: a watch thread waiting for one
/// while the other's compare opens a file it must allow would never wake).
final class AgentFiles: @unchecked Sendable {
    struct Tree {
        var host: String
        /// How the verifier sees it: "/app", or "" for an image's root.
        var shown: String
    }
    struct File {
        var tree: Int
        /// Below the tree, no leading "/".
        var relative: String
        var device: UInt64
        var inode: UInt64
    }
    let trees: [Tree]
    static let entryLimit = 200_000
    /// Bytes read to compare per verifier at most.
    static let compareLimit = 4 << 30
    private var roots: [Int32] = []
    private var bySize: [Int: [File]]?
    private var answers: [[Int]: String?] = [:]
    private var compared = 0
    /// Why some copies could not be told (the list was cut, a file could not be read).
    private(set) var problem: String?

    init(app: String, upper: String?) {
        trees = upper.map { [Tree(host: $0, shown: "")] } ?? [Tree(host: app, shown: "/app")]
    }

    deinit { roots.forEach { if $0 >= 0 { close($0) } } }

    /// The agent's file (as the verifier sees it) whose bytes the opened file holds, if any.
    func original(of event: OpenWatch.Event) -> String? {
        let fd = event.file
        guard let st = FileSystem.fileStatus(fd), FileSystem.isRegular(st), st.st_size > 0 else { return nil }
        // Bit patterns: an inode number may use all 64 bits (an overlay with xino sets the top one).
        let key = [Int(truncatingIfNeeded: st.st_dev), Int(truncatingIfNeeded: st.st_ino), Int(st.st_size), st.st_mtim.tv_sec, st.st_mtim.tv_nsec]
        if let known = answers[key] { return known }
        var found: String?
        for c in index()[Int(st.st_size)] ?? [] where found == nil {
            let other = event.openUnwatched(root: roots[c.tree], c.relative)
            guard other >= 0 else { problem = problem ?? "a file of agent.py's could not be reopened to compare: a copy of it may be missing"; continue }
            defer { close(other) }
            guard let ost = FileSystem.fileStatus(other), UInt64(ost.st_dev) == c.device, UInt64(ost.st_ino) == c.inode else { continue }
            let (same, read) = Self.same(fd, other, budget: Self.compareLimit - compared)
            compared += read
            if same == nil {
                problem = "more than \(Self.compareLimit >> 30) GiB read to compare: later copies were not checked"
                break
            }
            if same == true { found = trees[c.tree].shown + "/" + c.relative }
        }
        answers[key] = found
        return found
    }

    private func index() -> [Int: [File]] {
        if let bySize { return bySize }
        var out: [Int: [File]] = [:]
        for (i, tree) in trees.enumerated() {
            let root = FileSystem.openDirectory(tree.host)
            roots.append(root)
            guard root >= 0 else { problem = "\(tree.host): \(FileSystem.errorText())"; continue }
            do throws(IOFailure) {
                try TreeWalk.walk(root, label: tree.shown.isEmpty ? "/" : tree.shown, entryLimit: Self.entryLimit, depthLimit: 128) { _, _, st, path in
                    if FileSystem.isRegular(st), st.st_size > 0 {
                        out[Int(st.st_size), default: []].append(File(tree: i, relative: String(path.dropFirst()), device: UInt64(st.st_dev), inode: UInt64(st.st_ino)))
                    }
                    return true
                }
            } catch {
                problem = "agent.py's files were not all indexed (\(error.message)): a copy of one may be missing"
            }
        }
        bySize = out
        return out
    }

    /// Whether two files hold the same bytes (nil: more than `budget` bytes would be read),
    /// and the bytes read (both sides), stopping at the first difference.
    static func same(_ fd: Int32, _ other: Int32, budget: Int) -> (Bool?, Int) {
        let chunk = 1 << 16
        var a = [UInt8](repeating: 0, count: chunk), b = [UInt8](repeating: 0, count: chunk)
        var offset = 0, read = 0
        while true {
            guard read + 2 * chunk <= budget else { return (nil, read) }
            let n = a.withUnsafeMutableBytes { pread(fd, $0.baseAddress, chunk, off_t(offset)) }
            let m = b.withUnsafeMutableBytes { pread(other, $0.baseAddress, chunk, off_t(offset)) }
            read += max(0, n) + max(0, m)
            guard n == m, n >= 0 else { return (false, read) }
            if n == 0 { return (true, read) }
            guard a[0..<n] == b[0..<n] else { return (false, read) }
            offset += n
        }
    }
}
