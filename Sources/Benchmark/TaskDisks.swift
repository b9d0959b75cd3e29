// A train run's file systems on disk, for a task whose task.toml declares its storage
// (`[environment] storage = "10G"` or `storage_mb`, as Harbor reads them): Terminal-Bench 2.0
// declares 10 GB for every task, and three of its reference solutions write more than a
// task's memory holds (an `apt-get install python3-opencv` of over 1 GB on a 2 GB task; a
// verifier whose uv cache takes torch and its CUDA libraries). On a tmpfs every byte written
// is memory charged to the task's cgroup; here it is disk, and memory holds only what the
// page cache keeps.
//
// Each file system is ext4 on a loop device over a file that has no name (O_TMPFILE in
// `directory`, root 0700): nothing can open it by a path, and once the mount is gone (the
// task's end, or the sweep after a supervisor was killed) the loop device lets go of it
// (autoclear) and its blocks are free. Its own superblock, as a tmpfs's: no counter (inode
// numbers, free space) shared with another task, and its size is the cap.
//
// Never for a held-out run: test-split work stays in memory (`TaskRunConfiguration.scratchRoot`
// is a tmpfs), where nothing of it outlives the run even as freed blocks of a disk.
//
// The host's disk is shared with the experiment's record, so a task is given a file system
// only while the disk has room for all of them at their full size plus `reserve`: a task
// that fills its own cannot fill the host's, and one refused is a failure of the supervisor's
// (no further task starts), never a score against agent.py.

import FoundationEssentials
import Glibc
import SupervisorIO

public struct TaskDisks: Sendable {
    /// Where the nameless backing files are (root-only, on the host's disk).
    public let directory: String
    /// mke2fs.
    let formatter: String
    /// Free space kept on the backing file system beyond every disk's full size.
    let reserve: UInt64
    let book = Book()

    /// The most a host keeps free for itself while tasks write their disks.
    public static let defaultReserve: UInt64 = 2 << 30
    static let formatterCandidates = ["/usr/sbin/mke2fs", "/sbin/mke2fs"]
    static var installedFormatter: String? { formatterCandidates.first { access($0, X_OK) == 0 } }

