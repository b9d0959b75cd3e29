@testable import Benchmark
@testable import Experiment
@testable import ExperimentModel
import Foundation
import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// Root on a task's image is a container's root: it installs a package with apt (dpkg chowns
/// to a system user its script adds, apt switches to `_apt`), with a few capabilities that
/// count only over its own ids (`Capabilities.imageRoot`, `ImageIDs`), and serves on port 80 of
/// its own loopback.
@Suite(.serialized) struct ImageRootTests {
    /// The solution: builds a package whose maintainer script adds a system user and gives it
    /// a private directory, installs it with apt-get, writes as that user; then tries what its
    /// capabilities must not reach. `sleep 7.31337` is found from the host while it runs.
    static let solve = """
        #!/bin/bash
        set -e
        mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/share/hello-ah
        printf 'Package: hello-ah\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: t <t@example.org>\\nDescription: t\\n' > /tmp/pkg/DEBIAN/control
        printf '#!/bin/sh\\nset -e\\nuseradd --system --no-create-home --shell /usr/sbin/nologin hellod\\nmkdir -p /var/lib/hellod\\nchown hellod:hellod /var/lib/hellod\\nchmod 700 /var/lib/hellod\\n' > /tmp/pkg/DEBIAN/postinst
        chmod 755 /tmp/pkg/DEBIAN/postinst
        echo hi > /tmp/pkg/usr/share/hello-ah/greeting
        dpkg-deb --build --root-owner-group /tmp/pkg /tmp/hello-ah.deb > /dev/null
        apt-get install -y /tmp/hello-ah.deb > /tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }
        setpriv --reuid hellod --regid hellod --clear-groups sh -c 'echo from-hellod > /var/lib/hellod/state'
        # A service on a port below 1024, on the sandbox's own loopback.
        python3 -m http.server 80 --bind 127.0.0.1 --directory /usr/share/hello-ah > /dev/null 2>&1 &
        for i in $(seq 50); do python3 -c 'import urllib.request as u; print("served", u.urlopen("http://127.0.0.1:80/greeting").read().decode().strip())' > /srv/served.txt 2>/dev/null && break; sleep 0.1; done
        kill %1
        { stat -c '%U %a' /var/lib/hellod; cat /srv/served.txt; grep _apt /tmp/apt.log || echo no-apt-notice
          ls /agent 2>&1 || true
          touch /agent/planted 2>&1 || true
          setpriv --reuid 70000 true 2>&1 || true; } > /srv/seen.txt 2>&1
        sleep 7.31337

        """

    static let test = """
        #!/bin/bash
        { dpkg-query -W -f '${Status}\\n' hello-ah; cat /var/lib/hellod/state; cat /srv/seen.txt
          (exec 3<>/dev/tcp/127.0.0.1/9) 2>&1 | grep -q 'Connection refused' && echo verifier-loopback-up; } > /logs/verifier/out.txt 2>&1
        [ "$(cat /var/lib/hellod/state)" = from-hellod ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt

        """

