// The one write-all of autoharness: every byte to a descriptor, for the supervisor's files and
// sockets, the broker's client and server, and the task container's exec server (a static
// binary: no Foundation here either).

import Glibc

public enum Descriptor {
    /// Writes every byte of `bytes` to `fd`, EINTR retried. A socket is written with
    /// MSG_NOSIGNAL (a peer that went away is an error, not a SIGPIPE); anything else with
    /// write(2). Returns nil, or the errno that stopped it (EPIPE for a descriptor that takes
    /// no more: a write of 0 bytes).
    public static func writeAll(_ fd: Int32, _ bytes: ArraySlice<UInt8>) -> Int32? {
        var offset = bytes.startIndex
        var socket = true
        while offset < bytes.endIndex {
            var n = bytes[offset...].withUnsafeBytes { socket ? send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) : write(fd, $0.baseAddress, $0.count) }
            if n < 0 && socket && errno == ENOTSOCK {
                socket = false
                n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            }
            if n < 0 {
                if errno == EINTR { continue }
                return errno
            }
            if n == 0 { return EPIPE }
            offset += n
        }
        return nil
    }

    public static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Int32? { writeAll(fd, bytes[...]) }
}
