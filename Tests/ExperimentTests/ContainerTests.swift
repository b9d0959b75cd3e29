import Foundation
import Glibc
import Testing
import TestSupport
@testable import Experiment
@testable import Execution
@testable import ExperimentModel

/// The two images `scripts/build-images` makes with Debian's podman (container/): the
/// supervisor's, and a worker node's that joins a Ray cluster. A missing image fails the
/// test: CI builds them first. Run alone: podman's start-up, and a Ray node's, take both cores
/// for seconds.
@Suite("Containers: the supervisor's and a worker node's images under podman", .serialized)
struct RunAloneContainerTests {
    /// What `scripts/build-images --print` names: the staging directory whose binaries are
    /// in the images, the supervisor's, the worker's and the systemd image (SystemdServiceTests),
    /// and the flags this host needs for `podman run`.
    struct Images {
        var stage = "", supervisor = "", worker = "", systemd = ""
        var flags: [String] = []
        /// The supervisor binary baked into both images, run from the staging directory.
        var autoharness: String { stage + "/usr/local/bin/autoharness" }

        static func built() throws -> Images {
            let r = try runProcess("/bin/bash", [Built.packageRoot + "/scripts/build-images", "--print"])
            try #require(r.status == 0, "the container images are not built: run scripts/build-images (\(r.stderr))")
            var i = Images()
            for line in r.stdout.split(separator: "\n") {
                let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
                guard parts.count == 2 else { continue }
                switch parts[0] {
                case "stage": i.stage = parts[1]
                case "supervisor": i.supervisor = parts[1]
                case "worker": i.worker = parts[1]
                case "systemd": i.systemd = parts[1]
                case "flags": i.flags = parts[1].split(separator: " ").map(String.init)
                default: break
                }
            }
            try #require(!i.stage.isEmpty && !i.supervisor.isEmpty && !i.worker.isEmpty, "scripts/build-images --print: \(r.stdout)")
            return i
        }
    }

    /// A cgroup directory below this test process's own, for podman's `--cgroup-parent`: the
    /// containers' cgroups (and conmon's) go there, never elsewhere; `remove()` removes it
    /// and whatever podman left in it, in every hierarchy.
    final class PodmanCgroup {
        let path: String

        init() {
            // The v1 pids hierarchy's path, else the v2 one.
            let lines = (procText("/proc/self/cgroup") ?? "").split(separator: "\n")
            let own = (lines.first { $0.contains(":pids:") } ?? lines.first { $0.hasPrefix("0::") })
                .map { String($0.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)[2]) } ?? "/"
            path = (own == "/" ? "" : own) + "/ah-test-podman-" + UUID().uuidString.prefix(8).lowercased()
        }

        /// Removes what is left, again for up to 10 s while it is not empty: after `podman rm`
        /// returns, the container's last processes (conmon, a systemd's scope) may still be
        /// exiting, and their cgroups are busy until they have (seen once in a RunAlone run).
        func remove() {
            let deadline = Date().addingTimeInterval(10)
            repeat {
                for h in FileSystemProbe.names("/sys/fs/cgroup") + [""] {
                    let dir = "/sys/fs/cgroup/" + h + path
                    guard access(dir, F_OK) == 0 else { continue }
                    _ = try? runProcess("/usr/bin/find", [dir, "-depth", "-type", "d", "-exec", "rmdir", "{}", "+"])
                }
                if left.isEmpty { return }
                usleep(100_000)
            } while Date() < deadline
        }

        /// Directories of it that are still there.
        var left: [String] {
            (FileSystemProbe.names("/sys/fs/cgroup") + [""]).map { "/sys/fs/cgroup/" + $0 + path }.filter { access($0, F_OK) == 0 }
        }

