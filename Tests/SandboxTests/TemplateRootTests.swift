import CSandboxLaunch
import Foundation
@testable import Sandbox
import SandboxPolicy
import SupervisorIO
import Testing
import TestSupport

/// Template roots (`TemplateLayout`, `SharedTrees.template`): a long-lived supervisor builds a
/// plan's read-only binds and symlinks once, and each sandbox clones that root whole.
@Suite("Template roots: the shared read-only part of a sandbox's tree, cloned in one call", .serialized)
struct TemplateRootTests {
    typealias Role = TemplateLayout.Role

    static func mount(_ kind: LaunchPlan.Mount.Kind, _ dest: String) -> LaunchPlan.Mount {
        LaunchPlan.Mount(kind: kind, destination: dest, origin: "test")
    }
    static func ro(_ dest: String) -> LaunchPlan.Mount { mount(.bind(source: dest, readOnly: true, device: 1, inode: 2, isDirectory: true), dest) }
    static func rw(_ dest: String) -> LaunchPlan.Mount { mount(.bind(source: dest, readOnly: false, device: 1, inode: 2, isDirectory: true), dest) }
    static func tmpfs(_ dest: String) -> LaunchPlan.Mount { mount(.tmpfs(size: 1 << 20, mode: 0o1777), dest) }
    static func link(_ dest: String) -> LaunchPlan.Mount { mount(.symlink(target: "usr" + dest), dest) }
    static func hide(_ dest: String) -> LaunchPlan.Mount { mount(.hide, dest) }