    @Test("root on an image apt-installs a package whose script adds a user and chowns to it, and serves on port 80 of its own loopback (up in the verifier too); the payload's user namespace maps 65536 ids onto the image's host range and keeps only a container root's capabilities; they reach no host-owned file, no read-only bind, no id past the range, and, joined from the host with every capability of that namespace, no mount")
    func aptInstallsAsRoot() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-image-root-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let t = dir + "/tasks/apt-root"
        try TaskImageTests.makeTaskDirectories(t)
        try "Install it.\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
        // Files of other owners: a set-uid program of uid 1234 with a second hard link, and one
        // of an id past the 65536 an image's sandbox maps.
        try """
            FROM \(TaskImageTests.base)
            WORKDIR /app
            RUN mkdir /srv/own && cp /bin/true /srv/own/suid && chown 1234:1235 /srv/own/suid && chmod 4755 /srv/own/suid \\
                && ln /srv/own/suid /srv/own/suid-link && touch /srv/own/far && chown 70000:70000 /srv/own/far

            """.write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
        try Self.solve.write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
        try Self.test.write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        let task = try #require(try LocalBenchmark(directory: dir).task("apt-root"))
        let ids = try ImageIDs.range()
        let store = TaskImageStore(directory: dir + "/store")
        let problems = try store.prepare([task], ids: ids) { _ in }
        try #require(problems.isEmpty, "\(problems)")
        let image = try #require(store.load([task]).images.byTask[task.id])
        // The image's files belong to the range, shifted: root's to its first id, uid 1234's to
        // the 1235th (its set-uid bit kept, both hard links), one past the span to its nobody.
        var st = stat()
        #expect(lstat(image.rootfs + "/etc/passwd", &st) == 0 && st.st_uid == ids.uid && st.st_gid == ids.gid)
        for link in ["suid", "suid-link"] {
            #expect(lstat(image.rootfs + "/srv/own/" + link, &st) == 0 && st.st_uid == ids.uid + 1234 && st.st_gid == ids.gid + 1235
                    && st.st_mode & 0o7777 == 0o4755, "\(link): \(st.st_uid):\(st.st_gid) \(String(st.st_mode, radix: 8))")
        }
        #expect(lstat(image.rootfs + "/srv/own/far", &st) == 0 && st.st_uid == ids.uid + 65534 && st.st_gid == ids.gid + 65534)

        let scratch = try TaskImageTests.scratchRoot()
        defer { rmdir(scratch) }
        var config = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [Built.packageRoot + "/policies"]), agentDirectory: "",
                                          scratchRoot: scratch)
        config.oracle = true
        config.images = store.load([task]).images
        config.verifierTools = try TaskImageTests.toolbox()
        let traces = dir + "/traces"
        let box = OutcomeBox()
        config.scratchObserver = { _, path in box.verifier = (try? String(contentsOfFile: path + "/logs/out.txt", encoding: .utf8)) ?? "(no out.txt)" }
        let runner = try TaskRunner(configuration: config)
        let finished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            box.outcome = runner.run(task, traceDirectory: traces)
            finished.signal()
        }
        // While the solution sleeps: its process as the host sees it.
        var sleeper: pid_t?
        for _ in 0..<600 where sleeper == nil {
            sleeper = Self.process(withArguments: ["sleep", "7.31337"])
            if sleeper == nil { usleep(50_000) }
        }
        if sleeper == nil {
            _ = finished.wait(timeout: .now() + 60)
            let agent = ["agent.stdout", "agent.stderr"].map { (try? String(contentsOfFile: traces + "/" + $0, encoding: .utf8)) ?? "" }.joined()
            Issue.record("the solution never reached its sleep: \(String(describing: box.outcome))\n\(agent)\n\(box.verifier)")
            return
        }
        let pid = try #require(sleeper)
        let uidMap = try #require(procText("/proc/\(pid)/uid_map")).split(whereSeparator: \.isWhitespace)
        let gidMap = try #require(procText("/proc/\(pid)/gid_map")).split(whereSeparator: \.isWhitespace)
        #expect(uidMap == ["0", "\(ids.uid)", "65536"], "\(uidMap)")
        #expect(gidMap == ["0", "\(ids.gid)", "65536"], "\(gidMap)")
        let status = try #require(procText("/proc/\(pid)/status"))
        for set in ["CapPrm", "CapEff", "CapBnd"] {
            #expect(status.contains("\(set):\t\(String(format: "%016llx", Capabilities.imageRoot))\n"), "\(set): \(status)")
        }
        #expect(status.contains("CapInh:\t0000000000000000\n") && status.contains("CapAmb:\t0000000000000000\n") && status.contains("NoNewPrivs:\t1"))
        // With every capability of its user namespace (more than it keeps), the kernel still
        // refuses every change to its mounts: the mount namespace is its parent namespace's.
        let (attack, stderr) = try MountAttack.run(pid, target: "/agent")
        #expect(stderr.isEmpty, "\(stderr)")
        #expect(attack["caps"].map { $0.hasSuffix("ffffffff") } == true, "\(attack)")
        for attempt in ["remount-rw", "move", "umount", "clone-proc"] {
            #expect(attack[attempt] == "EPERM", "\(attempt): \(attack)")
        }
        #expect(attack["unshare-mnt"] == "ok" && attack["copy-umount"] == "EINVAL", "\(attack)")

        #expect(finished.wait(timeout: .now() + 120) == .success)
        let outcome = try #require(box.outcome)
        let agent = (try? String(contentsOfFile: traces + "/agent.stderr", encoding: .utf8)) ?? ""
        let lines = box.verifier.split(separator: "\n").map(String.init)
        #expect(outcome.reward == 1, "\(outcome)\n\(agent)\n\(box.verifier)")
        // Installed by apt, written by the user its script added, read by the verifier's root
        // past the directory's 0700 (its namespace maps that user too).
        #expect(lines.prefix(4) == ["install ok installed", "from-hellod", "hellod 700", "served hi"], "\(box.verifier)")
        // Both sandboxes have their own loopback up (a refused connection, not an unreachable network).
        #expect(lines.contains("verifier-loopback-up"), "\(box.verifier)")
        // apt fetched the local package as _apt (no "unsandboxed as root" notice).
        #expect(lines.contains("no-apt-notice"), "\(box.verifier)")
        // CAP_DAC_OVERRIDE counts only over the image's ids: /agent (host root's, 0700) stays
        // closed; a read-only bind stays read-only; no id past the range.
        #expect(lines.contains("ls: cannot open directory '/agent': Permission denied"), "\(box.verifier)")
        #expect(lines.contains { $0.hasPrefix("touch: cannot touch '/agent/planted'") }, "\(box.verifier)")
        #expect(lines.contains { $0.contains("setresuid failed") && $0.contains("Invalid argument") }, "\(box.verifier)")
    }

    /// A process of the host whose command line is exactly `argv`.
    static func process(withArguments argv: [String]) -> pid_t? {
        let want = argv.joined(separator: "\0") + "\0"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = pid_t(name), let data = FileManager.default.contents(atPath: "/proc/\(name)/cmdline") else { continue }
            if String(decoding: data, as: UTF8.self) == want { return pid }
        }
        return nil
    }
}

