// A task's private scratch directory on the host.
//
//   <scratchRoot>/<16 random hex digits>/     root 0700: no sandbox ever sees this level
//       app/    the task's working copy (/app in both sandboxes), owned by the sandbox's host uid
//       logs/   the verifier's /logs/verifier, owned by the verifier's host uid
//       out/    root 0700: instruction copy and the stdout/stderr files passed to sandboxes as fds
//   <scratchRoot>/<same hex digits>.oPID-START-PIDNS   empty: the supervisor that made it
//
// The name is random and the same shape for every task of every split: bind sources show
// up inside a sandbox (/proc/self/mountinfo, /proc/self/fd/N), so a path built from the
// task id or the split would tell agent.py what it is being run for.
//
// Each task directory is its own tmpfs (in a train run of a task that declares its storage, an
// ext4 of that size on disk instead: `TaskDisks`). A shared filesystem would let one task observe
// another through counters it cannot help sharing (inode numbers, free space): a held-out
// task could move them and a later train task could print them into its trace. Its own
// superblock also caps the task's size and inode count, and cleanup is a single unmount
// however many files agent.py made.
//
// The owner marker beside the directory names its supervisor (`ProcessIdentity`): created
// before the directory and removed after it, so whatever a supervisor killed at any moment
// leaves (a marker alone, an empty directory, a mounted tmpfs) is attributed, and the next
// supervisor removes it once that owner is gone. It lies outside the tmpfs so that it can
// still be read where the mount is gone (a supervisor that ran in a mount namespace of its
// own leaves only the directory behind) and, at the root's level, no sandbox ever sees it.

import Glibc
import Sandbox
import SupervisorIO

struct TaskScratch {
    let path: String
    /// `<path>.oPID-START-PIDNS`: who made it, for the sweep after a crash.
    let marker: String
    /// The task directory itself; every child is reached relative to it.
    let fd: Int32
    /// `out/`, root-only.
    let outFD: Int32
    /// Where the task's file systems are on disk rather than tmpfs (`TaskDisks`), or nil.
    let disk: Disk?
    /// The disks mounted for this task, closed by `remove`.
    let disksMounted = DisksMounted()

    /// A train run's storage: its size, and the disks it is made from.
    struct Disk {
        let disks: TaskDisks
        let size: UInt64
    }

    final class DisksMounted: @unchecked Sendable {
        private let lock = NSLockLite()
        private var disks: [TaskDisk] = []
        func add(_ d: TaskDisk) { lock.locked { disks.append(d) } }
        func closeAll() { for d in lock.locked({ disks }) { d.close() } }
    }

    var appPath: String { path + "/app" }
    /// On a task's image (`mountImage`): the overlay, its /app, and the agent's upper layer.
    var imageRootPath: String { path + "/root" }
    var imageAppPath: String { imageRootPath + "/app" }
    var upperPath: String { path + "/upper" }
    var logsPath: String { path + "/logs" }
    var outPath: String { path + "/out" }

