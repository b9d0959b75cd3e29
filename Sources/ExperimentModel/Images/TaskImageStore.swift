// Where tasks' images come from: built on the host from each task's environment/Dockerfile
// with the operator's podman (their registries, their base images), then unpacked into the
// experiment's private directory, where no sandbox ever looks, once per image and per host
// id range its sandboxes map onto (`ImageIDs`).
//
//   .autoharness/images/            root 0700
//       index.json                  task id -> its context's digest and its `TaskImage`
//       failed.json                 task id -> why its image could not be had (the task is
//                                   then refused with that reason, never run without it)
//       rootfs/<id>-<uid>-<gid>/    an image's files, each owner and group shifted into the
//                                   range from uid:gid (`TaskImage`)
//
// A task is keyed by the digest of its build context (every regular file of environment/,
// the Dockerfile included): the same context is never built twice, a changed one is built
// again. Building runs the task's Dockerfile as the operator's podman runs any: it is the
// benchmark's code, like a registry download, and happens before any agent.py runs.

import Benchmark
import Foundation
import Glibc
import Sandbox
import SupervisorIO

public struct TaskImageStore {
    public let directory: String
    /// `podman` (or a path to it).
    public var podman = "podman"

    public init(directory: String) { self.directory = directory }

    /// The experiment's own store, in its private directory.
    package init(experimentRoot root: String) { self.init(directory: ExperimentLayout(root: root).privateDirectory + "/images") }

    var indexPath: String { directory + "/index.json" }
    var failedPath: String { directory + "/failed.json" }

    struct Entry: Codable {
        var context: String
        var image: TaskImage
    }

    /// The images recorded for `tasks`, and one line for each task that has a Dockerfile but
    /// no image of its current context (it must not run without one: `TaskRunner`).
    public func load(_ tasks: [BenchmarkTask]) -> (images: TaskImages, missing: [String: String]) {
        let index = readIndex()
        let failed = readFailed()
        var images: [String: TaskImage] = [:]
        var missing: [String: String] = [:]
        var refused: [String: String] = [:]
        for task in tasks where Self.hasImage(task) {
            if let e = index[task.id], Self.kind(e.image.rootfs) == S_IFDIR {
                images[task.id] = e.image
            } else if let why = failed[task.id] {
                // Tried and failed: the task is refused with the reason, not run elsewhere.
                refused[task.id] = "its image could not be had (autoharness images; run it again once fixed): \(why)"
            } else {
                missing[task.id] = "task \(task.id) has an image (docker_image or environment/Dockerfile) but none is here: run `autoharness images -C DIR` (podman)"
            }
        }
        var out = TaskImages(images)
        out.refused = refused
        return (out, missing)
    }

    static func hasDockerfile(_ task: BenchmarkTask) -> Bool {
        Self.kind(task.directory + "/environment/Dockerfile") == S_IFREG
    }

    /// A task names its image (task.toml's `docker_image`) or can build one (a Dockerfile).
    static func hasImage(_ task: BenchmarkTask) -> Bool { task.dockerImage != nil || hasDockerfile(task) }

    /// Builds and unpacks the image of every task in `tasks` with a Dockerfile whose context
    /// has none yet, for sandboxes mapping onto the host ids `ids`; says what it does on `progress`.
    /// Returns the problems of tasks whose image could not be had (each names the task and
    /// podman's last lines); the others are recorded in the index.
    public func prepare(_ tasks: [BenchmarkTask], ids: HostIDRange, progress: (String) -> Void) throws -> [String: String] {
        try makePrivateDirectory(directory)
        try makePrivateDirectory(directory + "/rootfs")
        var index = readIndex()
        var failed = readFailed()
        var problems: [String: String] = [:]
        let todo = tasks.filter(Self.hasImage)
        for (n, task) in todo.enumerated() {
            // What the image is made from: its name, and the build context where there is one.
            let context = Self.hasDockerfile(task) ? WorkDigest.taskFiles(task.directory + "/environment")?.manifestSHA256 : ""
            guard let context else {
                problems[task.id] = "task \(task.id): environment/ cannot be read"
                continue
            }
            let digest = (task.dockerImage.map { "image \($0) " } ?? "") + context
            if let e = index[task.id], e.context == digest, e.image.ids == ids,
               Self.kind(e.image.rootfs) == S_IFDIR {
                continue
            }
            let start = monotonicNow()
            progress("images: \(n + 1) of \(todo.count): \(task.id): " + (task.dockerImage.map { "podman image \($0)" } ?? "podman build \(task.directory)/environment"))
            do {
                let image = try obtain(task, context: context, ids: ids, progress: progress)
                index[task.id] = Entry(context: digest, image: image)
                try writeIndex(index)
                if failed.removeValue(forKey: task.id) != nil { try write(failed, to: failedPath) }
                progress("images: \(task.id): \(image.id.prefix(19)) in \(Int(monotonicNow() - start)) s")
            } catch {
                problems[task.id] = "task \(task.id): \(error)"
                progress("images: \(task.id): failed: \(error)")
                index[task.id] = nil
                try writeIndex(index)
                failed[task.id] = Self.tail("\(error)")
                try write(failed, to: failedPath)
            }
        }
        return problems
    }

