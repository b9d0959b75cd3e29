import Foundation
import Glibc
import Testing
import TestSupport

/// The launch service under a real systemd: `scripts/build-images`' systemd image runs Debian's
/// systemd as PID 1 in a podman container, with autoharness installed and the launch service's
/// units (templates/systemd, rendered by `scripts/install --units` for /usr/local) enabled as
/// `scripts/install --service` enables them. `autoharness sandbox exec` in the container wakes
/// the service through its socket and is then served by it; a stopped service is started again
/// by the socket. A missing image fails the test: CI builds it first. Run alone: systemd's
/// start-up in a container takes both cores for seconds.
@Suite("the launch service socket-activated by systemd as PID 1 in a container", .serialized)
struct RunAloneSystemdServiceTests {
    static let socket = "/run/autoharness/launch.sock"

    @Test("sandbox exec is served by the socket-activated service; a stopped service is started again by its socket")
    func socketActivatedService() throws {
        try requireRoot()
        let images = try RunAloneContainerTests.Images.built()
        try #require(!images.systemd.isEmpty, "scripts/build-images --print names no systemd image: run scripts/build-images")
        let cgroup = RunAloneContainerTests.PodmanCgroup()
        let name = "ah-test-systemd-" + UUID().uuidString.prefix(8).lowercased()
        defer {
            _ = try? RunAloneContainerTests.podman(["rm", "-f", "-t", "5", name])
            cgroup.remove()
        }
        // systemd on this host's cgroups (v1, or hybrid) needs nothing beyond --privileged and
        // --systemd=always: podman then mounts /sys/fs/cgroup read-write with the container's
        // own directories, and /run, /tmp and /var/log/journal as systemd wants them.
        let started = try RunAloneContainerTests.podman(["run", "-d", "--name", name, "--privileged", "--systemd=always", "--network=none",
                                                         "--cgroup-parent", cgroup.path] + images.flags + [images.systemd])
        try #require(started.status == 0, "podman run \(images.systemd): \(started.stderr)")

        func inContainer(_ args: [String], timing: Bool = false) throws -> Run {
            try RunAloneContainerTests.podman(["exec"] + (timing ? ["-e", "AUTOHARNESS_TIMING=1"] : []) + [name] + args)
        }
        func state(_ unit: String) throws -> String {
            try inContainer(["systemctl", "is-active", unit]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        /// Polls `check` for up to `seconds`; true once it held.
        func eventually(_ seconds: Double = 60, _ check: () throws -> Bool) rethrows -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                if try check() { return true }
                usleep(250_000)
            }
            return try check()
        }
        func echo() throws -> Run {
            try inContainer(["autoharness", "sandbox", "exec", "-v", "--", "/bin/echo", "hi"], timing: true)
        }
        let servedLine = "autoharness[debug]: sandbox exec by the launch service at \(Self.socket)"
        let servedTiming = "timing: served by the launch service"

        // systemd up, the socket listening (sockets.target), no service yet.
        let listening = try eventually { try state("autoharness-launch.socket") == "active" }
        let boot = try inContainer(["systemctl", "is-system-running"])
        let socketStatus = try inContainer(["systemctl", "status", "--no-pager", "autoharness-launch.socket"])
        try #require(listening, "autoharness-launch.socket never became active: \(boot.stdout) \(socketStatus.stdout)")
        #expect(try state("autoharness-launch.service") == "inactive")
        // doctor says who holds the socket, without connecting (which would start the service).
        let asleep = try inContainer(["autoharness", "doctor"])
        #expect(asleep.stdout.contains("listening at \(Self.socket), held by PID 1 (systemd's socket unit"), "doctor: \(asleep.stdout)")
        #expect(try state("autoharness-launch.service") == "inactive", "doctor started the service")

        // The first launch wakes the service: it connected while systemd held the socket, so the
        // service (whose clients must see its own SO_PEERCRED) declines it and the front runs it
        // itself. It runs all the same.
        let first = try echo()
        #expect(first.status == 0 && first.stdout == "hi\n", "first: \(first.status) \(first.stdout) \(first.stderr)")
        #expect(try eventually { try state("autoharness-launch.service") == "active" }, "the service did not start")

        // The second is served.
        let second = try echo()
        #expect(second.status == 0 && second.stdout == "hi\n", "second: \(second.status) \(second.stdout) \(second.stderr)")
        #expect(second.stderr.contains(servedLine) && second.stderr.contains(servedTiming), "second not served: \(second.stderr)")
        #expect(try state("autoharness-launch.service") == "active")
        let status = try inContainer(["systemctl", "status", "--no-pager", "autoharness-launch.service"])
        #expect(status.status == 0 && status.stdout.contains("Active: active (running)"), "\(status.stdout) \(status.stderr)")
        let awake = try inContainer(["autoharness", "doctor"])
        #expect(awake.stdout.contains("held by PID 1 (systemd's socket unit; the service starts on the first launch) and pid ")
                && awake.stdout.contains("sandbox serve: serving any cgroup's callers within its limits)"), "doctor: \(awake.stdout)")
        let adopted = "serving sandbox exec at \(Self.socket) (a socket passed down by systemd)"
        var journal = Run(status: 0, stdout: "", stderr: "")
        let logged = try eventually(20) {
            journal = try inContainer(["journalctl", "--no-pager", "-u", "autoharness-launch.service"])
            return journal.stdout.contains(adopted)
        }
        #expect(logged, "journal: \(journal.stdout) \(journal.stderr)")

        // Stopped, the service is gone and its socket still listens: the next launch starts it
        // again (and, connected to systemd's socket, runs one-shot), the one after is served.
        let stop = try inContainer(["systemctl", "stop", "autoharness-launch.service"])
        #expect(stop.status == 0, "systemctl stop: \(stop.stderr)")
        #expect(try state("autoharness-launch.service") == "inactive")
        #expect(try state("autoharness-launch.socket") == "active")
        #expect(try inContainer(["test", "-S", Self.socket]).status == 0, "\(Self.socket) is gone after the service stopped")
        let third = try echo()
        #expect(third.status == 0 && third.stdout == "hi\n", "third: \(third.status) \(third.stdout) \(third.stderr)")
        #expect(try eventually { try state("autoharness-launch.service") == "active" }, "the socket did not start the service again")
        let fourth = try echo()
        #expect(fourth.status == 0 && fourth.stdout == "hi\n" && fourth.stderr.contains(servedLine) && fourth.stderr.contains(servedTiming),
                "fourth not served: \(fourth.status) \(fourth.stdout) \(fourth.stderr)")
        // Two services, each of which adopted the socket (by pid: journalctl may show an entry
        // twice while journald moves its journal from /run to /var/log).
        let restarts = try inContainer(["journalctl", "--no-pager", "-u", "autoharness-launch.service"]).stdout
        let services = Set(restarts.split(separator: "\n").filter { $0.contains(adopted) }.compactMap { $0.firstMatch(of: #/\(pid ([0-9]+)\)/#).map { String($0.1) } })
        #expect(services.count == 2, "journal: \(restarts)")

        // The container, then its cgroups, all gone.
        let removed = try RunAloneContainerTests.podman(["rm", "-f", "-t", "5", name])
        #expect(removed.status == 0, "podman rm: \(removed.stderr)")
        cgroup.remove()
        #expect(cgroup.left.isEmpty, "cgroups left: \(cgroup.left)")
    }
}