    /// Creates `<root>/<random>/` with `out/` inside. `app/` and `logs/` come separately,
    /// once the policies have said which host ids the sandboxes write as.
    init(root: String, disk: Disk? = nil) throws(BenchmarkError) {
        self.disk = disk
        var rng = SystemRandomNumberGenerator()
        var made: (path: String, marker: String)?
        // A collision of 64 random bits means something else is creating names here.
        for _ in 0..<8 {
            let hex = String(rng.next(), radix: 16)
            let candidate = root + "/" + String(repeating: "0", count: 16 - hex.count) + hex
            let marker = Self.markerPath(of: candidate, ProcessIdentity.current)
            let m = open(marker, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard m >= 0 else {
                if errno == EEXIST { continue }
                throw BenchmarkError(.io, "scratch owner marker \(marker): \(FileSystem.errorText())")
            }
            close(m)
            if mkdir(candidate, 0o700) == 0 {
                if let disk {
                    do throws(BenchmarkError) {
                        disksMounted.add(try disk.disks.mount(size: disk.size, at: candidate, mode: 0o700, owner: (0, 0)))
                    } catch {
                        rmdir(candidate)
                        unlink(marker)
                        throw error
                    }
                } else {
                    guard mount("tmpfs", candidate, "tmpfs", UInt(MS_NOSUID | MS_NODEV),
                                "mode=0700,size=\(Self.sizeLimit),nr_inodes=\(Self.inodeLimit)") == 0 else {
                        let e = FileSystem.errorText()
                        rmdir(candidate)
                        unlink(marker)
                        throw BenchmarkError(.io, "cannot mount the per-task tmpfs on \(candidate): \(e)")
                    }
                }
                made = (candidate, marker)
                break
            }
            let e = errno
            unlink(marker)
            if e != EEXIST { throw BenchmarkError(.io, "scratch directory in \(root): \(FileSystem.errorText(e))") }
        }
        guard let made else { throw BenchmarkError(.io, "scratch directory in \(root): no unused random name") }
        let fd = FileSystem.openDirectory(made.path)
        guard fd >= 0, fchmod(fd, 0o700) == 0 else {
            let e = FileSystem.errorText()
            if fd >= 0 { close(fd) }
            Self.remove(made.path, marker: made.marker)
            disksMounted.closeAll()
            throw BenchmarkError(.io, "scratch directory \(made.path): \(e)")
        }
        guard let out = FileSystem.makeDirectory(at: fd, "out", mode: 0o700, owner: nil) else {
            let e = FileSystem.errorText()
            close(fd)
            Self.remove(made.path, marker: made.marker)
            disksMounted.closeAll()
            throw BenchmarkError(.io, "scratch directory \(made.path)/out: \(e)")
        }
        self.path = made.path
        self.marker = made.marker
        self.fd = fd
        self.outFD = out
    }

    static let sizeLimit = "2g"
    static let inodeLimit = 200_000

    static func markerPath(of directory: String, _ owner: ProcessIdentity) -> String { directory + "." + owner.tag }

    /// Removes what supervisors that are gone left under `root` (a supervisor killed mid-task
    /// leaves its mount, and the memory it holds, behind): mounted or not, each directory goes
    /// with its owner marker once `ProcessIdentity` says the owner no longer runs. Those of a
    /// live supervisor, here or in another pid namespace, are left alone. Returns one line for
    /// the operator when something was removed or could not be.
    static func sweep(root: String) -> [String] {
        let mounted = mountPoints(under: root)
        var removed = 0, unmounted = 0
        var owners: Set<pid_t> = []
        var problems: [String] = []
        var marked: Set<String> = []
        for name in directoryEntries(root) {
            guard let dot = name.firstIndex(of: "."), isScratchName(name[..<dot]),
                  let owner = ProcessIdentity(tag: name[name.index(after: dot)...]) else { continue }
            let dir = root + "/" + name[..<dot]
            marked.insert(dir)
            guard !owner.isAlive else { continue }
            if mounted.contains(dir) {
                guard umount2(dir, Int32(MNT_DETACH)) == 0 else {
                    problems.append("unmount \(dir): \(FileSystem.errorText())")
                    continue
                }
                unmounted += 1
            }
            // Not a mount (any more): the directory the tmpfs covered, empty unless something
            // wrote into it while it was uncovered; removed without following links either way.
            if rmdir(dir) != 0 && errno != ENOENT {
                let left = FileSystem.removeTree(dir)
                guard left.isEmpty else {
                    problems += left
                    continue
                }
            }
            unlink(root + "/" + name)
            removed += 1
            owners.insert(owner.pid)
        }
        // Mounts made before owner markers existed name their supervisor's pid in out/owner.
        for dir in mounted.subtracting(marked).sorted() where !legacyOwnerAlive(dir) {
            if umount2(dir, Int32(MNT_DETACH)) == 0 {
                rmdir(dir)
                removed += 1
                unmounted += 1
            }
        }
        var lines: [String] = []
        if removed > 0 {
            let who = owners.isEmpty ? "" : " (pid \(owners.sorted().map(String.init).joined(separator: ", ")))"
            lines.append("removed \(removed) scratch director\(removed == 1 ? "y" : "ies") (\(unmounted) mounted) under \(root) left by supervisors that are gone\(who)")
        }
        if !problems.isEmpty {
            lines.append("could not remove scratch left under \(root) by a supervisor that is gone: \(problems.prefix(5).joined(separator: "; "))")
        }
        return lines
    }

    /// 16 lower-case hex digits: the only names `init` makes.
    static func isScratchName(_ s: Substring) -> Bool {
        s.utf8.count == 16 && s.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// Mount points directly under `root`, as /proc/self/mountinfo lists them.
    static func mountPoints(under root: String) -> Set<String> {
        var out: Set<String> = []
        for line in SmallFile.contents(of: "/proc/self/mountinfo").split(separator: "\n") {
            let f = line.split(separator: " ")
            guard f.count > 4 else { continue }
            let mountPoint = String(f[4])
            guard mountPoint.hasPrefix(root + "/"), !mountPoint.dropFirst(root.count + 1).contains("/") else { continue }
            out.insert(mountPoint)
        }
        return out
    }

    /// An `out/owner` holding only a pid: its supervisor is taken to be alive if a process
    /// with that pid started before the file was written (a pid reused later does not count).
    static func legacyOwnerAlive(_ dir: String) -> Bool {
        let file = dir + "/out/owner"
        var st = stat()
        guard stat(file, &st) == 0, let pid = pid_t(SmallFile.contents(of: file).filter { !$0.isWhitespace }), pid > 0 else {
            return true  // no owner to check: not provably ours to remove
        }
        guard let started = ProcessIdentity.of(pid)?.startTime else { return false }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let bootTime = SmallFile.contents(of: "/proc/stat").split(separator: "\n").first { $0.hasPrefix("btime ") }
            .flatMap { Double($0.dropFirst(6)) } ?? 0
        // btime has whole seconds: a second's slack.
        return bootTime + Double(started) / ticks <= Double(st.st_mtim.tv_sec) + 1
    }

    static func directoryEntries(_ path: String) -> [String] {
        let fd = FileSystem.openDirectory(path)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        return (FileSystem.entries(of: fd) ?? []).map(FileSystem.display)
    }

    /// Makes `name` (app or logs) owned by the sandbox's host identity, so the sandbox's
    /// uid can write it; nothing above it is reachable from inside.
    func makeSandboxDirectory(_ name: String, owner: (uid_t, gid_t)) throws(BenchmarkError) -> Int32 {
        guard let d = FileSystem.makeDirectory(at: fd, name, mode: 0o755, owner: owner) else {
            throw BenchmarkError(.io, "\(path)/\(name): \(FileSystem.errorText())")
        }
        return d
    }

    /// The verifier's /tests: a copy of the task's tests on a tmpfs of its own (root's, bound
    /// read-only), guarded while the verifier runs (`AnswerKeyGuard`): a mark on that file
    /// system sees only this verifier's opens, and the task's own tmpfs (the agent's /app)
    /// says nothing of the tests' size.
    var testsPath: String { path + "/tests" }

    /// Copies the task's tests directory (the benchmark's: trusted) to `tests/`. A link inside
    /// the tests to one of their own files becomes a hard link to it: opened through no link,
    /// so the guard lets the test open it by either name.
    func copyTests(from source: String) throws(BenchmarkError) {
        try mountOwnTmpfs("tests", "mode=0755,size=\(Self.sizeLimit),nr_inodes=\(Self.inodeLimit)", owner: (0, 0), what: "the verifier's /tests")
        let from = FileSystem.openDirectory(source)
        guard from >= 0 else { throw BenchmarkError(.io, "\(source): \(FileSystem.errorText())") }
        defer { close(from) }
        let to = FileSystem.openDirectory(testsPath)
        guard to >= 0 else { throw BenchmarkError(.io, "\(testsPath): \(FileSystem.errorText())") }
        defer { close(to) }
        do throws(IOFailure) {
            try FileSystem.copyTree(from: from, to: to, owner: (0, 0), skip: [], label: "tests")
        } catch {
            throw BenchmarkError(.io, "copying the task's tests", cause: error)
        }
        FileSystem.hardLinkInnerLinks(to, path: testsPath, seenAs: "/tests")
    }

    /// Where the verifier's /tmp is: a tmpfs the supervisor mounts (sticky and world-writable
    /// like a real /tmp, owned by `owner`), not one the sandbox makes for itself, so that a
    /// watch on it sees what the verifier runs from it (`AgentCodeRuns`). Its own, not the
    /// task's: agent.py filling the task's file system must not fail the test's own writes.
    var verifierTmpPath: String { path + "/verifier-tmp" }
    static let verifierTmpSize = "1g"

    func makeVerifierTmp(owner: (uid_t, gid_t)) throws(BenchmarkError) {
        if let disk {
            // A disk of its own as large as the task's: a verifier's uv cache of torch is GBs.
            guard let d = FileSystem.makeDirectory(at: fd, "verifier-tmp", mode: 0o755, owner: nil) else {
                throw BenchmarkError(.io, "\(verifierTmpPath): \(FileSystem.errorText())")
            }
            close(d)
            disksMounted.add(try disk.disks.mount(size: disk.size, at: verifierTmpPath, mode: 0o1777, owner: owner))
            return
        }
        try mountOwnTmpfs("verifier-tmp", "mode=1777,size=\(Self.verifierTmpSize),nr_inodes=\(Self.inodeLimit)", owner: owner, what: "the verifier's /tmp")
    }

    /// Root's shell start-up files of the image (`/root/.profile`, `/root/.bashrc`, from its
    /// unpacked files, never the agent's upper layer) copied into the verifier's /tmp, its
    /// HOME: under Harbor the tests run as root with HOME=/root, and a test that appends to
    /// `$HOME/.bashrc` and starts a login shell (tmux) relies on the image's .profile reading
    /// it. A file the image lacks, a link or anything over 64 KiB is left out.
    func seedVerifierHome(fromImage rootfs: String, owner: (uid_t, gid_t)) throws(BenchmarkError) {
        // The image's /root, never followed if it is a link (it would lead out of the image).
        let image = FileSystem.openDirectory(rootfs)
        guard image >= 0 else { return }
        defer { close(image) }
        let home = FileSystem.openDirectory(at: image, FileSystem.name("root"))
        guard home >= 0 else { return }
        defer { close(home) }
        let dir = FileSystem.openDirectory(verifierTmpPath)
        guard dir >= 0 else { throw BenchmarkError(.io, "\(verifierTmpPath): \(FileSystem.errorText())") }
        defer { close(dir) }
        for name in [".profile", ".bashrc"] {
            guard case .success(let bytes) = InputFile.read(at: home, name, cap: 64 << 10) else { continue }
            do throws(IOFailure) {
                try AtomicFile.write(bytes, in: dir, name: name, mode: 0o644, owner: owner, path: verifierTmpPath + "/" + name)
            } catch {
                throw BenchmarkError(.io, "the verifier's HOME", cause: error)
            }
        }
    }

    /// Makes `logs` a tmpfs of its own owned by the verifier's host identity: the only file
    /// system a change watch on it sees (`RewardWriters`).
    func makeLogsFilesystem(owner: (uid_t, gid_t)) throws(BenchmarkError) {
        try mountOwnTmpfs("logs", RewardWriters.logsOptions, owner: owner, what: "the verifier's logs tmpfs")
    }

    /// A tmpfs of its own at `name` in this task's directory, owned by `owner` (nosuid, nodev;
    /// gone with the task's tmpfs, whose lazy unmount takes it along).
    private func mountOwnTmpfs(_ name: String, _ options: String, owner: (uid_t, gid_t), what: String) throws(BenchmarkError) {
        guard let d = FileSystem.makeDirectory(at: fd, name, mode: 0o755, owner: nil) else {
            throw BenchmarkError(.io, "\(path)/\(name): \(FileSystem.errorText())")
        }
        close(d)
        guard mount("tmpfs", path + "/" + name, "tmpfs", UInt(MS_NOSUID | MS_NODEV), "\(options),uid=\(owner.0),gid=\(owner.1)") == 0 else {
            throw BenchmarkError(.io, "cannot mount \(what) on \(path)/\(name): \(FileSystem.errorText())")
        }
    }

    /// A new root-only file in `out/` for the supervisor to hand to a sandbox as a stdio fd.
    /// Mode 0600 root: a sandbox holding the fd cannot reopen it through /proc/self/fd for
    /// reading (the reopen is permission-checked against its unprivileged host uid).
    func createOutput(_ name: String) throws(BenchmarkError) -> Int32 {
        let f = FileSystem.openFile(at: outFD, name, O_WRONLY | O_CREAT | O_EXCL, mode: 0o600)
        guard f >= 0 else { throw BenchmarkError(.io, "\(outPath)/\(name): \(FileSystem.errorText())") }
        return f
    }

    /// Removes everything: the sandboxes are gone by now (SandboxRunner returns only after
    /// the pid namespace is empty), but what they left is still untrusted, hence the
    /// careful walk. Returns problems met, if any.
    func remove() -> [String] {
        close(outFD)
        close(fd)
        defer { disksMounted.closeAll() }
        return Self.remove(path, marker: marker)
    }

    /// The directory, then its marker: a supervisor killed in between leaves a marker the
    /// next sweep attributes.
    @discardableResult
    static func remove(_ path: String, marker: String) -> [String] {
        // The sandboxes are gone, so nothing holds the tmpfs: one lazy unmount drops it all.
        let problems: [String]
        if umount2(path, Int32(MNT_DETACH)) == 0 {
            problems = rmdir(path) == 0 ? [] : ["\(path): \(FileSystem.errorText())"]
        } else {
            problems = FileSystem.removeTree(path)
        }
        if problems.isEmpty { unlink(marker) }
        return problems
    }
}

extension TaskRunner {
    /// Removes the per-task scratch directories and mounts under `root` whose supervisor is
    /// gone (see `TaskScratch.sweep`); what a live supervisor made stays. Lines for the
    /// operator.
    public static func sweepScratch(root: String) -> [String] { TaskScratch.sweep(root: root) }
}

extension TaskScratch {
    /// `root/`: the task's view of `image`, an overlay whose lower layer is the image's files
    /// and whose upper and work layers (`upper/`, `work/`) are on this task's tmpfs, so what
    /// the task writes is as private, capped and short-lived as a working copy. Unmounted with
    /// the tmpfs (one lazy unmount drops both). The upper layer's root takes the image root's
    /// owner and mode: it is the overlay's root directory.
    func mountImage(_ image: TaskImage) throws(BenchmarkError) {
        try mountOverlay(image, root: "root", upper: "upper", work: "work")
        try writeHosts(owner: image.owner)
        try makeWorkingDirectory(image)
    }

    /// The image's WORKDIR, made (root's, 0755) where the image lacks it, as a container
    /// runtime makes a container's working directory: buildah records a WORKDIR that no later
    /// step created. Never through a link the image holds: one is left for the sandbox's
    /// chdir to follow inside its own root.
    func makeWorkingDirectory(_ image: TaskImage) throws(BenchmarkError) {
        var dir = FileSystem.openDirectory(imageRootPath)
        guard dir >= 0 else { throw BenchmarkError(.io, "\(imageRootPath): \(FileSystem.errorText())") }
        defer { close(dir) }
        for part in image.workingDirectory.split(separator: "/").map(String.init) where part != "." && part != ".." {
            var next = FileSystem.openDirectory(at: dir, FileSystem.name(part))
            if next < 0 && errno == ENOENT, let made = FileSystem.makeDirectory(at: dir, part, mode: 0o755, owner: image.owner) { next = made }
            guard next >= 0 else { return }
            close(dir)
            dir = next
        }
    }

    /// /etc/hosts as a container runtime provides it in every container, whatever the image
    /// holds (podman leaves an empty one in what it builds): `localhost` resolves, to the
    /// sandbox's own loopback. Written into the task's upper layer, never through a link the
    /// image holds (its /etc or its hosts), so both sandboxes see it and the agent may change it.
    func writeHosts(owner: (uid_t, gid_t)) throws(BenchmarkError) {
        let root = FileSystem.openDirectory(imageRootPath)
        guard root >= 0 else { throw BenchmarkError(.io, "\(imageRootPath): \(FileSystem.errorText())") }
        defer { close(root) }
        var etc = FileSystem.openDirectory(at: root, FileSystem.name("etc"))
        if etc < 0 && errno == ENOENT, let made = FileSystem.makeDirectory(at: root, "etc", mode: 0o755, owner: owner) { etc = made }
        guard etc >= 0 else { throw BenchmarkError(.io, "the image's /etc: \(FileSystem.errorText())") }
        defer { close(etc) }
        let hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        if let e = FileSystem.removeEntry(at: etc, "hosts") ?? FileSystem.writeFile(at: etc, "hosts", Array(hosts.utf8), mode: 0o644, owner: owner) {
            throw BenchmarkError(.io, "the task's /etc/hosts: \(FileSystem.errorText(e))")
        }
    }

    /// `vroot/`: the verifier's own overlay of `image`, for a task whose agent phase left
    /// processes running (`SandboxRunner.run(_:options:keepingSurvivors:)`): its upper layer
    /// (`vupper/`) a copy of the agent's, taken while those processes are frozen, so nothing
    /// they write afterwards reaches the files the verifier reads, checks or runs.
    func mountVerifierImage(_ image: TaskImage) throws(BenchmarkError) {
        try mountOverlay(image, root: "vroot", upper: "vupper", work: "vwork") { () throws(BenchmarkError) in
            do throws(IOFailure) {
                try FileSystem.copyLayer(from: upperPath, to: verifierUpperPath)
            } catch {
                throw BenchmarkError(.io, "the verifier's copy of the agent's upper layer", cause: error)
            }
        }
    }

    var verifierRootPath: String { path + "/vroot" }
    var verifierUpperPath: String { path + "/vupper" }

    private func mountOverlay(_ image: TaskImage, root rootName: String, upper: String, work: String,
                              fill: () throws(BenchmarkError) -> Void = {}) throws(BenchmarkError) {
        var st = stat()
        guard lstat(image.rootfs, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw BenchmarkError(.io, "image \(image.id): its files at \(image.rootfs): \(FileSystem.errorText())")
        }
        guard st.st_uid == image.ids.uid, st.st_gid == image.ids.gid else {
            throw BenchmarkError(.configuration, "image \(image.id): \(image.rootfs) belongs to \(st.st_uid):\(st.st_gid), not to the sandboxes' root \(image.ids.uid):\(image.ids.gid)")
        }
        // The root directory 0755 whatever the image's (podman leaves 0555), as a container's.
        for (name, mode, owner) in [(upper, mode_t(0o755), image.owner),
                                    (work, 0o700, (uid_t(0), gid_t(0))), (rootName, 0o755, (uid_t(0), gid_t(0)))] {
            guard let d = FileSystem.makeDirectory(at: fd, name, mode: mode_t(mode), owner: owner) else {
                throw BenchmarkError(.io, "\(path)/\(name): \(FileSystem.errorText())")
            }
            close(d)
        }
        try fill()
        // Paths with ',' or ':' would need escaping in the options; neither occurs in ours.
        guard !image.rootfs.contains(where: { $0 == "," || $0 == ":" }) else {
            throw BenchmarkError(.configuration, "image \(image.id): its path \(image.rootfs) holds ',' or ':'")
        }
        let root = path + "/" + rootName
        // No redirect_dir, metacopy or index: the simplest overlay, whose upper layer holds
        // plain copies of what the task changed. xino: the image (on disk) and the upper layer
        // (tmpfs) are different file systems, where without it a directory's inode number is
        // made up each time the kernel loads the inode; one reloaded between the plan's stat of
        // a bind source (/app) and the launcher's open of it then looked swapped and the task
        // failed to start (ESTALE, on a busy host). With xino it is the layer's own, persistent.
        let options = "lowerdir=\(image.rootfs),upperdir=\(path)/\(upper),workdir=\(path)/\(work),redirect_dir=off,metacopy=off,index=off,xino=on"
        guard mount("overlay", root, "overlay", UInt(MS_NOSUID | MS_NODEV), options) == 0 else {
            throw BenchmarkError(.io, "cannot mount the image \(image.id) at \(root): \(FileSystem.errorText())")
        }
    }
}