        deinit { remove() }
    }

    /// `podman ARGS` to its end. Spawned and waited for directly: Foundation's Process missed
    /// the exit of `podman run -d` here (its child left a zombie, waitUntilExit never
    /// returned), so podman is never run through it.
    static func podman(_ args: [String]) throws -> Run {
        let pid = try spawnPodman(args, output: "/tmp/ah-podman-\(UUID().uuidString)")
        var status: Int32 = 0
        while waitpid(pid.pid, &status, 0) < 0 && errno == EINTR {}
        defer { for f in [pid.output + ".out", pid.output + ".err"] { unlink(f) } }
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return Run(status: code, stdout: (try? String(contentsOfFile: pid.output + ".out", encoding: .utf8)) ?? "",
                   stderr: (try? String(contentsOfFile: pid.output + ".err", encoding: .utf8)) ?? "")
    }

    /// Starts `podman ARGS`, its stdout and stderr in `output`.out and .err.
    static func spawnPodman(_ args: [String], output: String) throws -> (pid: pid_t, output: String) {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output + ".out", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, output + ".err", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let argv = (["/usr/bin/podman"] + args).map { strdup($0) } + [nil]
        defer { for a in argv { free(a) } }
        var pid: pid_t = 0
        let e = posix_spawn(&pid, "/usr/bin/podman", &actions, nil, argv, environ)
        try #require(e == 0, "posix_spawn podman: \(String(cString: strerror(e)))")
        return (pid, output)
    }

    @Test("the supervisor's image: doctor finds everything it needs, and prepare and a gate in the container give what the host gives")
    func supervisorInAContainer() throws {
        try requireRoot()
        let images = try Images.built()
        let cgroup = PodmanCgroup()
        defer { cgroup.remove() }
        let local = try Experiment()
        let remote = try Experiment(prepare: false)
        // The experiment at the same path inside, and the fixture benchmark it was made from.
        func inContainer(_ args: [String]) throws -> Run {
            try Self.podman(["run", "--rm", "--privileged", "--network=none", "--cgroup-parent", cgroup.path] + images.flags
                + ["-v", "\(remote.temp.path):\(remote.temp.path)", "-v", "\(Built.packageRoot):\(Built.packageRoot):ro", images.supervisor] + args)
        }
        let doctor = try inContainer(["doctor", "--summary"])
        #expect(doctor.status == 0 && doctor.stdout.hasPrefix("doctor: ok"), "\(doctor.stdout) \(doctor.stderr)")
        let prepared = try inContainer(["prepare", "-C", remote.root])
        #expect(prepared.status == 0, "\(prepared.stdout) \(prepared.stderr)")
        #expect(try remote.split() == local.split())
        #expect(try remote.baselineScores() == local.baselineScores())
        for e in [local, remote] { try e.setAgent(Agents.all) }
        let gateHere = try local.run("gate")
        let gateThere = try inContainer(["gate", "-C", remote.root])
        let uncommitted = { (s: String) in s.replacing(#/committed as [0-9a-f]+/#, with: "committed as X") }
        #expect(gateHere.status == gateThere.status && uncommitted(gateHere.stdout) == uncommitted(gateThere.stdout), "\(gateHere.stdout)\n---\n\(gateThere.stdout) \(gateThere.stderr)")
        #expect(try remote.lastGateScores() == local.lastGateScores() && remote.lastGateScores().first == "1")
        // The sandboxes' cgroups were made below the container's, below the test's, and are gone.
        cgroup.remove()
        #expect(cgroup.left.isEmpty, "cgroups left: \(cgroup.left)")
    }

    @Test("a worker node's image joins a Ray cluster from a network namespace of its own: every request of prepare and a benchmark runs in the container, with one machine's results")
    func workerInAContainerJoinsCluster() throws {
        try requireRoot()
        let images = try Images.built()
        let python = try RayClusterTests.python()
        let local = try Experiment()
        let (remote, keyFile) = try RayClusterTests.rayExperiment()
        // The head on the host's side of the bridge with no CPU; the only worker node is the
        // container, in a network namespace joined to the bridge.
        let cluster = try RayClusterTests.Cluster(python: python, keyFile: keyFile, temp: remote.temp, workers: 0)
        defer { cluster.stop() }
        let cgroup = PodmanCgroup()
        let name = "ah-test-worker-" + cluster.tag
        let ns = try cluster.addNamespace()
        // The node's state on a volume, as container/README.md says to run it.
        let state = remote.temp.file("container-state")
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let started = try Self.podman(["run", "-d", "--name", name, "--privileged", "--network", "ns:/run/netns/" + ns, "--cgroup-parent", cgroup.path,
                                       "--shm-size=1g"] + images.flags
            + ["-e", "RAY_ADDRESS=" + cluster.address, "-e", "RAY_AUTH_TOKEN=" + cluster.token, "-e", "RAY_NODE_IP_ADDRESS=\(cluster.subnet).2",
               "-e", "RAY_NUM_CPUS=1", "-v", "\(keyFile):/etc/autoharness/supervisor.pub:ro", "-v", "\(state):/var/lib/autoharness", images.worker, "--object-store-memory=200000000"])
        defer {
            _ = try? Self.podman(["rm", "-f", "-t", "0", name])
            cgroup.remove()
        }
        try #require(started.status == 0, "podman run: \(started.stderr)")
        try cluster.waitForNodes(1, python: python)

        // The supervisor is the binary baked into the image (a node runs only the
        // supervisor's own binary), with its policies and templates beside it.
        let env = try RayClusterTests.useCluster(remote, cluster, python: python)
        func onCluster(_ args: String...) throws -> Run { try runProcess(images.autoharness, args + ["-C", remote.root], environment: env) }
        let prepared = try RayClusterTests.whenUpOnCluster { try onCluster("prepare") }
        let logs = { (try? Self.podman(["logs", "--tail", "30", name]))?.stderr ?? "" }
        #expect(prepared.status == 0, "\(prepared.stdout) \(prepared.stderr)\nthe container: \(logs())")
        #expect(try remote.split() == local.split())
        #expect(try remote.baselineScores() == local.baselineScores())
        for e in [local, remote] { try e.setAgent(Agents.all) }
        let here = try local.run(["benchmark"])
        let there = try onCluster("benchmark")
        #expect(here.status == 0 && there.status == 0 && here.stdout == there.stdout, "\(here.stdout)\n---\n\(there.stdout) \(there.stderr)")
        // Every request ran in the container (the head has no CPU): its nonces are there.
        let count = FileSystemProbe.names(state + "/worker/nonces").count, trainTasks = try remote.split().train.count
        #expect(count >= trainTasks + 1, "requests run in the container: \(count)")
        _ = try Self.podman(["rm", "-f", "-t", "0", name])
        cgroup.remove()
        #expect(cgroup.left.isEmpty, "cgroups left: \(cgroup.left)")
    }
}
