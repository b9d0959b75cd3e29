// A task's private scratch directory on the host.
//
//   <scratchRoot>/<16 random hex digits>/     root 0700: no sandbox ever sees this level
//       app/    the task's working copy (/app in both sandboxes), owned by the sandbox's host uid
//       logs/   the verifier's /logs/verifier, owned by the verifier's host uid
//       out/    root 0700: instruction copy and the stdout/stderr files passed to sandboxes as fds
//
// The name is random and the same shape for every task of every split: bind sources show
// up inside a sandbox (/proc/self/mountinfo, /proc/self/fd/N), so a path built from the
// task id or the split would tell agent.py what it is being run for.
//
// Each task directory is its own tmpfs. A shared filesystem would let one task observe
// another through counters it cannot help sharing (inode numbers, free space): a held-out
// task could move them and a later train task could print them into its trace. Its own
// superblock also caps the task's size and inode count, and cleanup is a single unmount
// however many files agent.py made.

import Glibc
import Sandbox

struct TaskScratch {
    let path: String
    /// The task directory itself; every child is reached relative to it.
    let fd: Int32
    /// `out/`, root-only.
    let outFD: Int32

    var appPath: String { path + "/app" }
    var logsPath: String { path + "/logs" }
    var outPath: String { path + "/out" }

    /// Creates `<root>/<random>/` with `out/` inside. `app/` and `logs/` come separately,
    /// once the policies have said which host ids the sandboxes write as.
    init(root: String) throws(BenchmarkError) {
        var rng = SystemRandomNumberGenerator()
        var made: String?
        // A collision of 64 random bits means something else is creating names here.
        for _ in 0..<8 {
            let hex = String(rng.next(), radix: 16)
            let candidate = root + "/" + String(repeating: "0", count: 16 - hex.count) + hex
            if mkdir(candidate, 0o700) == 0 {
                guard mount("tmpfs", candidate, "tmpfs", UInt(MS_NOSUID | MS_NODEV),
                            "mode=0700,size=\(Self.sizeLimit),nr_inodes=\(Self.inodeLimit)") == 0 else {
                    let e = FileSystem.errorText()
                    rmdir(candidate)
                    throw BenchmarkError(.io, "cannot mount the per-task tmpfs on \(candidate): \(e)")
                }
                made = candidate
                break
            }
            if errno != EEXIST { throw BenchmarkError(.io, "scratch directory in \(root): \(FileSystem.errorText())") }
        }
        guard let made else { throw BenchmarkError(.io, "scratch directory in \(root): no unused random name") }
        let fd = FileSystem.openDirectory(made)
        guard fd >= 0, fchmod(fd, 0o700) == 0 else {
            let e = FileSystem.errorText()
            if fd >= 0 { close(fd) }
            FileSystem.removeTree(made)
            throw BenchmarkError(.io, "scratch directory \(made): \(e)")
        }
        guard let out = FileSystem.makeDirectory(at: fd, "out", mode: 0o700, owner: nil) else {
            let e = FileSystem.errorText()
            close(fd)
            FileSystem.removeTree(made)
            throw BenchmarkError(.io, "scratch directory \(made)/out: \(e)")
        }
        self.path = made
        self.fd = fd
        self.outFD = out
        // Which supervisor owns this mount, for the sweep after a crash.
        let owner = openat(out, "owner", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if owner >= 0 {
            let text = "\(getpid())"
            _ = text.withCString { write(owner, $0, strlen($0)) }
            close(owner)
        }
    }

    static let sizeLimit = "2g"
    static let inodeLimit = 200_000

    /// Unmounts and removes task tmpfs mounts under `root` whose supervisor is gone (a
    /// supervisor killed mid-task leaves its mount, and the memory it holds, behind).
    static func sweep(root: String) {
        for line in SmallFile.contents(of: "/proc/self/mountinfo").split(separator: "\n") {
            let f = line.split(separator: " ")
            guard f.count > 4 else { continue }
            let mountPoint = String(f[4])
            guard mountPoint.hasPrefix(root + "/"), !mountPoint.dropFirst(root.count + 1).contains("/") else { continue }
            guard let pid = Int32(SmallFile.contents(of: mountPoint + "/out/owner").filter { !$0.isWhitespace }),
                  kill(pid, 0) != 0 && errno == ESRCH else { continue }
            if umount2(mountPoint, Int32(MNT_DETACH)) == 0 { rmdir(mountPoint) }
        }
    }


    /// Makes `name` (app or logs) owned by the sandbox's host identity, so the sandbox's
    /// uid can write it; nothing above it is reachable from inside.
    func makeSandboxDirectory(_ name: String, owner: (uid_t, gid_t)) throws(BenchmarkError) -> Int32 {
        guard let d = FileSystem.makeDirectory(at: fd, name, mode: 0o755, owner: owner) else {
            throw BenchmarkError(.io, "\(path)/\(name): \(FileSystem.errorText())")
        }
        return d
    }

    /// A new root-only file in `out/` for the supervisor to hand to a sandbox as a stdio fd.
    /// Mode 0600 root: a sandbox holding the fd cannot reopen it through /proc/self/fd for
    /// reading (the reopen is permission-checked against its unprivileged host uid).
    func createOutput(_ name: String) throws(BenchmarkError) -> Int32 {
        let f = openat(outFD, FileSystem.name(name), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard f >= 0 else { throw BenchmarkError(.io, "\(outPath)/\(name): \(FileSystem.errorText())") }
        return f
    }

    /// Removes everything: the sandboxes are gone by now (SandboxRunner returns only after
    /// the pid namespace is empty), but what they left is still untrusted, hence the
    /// careful walk. Returns problems met, if any.
    func remove() -> [String] {
        close(outFD)
        close(fd)
        // The sandboxes are gone, so nothing holds the tmpfs: one lazy unmount drops it all.
        if umount2(path, Int32(MNT_DETACH)) == 0 {
            return rmdir(path) == 0 ? [] : ["\(path): \(FileSystem.errorText())"]
        }
        return FileSystem.removeTree(path)
    }
}
