import Foundation
import Testing
import TestSupport

/// `autoharness policy export --format oci-seccomp`, loaded by a real OCI runtime: podman with
/// runc (the flags scripts/build-images found for this host) on the base image, the probe
/// bound in. A missing image fails the test: CI builds it first.
@Suite("The OCI seccomp export under podman")
struct OCISeccompTests {
    /// Each probe action's result line (`ok` or `errno NAME`), or `killed` when the shell
    /// reported the probe dead of SIGSYS.
    static func results(_ output: String, _ actions: [String]) -> [String: String] {
        var out: [String: String] = [:]
        for line in output.split(separator: "\n") where line.hasPrefix("RESULT ") {
            let f = line.split(separator: " ").map(String.init)
            guard f.count >= 3 else { continue }
            out[f[1]] = f[2] == "errno" && f.count >= 4 ? "errno " + f[3] : f[2]
        }
        for a in actions where out[a] == nil { out[a] = output.contains("KILLED \(a) 159") ? "killed" : "missing" }
        return out
    }

    /// A shell loop running every action, noting one killed by SIGSYS (status 159).
    static func loop(_ actions: [String]) -> String {
        "for a in \(actions.joined(separator: " ")); do /probe $a; s=$?; [ $s -gt 2 ] && echo KILLED $a $s; done; true"
    }

    @Test("podman with the exported base profile refuses every escape-suite syscall our sandbox refuses, with our errno (the listed exceptions aside), allows what ours allows, and without it they go through")
    func podmanRefusesWhatWeRefuse() throws {
        try requireRoot()
        let images = try RunAloneContainerTests.Images.built()
        let dir = try TempDir()
        let export = try autoharness(["policy", "export", "--format", "oci-seccomp", "base", "-o", dir.path + "/base.json"])
        #expect(export.status == 0, "\(export.stderr)")
        #expect(export.stderr.contains("no_new_privileges") && export.stderr.contains("other ABIs"), "\(export.stderr)")
        let profile = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir.path + "/base.json"))) as? [String: Any])
        let entries = try #require(profile["syscalls"] as? [[String: Any]])
        // The syscalls allowed only with argument rules: their refused forms get the default.
        let conditional = Set(entries.filter { $0["args"] != nil }.flatMap { $0["names"] as? [String] ?? [] })
        #expect(conditional.isSuperset(of: ["clone", "ioctl", "socket", "getsockopt", "prctl"]), "\(conditional)")
        let defaultErrno = (profile["defaultErrnoRet"] as? Int).map { $0 == 38 ? "errno ENOSYS" : $0 == 1 ? "errno EPERM" : "errno \($0)" } ?? "killed"

        let attacks = FilteredAttack.all
        let allowed = ["thread", "fionread", "ptrace-traceme", "socket-udp", "statx-basic", "prctl-set-name", "getsockopt-sndbuf", "setsockopt-reuseaddr", "fadvise-sequential", "preadv2"]
        let actions = attacks.map(\.action) + allowed
        let ours = Self.results(try autoharness(["sandbox", "exec", "--ro", Built.probe + ":/probe", "--", "/bin/sh", "-c", Self.loop(actions)]).stdout, actions)

        let cgroup = RunAloneContainerTests.PodmanCgroup()
        defer { cgroup.remove() }
        func podman(_ security: [String]) throws -> [String: String] {
            let r = try RunAloneContainerTests.podman(["run", "--rm", "--network=none", "--cgroup-parent", cgroup.path] + images.flags + security
                + ["-v", Built.probe + ":/probe:ro", "localhost/autoharness-base:bookworm", "/bin/sh", "-c", Self.loop(actions)])
            #expect(r.status == 0, "podman \(security): \(r.stdout) \(r.stderr)")
            return Self.results(r.stdout + r.stderr, actions)
        }
        let theirs = try podman(["--security-opt", "no-new-privileges", "--security-opt", "seccomp=" + dir.path + "/base.json"])
        // The control: the same container with no filter and every capability.
        let unconfined = try podman(["--privileged", "--security-opt", "seccomp=unconfined"])

        var differ: [String] = []
        for a in attacks {
            let mine = try #require(ours[a.action])
            #expect(mine == "errno " + a.errno, "our sandbox: \(a.action) gave \(mine)")
            let expected: String
            if a.action == "int80" || a.action == "x32" {
                expected = "killed"  // an architecture the profile does not list: runc kills
            } else if conditional.contains(a.audited) && (mine == "errno EPERM" || (a.audited == "socket" && mine == "errno EAFNOSUPPORT")) {
                expected = defaultErrno  // a refused argument form: the profile's default (the export's notes say so)
            } else {
                expected = mine
            }
            if theirs[a.action] != expected { differ.append("\(a.action): ours \(mine), podman \(theirs[a.action] ?? "-"), expected \(expected)") }
        }
        #expect(differ.isEmpty, "\(differ.joined(separator: "\n"))")
        for a in allowed {
            #expect(ours[a] == "ok" && theirs[a] == "ok", "\(a): ours \(ours[a] ?? "-"), podman \(theirs[a] ?? "-")")
        }
        // Without the profile most of the attacks are not refused that way: the refusals above
        // are the profile's.
        let profileMadeTheDifference = attacks.filter { unconfined[$0.action] != theirs[$0.action] }
        #expect(profileMadeTheDifference.count >= attacks.count / 2, "only \(profileMadeTheDifference.map(\.action)) differ without the profile: \(unconfined)")
    }

    @Test("every shipped policy exports a profile runc starts a container with, and in it a thread starts and a mount is refused")
    func everyShippedPolicyLoads() throws {
        try requireRoot()
        let images = try RunAloneContainerTests.Images.built()
        let dir = try TempDir()
        let cgroup = RunAloneContainerTests.PodmanCgroup()
        defer { cgroup.remove() }
        let names = try FileManager.default.contentsOfDirectory(atPath: Built.packageRoot + "/policies").filter { $0.hasSuffix(".yaml") }.map { String($0.dropLast(5)) }.sorted()
        #expect(names.count >= 7, "\(names)")
        for name in names {
            let e = try autoharness(["policy", "export", name, "-o", dir.path + "/\(name).json"])
            #expect(e.status == 0, "\(name): \(e.stderr)")
            let r = try RunAloneContainerTests.podman(["run", "--rm", "--network=none", "--cgroup-parent", cgroup.path] + images.flags
                + ["--security-opt", "no-new-privileges", "--security-opt", "seccomp=" + dir.path + "/\(name).json",
                   "-v", Built.probe + ":/probe:ro", "localhost/autoharness-base:bookworm", "/bin/sh", "-c", "/probe thread; /probe mount"])
            #expect(r.stdout.contains("RESULT thread ok") && r.stdout.contains("RESULT mount errno EPERM"), "\(name): \(r.stdout)\(r.stderr)")
        }
    }
}
