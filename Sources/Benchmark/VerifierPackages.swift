// Packages a task's test script installs with apt-get, on its image.
//
// Terminal-Bench 2.0's test scripts start with `apt-get install -y curl` (which the verifier
// tools answer), and some ask for more (`apt-get install -y vim`, `expect`) that the tests then
// run. The verifier has no network, and the apt-get it runs is the toolbox's, which installs
// nothing: such a task scored 0 whatever the agent did. So on a task's image with package
// mirrors (`runner.network.allow`, `task_network_allow`), the packages its test script names
// are installed before the verifier starts, by the image's own apt-get, in a sandbox of the
// agent phase's kind (the image's root, root inside, the mirrors through the egress proxy,
// every request audited as the verifier's), on the root the verifier then gets. That sandbox
// sees no test and writes no reward; it runs the image's apt and dpkg, which the agent could
// have changed, so the task is flagged like a verifier that ran agent code. The toolbox's
// apt-get then finds them installed (dpkg's status file).

import Glibc
import SandboxPolicy
import SupervisorIO

enum VerifierPackages {
    /// How long the install may take.
    static let timeout = 900.0
    static let scriptLimit = 1 << 20

    /// The package names the task's tests ask `apt-get` for: those of `test.sh`, then of every
    /// other file in the tests directory, top level and one below (a script test.sh's pytest
    /// runs, configure-git-webserver's `verify.sh`, or a shell script inside a Python string),
    /// in order, each once; at most `fileLimit` files are read. The tests are the benchmark's:
    /// a name read from a comment only installs a package the mirrors have.
    static func requested(inTests directory: String) -> [String] {
        var files = [directory + "/test.sh"]
        var queue = [directory]
        while let dir = queue.first, files.count < fileLimit {
            queue.removeFirst()
            for name in FileSystem.names(in: dir) where !name.hasPrefix(".") {
                let path = dir + "/" + name
                switch LocalBenchmark.kind(path) {
                case S_IFREG where path != directory + "/test.sh" && files.count < fileLimit: files.append(path)
                case S_IFDIR where dir == directory: queue.append(path)
                default: break
                }
            }
        }
        var out: [String] = []
        for file in files {
            for name in requested(in: file) where !out.contains(name) { out.append(name) }
        }
        return out
    }

    static let fileLimit = 64

    /// The package names `apt-get install` / `apt install` lines of the script at `path`
    /// name (options, versions after `=`, shell words that are not names skipped), in order.
    static func requested(in path: String) -> [String] {
        guard case .success(let bytes) = InputFile.read(path, cap: scriptLimit) else { return [] }
        var out: [String] = []
        for raw in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
            let line = raw.split(separator: "#", maxSplits: 1).first.map(String.init) ?? ""
            // Each command of the line (`apt-get update && apt-get install -y x`).
            for command in line.split(whereSeparator: { ";&|".contains($0) }) {
                let words = command.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
                guard let at = words.firstIndex(where: { $0 == "apt-get" || $0 == "apt" || $0.hasSuffix("/apt-get") }),
                      words.dropFirst(at + 1).first(where: { !$0.hasPrefix("-") }) == "install" else { continue }
                var skip = false
                for w in words.dropFirst(at + 1) {
                    if skip { skip = false; continue }
                    if w == "-o" || w == "-t" || w == "-c" { skip = true; continue }
                    if w.hasPrefix("-") || w == "install" { continue }
                    if w.hasPrefix(">") || w.hasPrefix("<") || w.contains("$") { break }
                    let name = String(w.prefix { $0 != "=" && $0 != ":" })
                    if isName(name), !out.contains(name) { out.append(name) }
                }
            }
        }
        return out
    }

    /// A Debian package name (policy 5.6.1): lower-case letters, digits, `+ - .`, two or more.
    static func isName(_ s: String) -> Bool {
        guard s.count >= 2, s.count <= 100, let first = s.unicodeScalars.first,
              ("a"..."z").contains(first) || ("0"..."9").contains(first) else { return false }
        return s.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || "+-.".unicodeScalars.contains($0) }
    }

    /// The install, as the image's shell runs it: through the egress proxy, whatever the
    /// name (the sandbox's loopback has no mirror).
    static func command(_ packages: [String]) -> [String] {
        ["/bin/sh", "-c", "export DEBIAN_FRONTEND=noninteractive; unset no_proxy NO_PROXY; apt-get update -qq && apt-get install -y -qq --no-install-recommends \(packages.joined(separator: " "))"]
    }
}