    /// The task's image: its `docker_image` as this host's podman has it, else pulled, else
    /// built from its Dockerfile (as Harbor builds one without a prebuilt image); then unpacked.
    private func obtain(_ task: BenchmarkTask, context digest: String, ids: HostIDRange, progress: (String) -> Void) throws -> TaskImage {
        let context = task.directory + "/environment"
        var tag = "localhost/autoharness-task:" + digest.prefix(20)
        var origin = "built from \(context)/Dockerfile"
        var named: String?
        if let name = task.dockerImage {
            if try ChildProcess.run([try locate(podman), "image", "exists", name], standardError: .discarded).succeeded {
                named = name
            } else {
                let pull = try ChildProcess.run([try locate(podman), "pull", "--quiet", name], timeout: 3600, outputCap: 1 << 20)
                if pull.succeeded {
                    named = name
                } else {
                    guard Self.hasDockerfile(task) else {
                        throw ExperimentError(.usage, "podman pull \(name) failed, and the task has no environment/Dockerfile to build instead:\n\(Self.tail(pull.output))")
                    }
                    progress("images: \(task.id): podman pull \(name) failed; building its Dockerfile instead")
                }
            }
        }
        if let named {
            tag = named
            origin = "the image \(named)"
        } else {
            try build(context: context, tag: tag)
        }
        let inspected = try ChildProcess.run([try locate(podman), "image", "inspect", "--format", "json", tag], standardError: .discarded)
        guard inspected.succeeded, let config = Self.imageConfig(inspected.output) else {
            throw ExperimentError(.io, "podman image inspect \(tag): \(Self.tail(inspected.output))")
        }
        let hex = String(config.id.drop { $0 != ":" }.dropFirst())
        let name = (hex.isEmpty ? config.id : hex) + "-\(ids.uid)-\(ids.gid)"
        let final = directory + "/rootfs/" + name
        if Self.kind(final) != S_IFDIR {
            try unpack(tag, into: final, ids: ids)
        }
        return TaskImage(id: config.id.hasPrefix("sha256:") ? config.id : "sha256:" + config.id, rootfs: final,
                         workingDirectory: config.workdir.isEmpty ? "/" : config.workdir,
                         environment: config.env, ids: ids, origin: origin)
    }

    private func build(context: String, tag: String) throws {
        let (flags, cleanup) = Self.podmanFlags()
        defer { cleanup() }
        let built = try ChildProcess.run([try locate(podman), "build"] + flags + ["--network=host", "-f", context + "/Dockerfile", "-t", tag, context],
                                         timeout: 3600, outputCap: 1 << 20)
        guard built.succeeded else { throw ExperimentError(.usage, "podman build failed (exit \(built.status)):\n\(Self.tail(built.output))") }
    }

    /// The image's files, copied out of podman's storage into `final`, every owner and group
    /// shifted into `ids` (`FileSystem.shiftOwners`).
    private func unpack(_ tag: String, into final: String, ids: HostIDRange) throws {
        let staging = final + ".partial"
        _ = FileSystem.removeTree(staging)
        let mounted = try ChildProcess.run([try locate(podman), "image", "mount", tag], standardError: .discarded)
        let source = mounted.output.trimmingCharacters(in: .whitespacesAndNewlines)
        guard mounted.succeeded, source.hasPrefix("/") else { throw ExperimentError(.io, "podman image mount \(tag): \(Self.tail(mounted.output))") }
        defer { _ = try? ChildProcess.run([try locate(podman), "image", "unmount", tag], standardError: .discarded) }
        guard mkdir(staging, 0o700) == 0 else { throw ExperimentError(.io, "\(staging): \(FileSystem.errorText())") }
        // -a keeps owners, modes, links, times; the owners are shifted below.
        let r = try ChildProcess.run([try locate("cp"), "-a", source + "/.", staging], timeout: 3600)
        guard r.succeeded else {
            _ = FileSystem.removeTree(staging)
            throw ExperimentError(.io, "cp -a for \(tag): \(Self.tail(r.output))")
        }
        do throws(IOFailure) {
            try FileSystem.shiftOwners(of: staging, uid: ids.uid, gid: ids.gid, count: ids.count)
        } catch {
            _ = FileSystem.removeTree(staging)
            throw ExperimentError(.io, "unpacking \(tag)", cause: error)
        }
        guard rename(staging, final) == 0 else { throw ExperimentError(.io, "\(final): \(FileSystem.errorText())") }
    }