    /// Checks that this host can make them (loop devices, mke2fs, `directory` made root 0700):
    /// the reason it cannot, otherwise.
    public static func make(directory: String, reserve: UInt64 = defaultReserve) -> Result<TaskDisks, BenchmarkError> {
        if let why = unavailable { return .failure(BenchmarkError(.configuration, why)) }
        guard let formatter = installedFormatter else { return .failure(BenchmarkError(.configuration, "no mke2fs")) }
        if let e = FileSystem.makeDirectories(directory, mode: 0o700) {
            return .failure(BenchmarkError(.io, "\(directory): \(ErrnoName.describe(e))"))
        }
        var st = stat()
        guard lstat(directory, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, st.st_uid == 0, st.st_mode & 0o077 == 0 else {
            return .failure(BenchmarkError(.configuration, "\(directory) must be a directory of root's, mode 0700"))
        }
        return .success(TaskDisks(directory: directory, formatter: formatter, reserve: reserve))
    }

    /// Why this host cannot make task disks (no mke2fs, no loop devices), or nil: `doctor`.
    public static var unavailable: String? {
        guard installedFormatter != nil else {
            return "no mke2fs (\(formatterCandidates.joined(separator: ", "))): Debian's e2fsprogs"
        }
        let control = open("/dev/loop-control", O_RDWR | O_CLOEXEC)
        guard control >= 0 else { return "/dev/loop-control: \(FileSystem.errorText()) (loop devices: a host's, or a container given them)" }
        close(control)
        return nil
    }

    /// A file system of `size` bytes mounted at `path` (an existing, empty directory), its root
    /// `mode` and owned by `owner`, nosuid and nodev. It stays until `path` is unmounted and
    /// the returned disk closed, in either order.
    func mount(size: UInt64, at path: String, mode: mode_t, owner: (uid_t, gid_t)) throws(BenchmarkError) -> TaskDisk {
        let disk = try book.take(size, in: self)
        var loop: Int32 = -1
        do throws(BenchmarkError) {
            guard ftruncate(disk.backing, off_t(size)) == 0 else {
                throw BenchmarkError(.io, "a \(Self.shown(size)) file in \(directory): \(FileSystem.errorText())")
            }
            let device: String
            switch LoopDevice.attach(disk.backing) {
            case .success(let bound): (loop, device) = bound
            case .failure(let e): throw BenchmarkError(e)
            }
            let made: ChildProcess.Finished
            do {
                // No journal (nothing survives a crash anyway), no reserved blocks, the inode
                // tables left unwritten (the file reads as zeros where nothing was written).
                made = try ChildProcess.run([formatter, "-q", "-F", "-t", "ext4", "-b", "4096", "-m", "0", "-O", "^has_journal",
                                             "-E", "lazy_itable_init=1,nodiscard,root_owner=\(owner.0):\(owner.1)", device],
                                            environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"], timeout: 120, outputCap: 65536)
            } catch {
                throw BenchmarkError(.io, "\(formatter)", cause: error)
            }
            guard made.succeeded else {
                throw BenchmarkError(.io, "\(formatter) \(device) failed (exit \(made.status)): \(made.output.suffix(400))")
            }
            guard Glibc.mount(device, path, "ext4", UInt(MS_NOSUID | MS_NODEV), "noinit_itable,errors=remount-ro") == 0 else {
                throw BenchmarkError(.io, "cannot mount a task's disk (\(device)) on \(path): \(FileSystem.errorText())")
            }
            // The mount holds the device from now on; autoclear lets go of the file when it goes.
            close(loop)
            loop = -1
            rmdir(path + "/lost+found")
            guard chmod(path, mode) == 0 else {
                let e = FileSystem.errorText()
                umount2(path, Int32(MNT_DETACH))
                throw BenchmarkError(.io, "\(path): \(e)")
            }
            return disk
        } catch {
            if loop >= 0 { close(loop) }
            disk.close()
            throw error
        }
    }

    static func shown(_ bytes: UInt64) -> String {
        bytes % (1 << 30) == 0 ? "\(bytes >> 30) GiB" : "\(bytes >> 20) MiB"
    }

    /// The disks handed out and not closed, so that together they never promise more than the
    /// backing file system has.
    final class Book: @unchecked Sendable {
        private let lock = NSLockLite()
        private var inUse: [ObjectIdentifier: TaskDisk] = [:]

        func take(_ size: UInt64, in disks: TaskDisks) throws(BenchmarkError) -> TaskDisk {
            try lock.locked { () -> Result<TaskDisk, BenchmarkError> in
                var vfs = statvfs()
                guard statvfs(disks.directory, &vfs) == 0 else { return .failure(BenchmarkError(.io, "\(disks.directory): \(FileSystem.errorText())")) }
                let free = UInt64(vfs.f_bavail) * UInt64(vfs.f_frsize)
                // What the disks in use may still write: each one's size less what it holds already.
                let promised = inUse.values.reduce(UInt64(0)) { $0 + $1.size - min($1.size, $1.allocated) }
                guard free >= promised + size + disks.reserve else {
                    return .failure(BenchmarkError(.io, "no room for a task's \(shown(size)) disk in \(disks.directory): \(shown(free)) free, "
                                                   + "\(shown(promised)) promised to the disks in use, \(shown(disks.reserve)) kept for the host"))
                }
                let backing = FileSystem.openNameless(in: disks.directory)
                guard backing >= 0 else { return .failure(BenchmarkError(.io, "a nameless file in \(disks.directory): \(FileSystem.errorText())")) }
                let disk = TaskDisk(backing: backing, size: size, book: self)
                inUse[ObjectIdentifier(disk)] = disk
                return .success(disk)
            }.get()
        }

        func release(_ disk: TaskDisk) {
            lock.locked { inUse[ObjectIdentifier(disk)] = nil }
        }
    }
}

/// One task's file system on disk: the nameless file under it, held open until `close`.
final class TaskDisk: @unchecked Sendable {
    let backing: Int32
    let size: UInt64
    private weak var book: TaskDisks.Book?
    private let lock = NSLockLite()
    private var closed = false

    init(backing: Int32, size: UInt64, book: TaskDisks.Book) {
        self.backing = backing
        self.size = size
        self.book = book
    }

    /// What the file holds on the disk now.
    var allocated: UInt64 {
        var st = stat()
        return fstat(backing, &st) == 0 ? UInt64(st.st_blocks) * 512 : size
    }

    /// Lets go of the file: its blocks are free once the file system is unmounted too.
    func close() {
        let first = lock.locked { () -> Bool in
            defer { closed = true }
            return !closed
        }
        guard first else { return }
        book?.release(self)
        Glibc.close(backing)
    }
}