private final class OutcomeBox: @unchecked Sendable {
    var outcome: TaskOutcome?
    var verifier = ""
}

/// Agent code a test script starts, on a task's image (where the root is a writable bind,
/// so Landlock leaves /proc writable), against the test script's own process: found by an
/// adversarial review, it opened the shell's /proc/PID/mem and wrote code there that wrote the
/// reward from that very process. The toolbox's programs are unreadable in a sandbox, so its
/// processes are not dumpable.
@Suite(.serialized) struct VerifierMemoryTests {
    /// Walks up from its parent: for each ancestor, whether /proc/PID/syscall reads and
    /// /proc/PID/mem opens read-write; where the test script's shell opened, writes there
    /// (at the address it resumes from) code that writes the reward and exits.
    static let inject = #"""
        import errno, os, struct
        code = bytearray.fromhex("48c7c79cffffff488d3500000000ba4102000041baa4010000b8010100000f0589c7488d3500000000ba02000000b8010000000f0531ffb8e70000000f05")
        path = b"/logs/verifier/reward.txt\0"
        code[10:14] = struct.pack("<i", len(code) - 14)
        i = code.find(bytes.fromhex("488d35"), 14)
        code[i + 3:i + 7] = struct.pack("<i", len(code) + len(path) - (i + 7))
        pid = os.getppid()
        while pid > 1:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
            pc = None
            try:
                pc = int(open(f"/proc/{pid}/syscall").read().split()[-1], 16)
                print("syscall ok", cmd)
            except OSError as e:
                print("syscall", errno.errorcode[e.errno], cmd)
            try:
                with open(f"/proc/{pid}/mem", "r+b", buffering=0) as m:
                    print("mem ok", cmd, flush=True)
                    if pc is not None and "/tests/test.sh" in cmd:
                        m.seek(pc)
                        m.write(bytes(code) + path + b"1\n")
            except OSError as e:
                print("mem", errno.errorcode[e.errno], cmd)
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        """#

    @Test("agent code a test script runs on an image cannot read or write the test script's memory: /proc/PID/mem and /proc/PID/syscall of every verifier process of the toolbox are refused (EACCES), and the wrong answer scores 0")
    func testScriptMemoryClosed() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-image-mem-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let t = dir + "/tasks/proc-mem"
        try TaskImageTests.makeTaskDirectories(t)
        try "Write the answer.\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
        try "FROM \(TaskImageTests.base)\nWORKDIR /app\n".write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
        try Self.inject.write(toFile: t + "/solution/inject.py", atomically: true, encoding: .utf8)
        try """
            #!/bin/bash
            echo WRONG > /app/answer.txt
            cp /solution/inject.py /app/inject.py
            printf '#!/bin/sh\\nexec /usr/bin/python3 /app/inject.py\\n' > /app/run.sh
            chmod 755 /app/run.sh

            """.write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
        try """
            #!/bin/bash
            /app/run.sh > /logs/verifier/out.txt 2>&1
            if [ "$(cat /app/answer.txt)" = "NEVER-GIVEN-SECRET" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

            """.write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        let task = try #require(try LocalBenchmark(directory: dir).task("proc-mem"))
        let store = TaskImageStore(directory: dir + "/store")
        try #require(try store.prepare([task], ids: try ImageIDs.range()) { _ in }.isEmpty)
        let scratch = try TaskImageTests.scratchRoot()
        defer { rmdir(scratch) }
        var config = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [Built.packageRoot + "/policies"]), agentDirectory: "",
                                          scratchRoot: scratch)
        config.oracle = true
        config.images = store.load([task]).images
        config.verifierTools = try TaskImageTests.toolbox()
        let box = OutcomeBox()
        config.scratchObserver = { _, path in box.verifier = (try? String(contentsOfFile: path + "/logs/out.txt", encoding: .utf8)) ?? "(no out.txt)" }
        let outcome = try TaskRunner(configuration: config).run(task, traceDirectory: nil)
        #expect(outcome.reward == 0, "\(outcome)\n\(box.verifier)")
        // The attempt was made on the test script's shell, and refused by the kernel.
        let shell = box.verifier.split(separator: "\n").filter { $0.hasSuffix("/tests/test.sh") }
        #expect(shell.contains { $0.hasPrefix("syscall EACCES ") } && shell.contains { $0.hasPrefix("mem EACCES ") }, "\(box.verifier)")
        #expect(!box.verifier.contains("mem ok") && !box.verifier.contains("syscall ok"), "\(box.verifier)")
    }
}