    struct ImageConfig {
        var id: String
        var workdir: String
        var env: [String]
    }

    static func imageConfig(_ json: String) -> ImageConfig? {
        guard let list = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]], let first = list.first,
              let id = first["Id"] as? String else { return nil }
        let config = first["Config"] as? [String: Any] ?? [:]
        return ImageConfig(id: id, workdir: config["WorkingDir"] as? String ?? "", env: config["Env"] as? [String] ?? [])
    }

    /// What podman needs on this host, and a clean-up for what it leaves: the build's
    /// containers in a cgroup below the supervisor's own (cgroupfs), removed afterwards; runc on
    /// a host with v1 controllers beside a cgroup2 mount (crun refuses such hybrids); the
    /// caller's own rlimits where it cannot raise them (no CAP_SYS_RESOURCE).
    static func podmanFlags() -> (flags: [String], cleanup: () -> Void) {
        var flags: [String] = []
        let own = CgroupHost.memberships()
        let mounts = CgroupHost.mounts()
        if mounts.contains(where: { $0.type == "cgroup" }) && mounts.contains(where: { $0.type == "cgroup2" }) {
            flags += ["--runtime", "runc"]
        }
        var hard = rlimit()
        if getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &hard) == 0 {
            flags += ["--ulimit", "nofile=\(hard.rlim_max):\(hard.rlim_max)"]
        }
        if getrlimit(__rlimit_resource_t(__RLIMIT_NPROC.rawValue), &hard) == 0 {
            let n = min(UInt64(hard.rlim_max), 32768)
            flags += ["--ulimit", "nproc=\(n):\(n)"]
        }
        guard let base = own["pids"] ?? own[""] else { return (flags, {}) }
        let parent = (base.hasSuffix("/") ? base : base + "/") + "autoharness-image-build-\(getpid())"
        flags += ["--cgroup-parent", parent]
        let cleanup = {
            for m in CgroupHost.mounts() where m.type == "cgroup" || m.type == "cgroup2" {
                guard let dir = m.directory(of: parent) else { continue }
                removeCgroupTree(dir)
            }
        }
        return (flags, cleanup)
    }

    private static func removeCgroupTree(_ dir: String) {
        let fd = FileSystem.openDirectory(dir)
        guard fd >= 0 else { return }
        for name in FileSystem.entries(of: fd) ?? [] {
            if let st = FileSystem.entryStatus(at: fd, name), FileSystem.isDirectory(st) {
                removeCgroupTree(dir + "/" + FileSystem.display(name))
            }
        }
        close(fd)
        rmdir(dir)
    }

    static func kind(_ path: String) -> mode_t {
        var st = stat()
        return lstat(path, &st) == 0 ? st.st_mode & S_IFMT : 0
    }

    static func tail(_ text: String) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false).suffix(12).joined(separator: "\n")
    }

    private func locate(_ program: String) throws -> String {
        if program.hasPrefix("/") { return program }
        for dir in ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"] where access(dir + "/" + program, X_OK) == 0 {
            return dir + "/" + program
        }
        throw ExperimentError(.usage, "\(program) is not installed: task images are built with podman (apt-get install podman)")
    }

    private func makePrivateDirectory(_ path: String) throws {
        if mkdir(path, 0o700) != 0 && errno != EEXIST { throw ExperimentError(.io, "\(path): \(FileSystem.errorText())") }
        guard chmod(path, 0o700) == 0 else { throw ExperimentError(.io, "\(path): \(FileSystem.errorText())") }
    }

    private func readIndex() -> [String: Entry] {
        guard case .success(let bytes) = InputFile.read(indexPath, cap: 64 << 20) else { return [:] }
        return (try? JSONDecoder().decode([String: Entry].self, from: Data(bytes))) ?? [:]
    }

    private func writeIndex(_ index: [String: Entry]) throws { try write(index, to: indexPath) }

    private func readFailed() -> [String: String] {
        guard case .success(let bytes) = InputFile.read(failedPath, cap: 16 << 20) else { return [:] }
        return (try? JSONDecoder().decode([String: String].self, from: Data(bytes))) ?? [:]
    }

    private func write<T: Encodable>(_ value: T, to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        let data = try encoder.encode(value)
        try data.write(to: URL(fileURLWithPath: path), options: .atomic)
    }
}
