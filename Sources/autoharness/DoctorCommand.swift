import ArgumentParser
import Benchmark
import Execution
import Experiment
import ExperimentModel
import Foundation
import Sandbox
import SandboxCLI
import SandboxPolicy
import SupervisorIO

struct DoctorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Report what this host enforces, what it cannot, and how to fix it.",
        discussion: """
            Checks privileges, namespaces (by starting a real sandbox), seccomp (errno, \
            user_notif, log), Landlock, and cgroups: version, where this process sits, each \
            controller the sandboxes use (memory, pids, cpu) and the freezer, cgroup.kill. Then, \
            for every policy in use (default: every shipped policy), whether its limits can be \
            enforced here. Then the held-out VM runtime (gate.held_out_runtime: vm): qemu, the \
            guest kernel, KVM (a probe boot of up to 20 s when /dev/kvm opens) and what a gate \
            would use; informational, as experiments choose it. Also informational: how \
            sandboxes start here, and what listens at the launch service's socket \
            (AUTOHARNESS_LAUNCH_SERVICE, default /run/autoharness/launch.sock), found without \
            connecting: nothing, systemd's socket unit, a service and whose. Exit 0 when \
            everything a policy in use needs is available, 1 otherwise.

            A supervisor placed in a delegated cgroup v2 (systemd Delegate=yes, a container's \
            own cgroup namespace) moves itself into a leaf `autoharness-supervisor` and enables \
            the controllers below its cgroup on the first sandbox launch; doctor's test sandbox \
            does that, and says so.
            """)

    @Option(name: .customLong("policy"), help: "A policy in use (name or file); repeatable. Default: every shipped policy.")
    var policies: [String] = []

    @Option(name: .customLong("policy-dir"), help: "Directory of sandbox policies, searched before the built-in ones.")
    var policyDirs: [String] = []

    @Flag(help: "Print only the one-line summary.")
    var summary = false

    func run() throws {
        let loader = PolicyLocator.loader(policyDirs)
        var problems: [String] = []
        var lines: [(String, String, String)] = []

        // A real sandbox first: it proves namespaces, mounts and seccomp together, and (on a
        // delegated cgroup v2) performs the delegation, so what follows is the state sandboxes get.
        if geteuid() == 0 {
            let test = Self.testSandbox(loader)
            lines.append(("sandbox", test.ok ? "ok" : "MISSING", test.message))
            if !test.ok { problems.append("a test sandbox failed: \(test.message)") }
            if test.ok {
                let freeze = Self.freezerCheck(loader)
                lines.append(("freeze", freeze.ok ? "ok" : "MISSING", freeze.message))
                if !freeze.ok { problems.append("freezer: \(freeze.message)") }
            }
            // How sandboxes start here (speed, not enforcement: either way is as strict).
            let monitor = Launcher.shared.map { "monitor \($0.path)" } ?? "monitor forked from the supervisor (\(Launcher.unavailableReason ?? ""))"
            let trees = SharedTrees.install() != nil ? "/proc covers cloned from a tree built once; /dev made per sandbox" : SharedTrees.unavailableReason ?? ""
            lines.append(("launch", "info", "\(monitor); \(trees)"))
            lines.append(("launch service", "info", LaunchService.state(at: LaunchService.frontSocket())))
        }
        let host = geteuid() == 0 ? CgroupHost.current : CgroupHost.detect()
        let report = HostInspection.inspect(host: host)
        lines.insert(("kernel", "info", report.kernel), at: 0)
        if let d = host.delegation { lines.append(("delegation", "info", d)) }
        for f in report.findings {
            let status = f.status == .missing ? "MISSING" : f.status.rawValue
            lines.append((f.topic, status, f.detail + (f.fix.map { "\n    fix: " + $0 } ?? "")))
            if f.status == .missing, !f.topic.hasPrefix("  ") { problems.append("\(f.topic): \(f.detail)") }
        }
        for (name, limits) in Self.policiesInUse(policies, loader: loader, problems: &problems) {
            let bad = HostInspection.unenforceable(limits, host: host)
            if bad.isEmpty {
                lines.append(("policy \(name)", "ok", "limits enforceable"))
            } else {
                lines.append(("policy \(name)", "MISSING", "\(bad.joined(separator: ", ")) cannot be enforced on this host"))
                problems.append("policy \(name): \(bad.joined(separator: ", ")) cannot be enforced")
            }
        }
        // Tasks on their own image (`autoharness images`): informational, as benchmarks choose it.
        if !summary { lines.append(("images", "info", Self.imagesLine())) }
        // Train runs of tasks that declare their storage (`TaskDisks`): informational too.
        if !summary && geteuid() == 0 {
            lines.append(("task disks", "info", TaskDisks.unavailable.map { "tasks that declare storage run on their 2 GiB tmpfs: \($0)" }
                ?? "loop devices and mke2fs: a train run of a task that declares storage gets an ext4 of that size on disk"))
        }
        // The held-out VM runtime (gate.held_out_runtime: vm): informational, as experiments
        // choose it; its own refusal names what is missing when one does.
        if geteuid() == 0 && !summary {
            for l in VMHostCheck.doctorLines(progress: { FileHandle.standardError.write(Data(($0 + "\n").utf8)) }) {
                lines.append((l.topic, l.status, l.detail))
            }
        }
        let line = Self.summaryLine(report: report, host: host, problems: problems)
        if !summary {
            let width = lines.map(\.0.count).max() ?? 20
            for (topic, status, detail) in lines {
                print(topic.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + status.padding(toLength: 8, withPad: " ", startingAt: 0) + " " + detail)
            }
            print("")
        }
        print(line)
        if !problems.isEmpty { throw ExitCode(Exit.failure) }
    }

    /// `doctor: ok (…)` or `doctor: N problem(s): …`, the line `run` and `demo` print at start.
    static func summaryLine(report: HostInspection, host: CgroupHost, problems: [String]) -> String {
        guard problems.isEmpty else {
            return "doctor: \(problems.count) problem\(problems.count == 1 ? "" : "s"): \(problems.joined(separator: "; ")) (details: autoharness doctor)"
        }
        let limits = CgroupHost.controllersUsed.map { c -> String in
            if let v2 = host.v2, v2.controllers.contains(c) || (v2.available.contains(c) && host.v1[c] == nil) { return "\(c) v2" }
            return host.v1[c] != nil ? "\(c) v1" : "\(c) none"
        }
        return "doctor: ok: kernel \(report.kernel); cgroup limits \(limits.joined(separator: ", ")); seccomp with user_notif"
    }

    /// Summary for the start of `run` and `demo`, without a test sandbox.
    static func startupSummary(policies: [String] = []) -> String {
        var problems: [String] = []
        let host = CgroupHost.current
        let report = HostInspection.inspect(host: host)
        for f in report.findings where f.status == .missing && !f.topic.hasPrefix("  ") { problems.append("\(f.topic): \(f.detail)") }
        for (name, limits) in policiesInUse(policies, loader: PolicyLocator.loader([]), problems: &problems) {
            let bad = HostInspection.unenforceable(limits, host: host)
            if !bad.isEmpty { problems.append("policy \(name): \(bad.joined(separator: ", ")) cannot be enforced") }
        }
        return summaryLine(report: report, host: host, problems: problems)
    }

    static func policiesInUse(_ names: [String], loader: PolicyLoader, problems: inout [String]) -> [(String, Limits)] {
        var chosen = names
        if chosen.isEmpty, let dir = loader.searchPaths.first(where: { access($0 + "/base.yaml", F_OK) == 0 }) {
            chosen = ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [])
                .filter { $0.hasSuffix(".yaml") }.map { String($0.dropLast(5)) }.sorted()
        }
        var out: [(String, Limits)] = []
        for name in chosen {
            do {
                out.append((name, try loader.load(name, requireAllPlaceholders: false).limits))
            } catch let d as PolicyDiagnostics {
                problems.append("policy \(name): \(d.errors.first?.description ?? "invalid")")
            } catch {
                problems.append("policy \(name): \(error)")
            }
        }
        return out
    }

    /// A sandbox ticking into a file every 10 ms is frozen, sent SIGCONT (which would undo
    /// a SIGSTOP-based pause), checked for silence, thawed and checked for ticks again: the
    /// freeze that holds the coding agent during gates, tried on this host.
    static func freezerCheck(_ loader: PolicyLoader) -> (ok: Bool, message: String) {
        var template = Array("/tmp/autoharness-doctor-XXXXXX".utf8CString)
        guard let dirPtr = mkdtemp(&template) else { return (false, "mkdtemp: \(String(cString: strerror(errno)))") }
        let dir = String(cString: dirPtr)
        defer { _ = unlink(dir + "/ticks"); _ = rmdir(dir) }
        chmod(dir, 0o777)
        let plan: LaunchPlan
        do {
            var policy = try loader.load("base", requireAllPlaceholders: false)
            policy.mounts.append(MountSpec(kind: .readWrite(source: dir), destination: "/out"))
            policy.limits.timeoutSeconds = 20
            plan = try PlanCompiler.compile(policy: policy, command: ["/bin/sh", "-c", "while :; do echo >> /out/ticks; sleep 0.01; done"], hostEnvironment: [:])
        } catch {
            return (false, "could not build the test sandbox: \(error)")
        }
        var options = RunOptions()
        options.allowUnenforcedLimits = true
        let control = SandboxControl()
        options.control = control
        let finished = DispatchSemaphore(value: 0)
        let runOptions = options
        let failure = LockedText()
        Thread.detachNewThread {
            do throws(SandboxError) {
                let r = try SandboxRunner.run(plan, options: runOptions)
                if case .setupFailed(let m, _) = r.termination { failure.set(m) }
            } catch {
                failure.set(error.message)
            }
            finished.signal()
        }
        defer {
            control.kill()
            finished.wait()
        }
        func ticks() -> Int {
            var st = stat()
            return stat(dir + "/ticks", &st) == 0 ? Int(st.st_size) : 0
        }
        let start = Date()
        while ticks() < 5 && failure.get() == nil && Date().timeIntervalSince(start) < 5 { usleep(10_000) }
        guard ticks() >= 5 else { return (false, "the test sandbox never ran" + (failure.get().map { ": \($0)" } ?? "")) }
        do throws(SandboxError) {
            try control.freeze()
        } catch {
            return (false, error.message)
        }
        let pids = control.processIDs
        for p in pids { Glibc.kill(p, SIGCONT) }
        let held = ticks()
        usleep(300_000)
        guard control.isFrozen, ticks() == held else {
            return (false, "a frozen test sandbox ran on after SIGCONT (\(ticks() - held) ticks in 0.3 s)")
        }
        try? control.thaw()
        usleep(300_000)
        guard ticks() > held else { return (false, "the test sandbox did not run again after the thaw") }
        return (true, "a test sandbox (\(pids.count) processes) stayed frozen against SIGCONT for 0.3 s and ran again when thawed")
    }

    /// What `autoharness images` needs here: podman to build, overlayfs to give each task its
    /// own layer over the image.
    static func imagesLine() -> String {
        let filesystems = (try? InputFile.read("/proc/filesystems", cap: 1 << 16).get()).map { String(decoding: $0, as: UTF8.self) } ?? ""
        let overlay = filesystems.contains("\toverlay\n")
        let candidates: [String] = ["/usr/bin/podman", "/usr/local/bin/podman"]
        let podman = candidates.first { access($0, X_OK) == 0 }
        let version = podman.flatMap { try? ChildProcess.run([$0, "--version"], standardError: .discarded, timeout: 30) }
            .map { $0.output.trimmingCharacters(in: .whitespacesAndNewlines) }
        let ids: String
        do {
            let r = try ImageIDs.range()
            ids = "image sandboxes map ids 0-\(r.count - 1) onto host uids \(r.uid)-\(r.uid + (r.count - 1)), gids \(r.gid)-\(r.gid + (r.count - 1))"
                + (r.uid == ImageIDs.defaultStart ? " (the default; a line autoharness:START:\(r.count) in /etc/subuid and /etc/subgid names another)" : " (/etc/subuid, /etc/subgid)")
        } catch {
            ids = "no host ids for image sandboxes: \(error.message)"
        }
        return "\(version.map { "\($0) builds task images" } ?? "podman not found: tasks with a Dockerfile run on this host's userland (apt-get install podman)"); "
            + (overlay ? "overlayfs available for each task's layer" : "overlayfs not available: a task cannot run on its image here") + "; " + ids
    }

    /// `/bin/true` under the base policy, limits allowed to be unenforced (they are reported
    /// separately): namespaces, mounts, seccomp and capabilities as every sandbox has them.
    static func testSandbox(_ loader: PolicyLoader) -> (ok: Bool, message: String) {
        do {
            let policy = try loader.load("base", requireAllPlaceholders: false)
            let plan = try PlanCompiler.compile(policy: policy, command: ["/bin/true"], hostEnvironment: [:])
            var options = RunOptions()
            options.allowUnenforcedLimits = true
            let r = try SandboxRunner.run(plan, options: options)
            switch r.termination {
            case .exited(0): return (true, "started /bin/true under the base policy (user, mount, pid, net, ipc, uts, cgroup namespaces; seccomp; no capabilities)")
            case .setupFailed(let m, _): return (false, m)
            default: return (false, "/bin/true ended with status \(r.exitCode)")
            }
        } catch let e as SandboxError {
            return (false, e.message)
        } catch let d as PolicyDiagnostics {
            return (false, d.errors.first?.description ?? "base policy invalid")
        } catch {
            return (false, "\(error)")
        }
    }
}

/// One message handed from the test sandbox's thread.
private final class LockedText: @unchecked Sendable {
    private let lock = NSLock()
    private var text: String?
    func set(_ t: String) { lock.withLock { text = t } }
    func get() -> String? { lock.withLock { text } }
}