    @Test("only read-only binds and symlinks go into the template, and never onto an entry a sandbox mounts itself")
    func layoutRules() {
        // benchmark-task's shape: everything shared but the tmpfs and the read-write work dir,
        // whose mount points the template holds.
        #expect(TemplateLayout.of([Self.ro("/usr"), Self.link("/bin"), Self.tmpfs("/tmp"), Self.rw("/app"), Self.ro("/agent"), Self.ro("/etc/ssl")])?.roles
                == [.inTemplate, .inTemplate, .mountPointInTemplate, .mountPointInTemplate, .inTemplate, .inTemplate])
        // Inside a sandbox's own tmpfs: stays the sandbox's (the tmpfs would cover it).
        #expect(TemplateLayout.of([Self.ro("/usr"), Self.tmpfs("/x"), Self.ro("/x/y")])?.roles == [.inTemplate, .mountPointInTemplate, .perSandbox])
        // A hole punched into a shared bind is the sandbox's, and so is all that lies under it.
        #expect(TemplateLayout.of([Self.ro("/a"), Self.hide("/a/b"), Self.ro("/a/b/c"), Self.ro("/d")])?.roles
                == [.inTemplate, .perSandbox, .perSandbox, .inTemplate])
        // A mount point inside a shared bind is made at launch, where it always was.
        #expect(TemplateLayout.of([Self.ro("/a"), Self.tmpfs("/a/t")])?.roles == [.inTemplate, .perSandbox])
        // The same destination twice: the later one stays on top of the earlier.
        #expect(TemplateLayout.of([Self.ro("/usr"), Self.rw("/w"), Self.ro("/w")])?.roles == [.inTemplate, .mountPointInTemplate, .perSandbox])
        // A prefix is not a parent.
        #expect(TemplateLayout.of([Self.tmpfs("/usr"), Self.ro("/usr2")])?.roles == [.mountPointInTemplate, .inTemplate])
        // No template: nothing to share, or an entry at or above the mount points it makes.
        #expect(TemplateLayout.of([Self.rw("/app"), Self.tmpfs("/tmp")]) == nil)
        #expect(TemplateLayout.of([Self.ro("/usr"), Self.ro("/dev/fuse")]) == nil)
        #expect(TemplateLayout.of([Self.ro("/usr"), Self.tmpfs("/proc")]) == nil)
        #expect(TemplateLayout.of([Self.ro("/")]) == nil)
        // A hide directly in the root would need its parents made at launch in a read-only root.
        #expect(TemplateLayout.of([Self.ro("/usr"), Self.hide("/opt/x")]) == nil)
    }

    @Test("two plans whose paths differ only by a canonically equivalent spelling get two templates")
    func keysCompareBytes() throws {
        func plan(_ target: String) throws -> LaunchPlan {
            let policy = Policy(name: "keys", mounts: minimalMounts + [MountSpec(kind: .symlink(target: target), destination: "/s")])
            return try PlanCompiler.compile(policy: policy, command: ["/bin/true"], hostEnvironment: [:])
        }
        let a = try plan("x\u{301}\u{323}"), b = try plan("x\u{323}\u{301}")
        #expect("x\u{301}\u{323}" == "x\u{323}\u{301}", "Swift calls them equal")
        let la = try #require(TemplateLayout.of(a.mounts)), lb = try #require(TemplateLayout.of(b.mounts))
        #expect(la.key(a, rootSize: 1) != lb.key(b, rootSize: 1))
    }

    /// Runs `script` (sh) under `policy`'s mounts plus /out read-write; returns its output.
    static func run(_ script: String, mounts: [MountSpec], out: String, trees: SharedTrees?, useLauncher: Bool = true) throws -> (SandboxResult, String, LaunchPlan) {
        let plan = try shellPlan(script, mounts: mounts, out: out)
        var options = RunOptions()
        options.sharedTrees = trees
        options.useLauncher = useLauncher
        let (r, text) = try runCapturing(plan, out: out, options: options)
        return (r, text, plan)
    }

    /// The template `trees` holds for `plan` (nil: none).
    static func entry(_ trees: SharedTrees, _ plan: LaunchPlan) -> TemplateRoot? {
        guard let key = TemplateLayout.of(plan.mounts)?.key(plan, rootSize: 4 << 20) else { return nil }
        return trees.templates.withLock { trees.templates.value[key] }
    }

    /// When the template `trees` holds for `plan` was last cloned.
    static func lastUse(_ trees: SharedTrees, _ plan: LaunchPlan) -> Double? {
        entry(trees, plan).map { e in trees.templates.withLock { e.lastUse } }
    }

    /// What a sandbox sees of its tree. /proc's link count is left out: it moves with the number
    /// of processes on the host between any two runs.
    static let look = """
        ls -la --time-style=+ / /etc /tmp | tr -s ' ' | sed 's/^dr-xr-xr-x *[0-9]* \\(.*proc\\)$/dr-xr-xr-x N \\1/'; stat -c '%n %u %g %a %F' / /etc /tmp /bin /etc/hostname /out
        cut -d' ' -f4-6 /proc/self/mountinfo | sort
        touch /planted 2>&1; mkdir /etc/planted 2>&1; ln -s x /tmp/../planted 2>&1
        echo mine > /tmp/mine; ls /tmp
        """

    @Test("a sandbox cloned from a template root sees exactly the tree one that built its own does: same entries, owners, modes and mount options; its root refuses writes", arguments: [true, false])
    func sameTreeAsBuilt(useLauncher: Bool) throws {
        try requireRoot()
        let trees = try #require(SharedTrees.install(), "\(SharedTrees.unavailableReason ?? "")")
        let out = try TempDir(mode: 0o777)
        let host = try TempDir()
        try "host\n".write(toFile: host.path + "/hostname", atomically: false, encoding: .utf8)
        let mounts = minimalMounts + [MountSpec(kind: .tmpfs(size: nil, mode: 0o1777), destination: "/tmp"),
                                      MountSpec(kind: .readOnly(source: host.path + "/hostname"), destination: "/etc/hostname")]
        let t0 = monotonicNow()
        let (r1, templated, plan) = try Self.run(Self.look, mounts: mounts, out: out.path, trees: trees, useLauncher: useLauncher)
        #expect((Self.lastUse(trees, plan) ?? 0) >= t0, "the sandbox was cloned from a template")
        let (r2, own, _) = try Self.run(Self.look, mounts: mounts, out: out.path, trees: nil, useLauncher: useLauncher)
        #expect(r1.termination == .exited(0) && r2.termination == .exited(0), "\(templated)\n\(own)")
        #expect(templated == own, "\(templated)\n---\n\(own)")
        #expect(templated.contains("touch: cannot touch '/planted': Read-only file system"), "\(templated)")
        #expect(templated.contains("mkdir: cannot create directory '/etc/planted': Read-only file system") ||
                templated.contains("mkdir: cannot create directory ‘/etc/planted’: Read-only file system"), "\(templated)")
        // Its root and mount points are the sandbox user's, as in a root init made.
        #expect(templated.contains("/ 1000 1000 755 directory"), "\(templated)")
        #expect(templated.contains("/usr /usr ro,nosuid,nodev,relatime"), "\(templated)")
        // A second sandbox of the plan clones a template too (the same one, unless suites beside
        // this one pushed it out of the cache) and sees nothing the first wrote.
        let t1 = monotonicNow()
        let (_, second, _) = try Self.run(Self.look, mounts: mounts, out: out.path, trees: trees, useLauncher: useLauncher)
        #expect((Self.lastUse(trees, plan) ?? 0) >= t1, "the second sandbox was cloned from a template")
        #expect(second == templated, "\(second)\n---\n\(templated)")
    }

    @Test("two sandboxes of one template running at once: each one's /tmp and mounts are its own")
    func concurrentSandboxesShareNothingWritable() throws {
        try requireRoot()
        let trees = try #require(SharedTrees.install(), "\(SharedTrees.unavailableReason ?? "")")
        let out = try TempDir(mode: 0o777)
        let mounts = minimalMounts + [MountSpec(kind: .tmpfs(size: nil, mode: 0o1777), destination: "/tmp")]
        // The first writes its mark and waits for the second's; the second looks for the first's.
        let first = "echo first > /tmp/mark; touch /out/first-ready; i=0; while [ ! -e /out/second-done ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; ls /tmp; wc -l < /proc/self/mountinfo"
        let second = "i=0; while [ ! -e /out/first-ready ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; ls /tmp; cat /tmp/mark 2>&1; wc -l < /proc/self/mountinfo; touch /out/second-done"
        let firstOutput = Locked<String?>(nil)
        let path = out.path
        let t = Thread {
            let text = (try? Self.run(first, mounts: mounts, out: path, trees: trees).1) ?? "failed"
            firstOutput.withLock { firstOutput.value = text }
        }
        t.start()
        let (_, b, _) = try Self.run(second, mounts: mounts, out: out.path, trees: trees)
        var a = ""
        while true {
            if let done = firstOutput.withLock({ firstOutput.value }) { a = done; break }
            usleep(20_000)
        }
        let al = a.split(separator: "\n"), bl = b.split(separator: "\n")
        #expect(al.first == "mark", "\(a)")
        #expect(b.contains("cat: /tmp/mark: No such file or directory"), "\(b)")
        // Same number of mounts: nothing of one sandbox's build reached the other's tree.
        #expect(al.last == bl.last, "\(a)\n---\n\(b)")
    }

    @Test("a bind source swapped after the template was built: a plan compiled since gets a new template and the new file; the stale plan's launch is refused as before (ESTALE)")
    func swappedSource() throws {
        try requireRoot()
        let trees = try #require(SharedTrees.install(), "\(SharedTrees.unavailableReason ?? "")")
        let out = try TempDir(mode: 0o777)
        let host = try TempDir()
        let file = host.path + "/data"
        try "old\n".write(toFile: file, atomically: false, encoding: .utf8)
        var limits = Limits()
        limits.timeoutSeconds = 30
        let policy = Policy(name: "swap", mounts: minimalMounts + [MountSpec(kind: .readOnly(source: file), destination: "/data")], limits: limits)
        func launch(_ plan: LaunchPlan) throws -> (SandboxResult, String) {
            var options = RunOptions()
            options.sharedTrees = trees
            return try runCapturing(plan, out: out.path, options: options)
        }
        let stale = try PlanCompiler.compile(policy: policy, command: ["/bin/cat", "/data"], hostEnvironment: [:])
        #expect(try launch(stale).1 == "old\n")
        #expect(Self.lastUse(trees, stale) != nil, "the stale plan's launch built a template")
        let builds = trees.templatesBuilt
        try "new\n".write(toFile: file + ".next", atomically: false, encoding: .utf8)
        #expect(rename(file + ".next", file) == 0)
        let fresh = try PlanCompiler.compile(policy: policy, command: ["/bin/cat", "/data"], hostEnvironment: [:])
        #expect(try launch(fresh).1 == "new\n")
        #expect(trees.templatesBuilt == builds + 1)
        // The stale plan's template (built before the swap) is the old file, exactly what that
        // plan was checked against; a template built now for it is refused like a bind would be.
        let failedBefore = trees.templatesFailed
        trees.templates.withLock { trees.templates.value.removeAll() }
        let (r, text) = try launch(stale)
        #expect(trees.templatesFailed == failedBefore + 1)
        guard case .setupFailed(let message, let e) = r.termination else {
            Issue.record("stale plan ran: \(r.termination) \(text)")
            return
        }
        #expect(e == ESTALE, "\(message)")
    }

    @Test("the launcher's builder refuses to put a writable entry into a template (tmpfs, read-write bind, hide)")
    func builderRefusesWritableEntries() throws {
        try requireRoot()
        let host = try TempDir()
        for kind in [LaunchPlan.Mount.Kind.tmpfs(size: 1 << 20, mode: 0o755),
                     .bind(source: host.path, readOnly: false, device: 0, inode: 0, isDirectory: true), .hide] {
            var st = stat()
            _ = stat(host.path, &st)
            var k = kind
            if case .bind(let s, let ro, _, _, let d, let n) = kind { k = .bind(source: s, readOnly: ro, device: UInt64(st.st_dev), inode: UInt64(st.st_ino), isDirectory: d, noSymlinks: n) }
            let policy = Policy(name: "refuse", mounts: minimalMounts)
            var plan = try PlanCompiler.compile(policy: policy, command: ["/bin/true"], hostEnvironment: [:])
            plan.mounts.append(LaunchPlan.Mount(kind: k, destination: "/w", origin: "test"))
            let storage = CPlan(plan, stdio: (-1, -1, -1), cgroupJoin: [])
            storage.flagMounts(Array(repeating: .inTemplate, count: plan.mounts.count))
            var fd: Int32 = -1
            let rc = withUnsafePointer(to: &storage.plan) { ahl_build_template($0, &fd) }
            #expect(rc == EINVAL && fd == -1, "\(kind): \(rc)")
            if fd >= 0 { close(fd) }
        }
    }

    @Test("dropped templates (they carry when they were built) are built again for the next sandbox")
    func droppedTemplatesAreRebuilt() throws {
        try requireRoot()
        let trees = try #require(SharedTrees.install(), "\(SharedTrees.unavailableReason ?? "")")
        let out = try TempDir(mode: 0o777)
        let (_, _, plan) = try Self.run("true", mounts: minimalMounts, out: out.path, trees: trees)
        let before = try #require(Self.entry(trees, plan))
        #expect(trees.dropTemplates() >= 1)
        #expect(Self.entry(trees, plan) == nil)
        _ = try Self.run("true", mounts: minimalMounts, out: out.path, trees: trees)
        let after = try #require(Self.entry(trees, plan))
        #expect(after !== before && after.built > before.built, "built anew")
    }
}
