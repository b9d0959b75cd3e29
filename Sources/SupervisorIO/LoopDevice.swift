import CSystemCalls
import Glibc

/// A loop device bound to a file: a train run's task disk (`TaskDisks`) is an ext4 on one.
public enum LoopDevice {
    /// Binds the open file `backing` to a free loop device, with autoclear (the binding ends
    /// when the device's last user closes it: this descriptor, or a file system mounted from it)
    /// and direct I/O where the backing file system takes it: the device's descriptor
    /// (close-on-exec) and its path, or the errno.
    public static func attach(_ backing: Int32, blockSize: UInt32 = 4096) -> Result<(fd: Int32, device: String), IOFailure> {
        var index: Int32 = 0
        let fd = ahs_loop_attach(backing, blockSize, &index)
        guard fd >= 0 else { return .failure(IOFailure("cannot bind a loop device to", "a task's disk file", errno: -fd)) }
        return .success((fd, "/dev/loop\(index)"))
    }
}

extension FileSystem {
    /// A new regular file with no name in `directory` (O_TMPFILE), read-write, close-on-exec:
    /// nothing can open it by a path, and its blocks are free once the last descriptor or
    /// mapping of it goes. -1 with errno on failure.
    public static func openNameless(in directory: String, mode: mode_t = 0o600) -> Int32 {
        open(directory, temporaryFile | O_RDWR | O_CLOEXEC, mode)
    }

    /// O_TMPFILE (`__O_TMPFILE | O_DIRECTORY`), which the Glibc module does not export.
    static let temporaryFile: Int32 = 0o20000000 | O_DIRECTORY
}
