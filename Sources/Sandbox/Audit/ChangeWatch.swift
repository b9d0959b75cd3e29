import CSystemCalls
import Glibc

/// Who changed what on one file system: fanotify, watching the whole file system that holds a
/// directory (a tmpfs of its own, so nothing else moves it), each change reported with the
/// process that made it. Events queue in the kernel from `init` on and are read with
/// `changes()` once the writers are gone; the pid of each is the one it had when it made the
/// change. Needs CAP_SYS_ADMIN in the initial user namespace (the supervisor's root).
public final class ChangeWatch {
    /// One change, as fanotify reported it.
    public struct Change: Sendable, Equatable {
        /// FAN_* bits (linux/fanotify.h), see the static masks below.
        public var mask: UInt64
        /// The process (thread group) that made it, as the supervisor sees it.
        public var pid: Int32
        /// The entry the change names ("" when none), and whether it is directly in the
        /// watched directory.
        public var name: String
        public var inTop: Bool
        /// The changed object's file handle (empty when the event carries none).
        public var object: [UInt8]

        public var isOverflow: Bool { mask & ChangeWatch.overflow != 0 }
    }

    // linux/fanotify.h
    public static let modify: UInt64 = 0x2
    public static let attrib: UInt64 = 0x4
    public static let closeWrite: UInt64 = 0x8
    public static let open: UInt64 = 0x20
    public static let movedFrom: UInt64 = 0x40
    public static let movedTo: UInt64 = 0x80
    public static let create: UInt64 = 0x100
    public static let delete: UInt64 = 0x200
    public static let deleteSelf: UInt64 = 0x400
    public static let moveSelf: UInt64 = 0x800
    public static let overflow: UInt64 = 0x4000
    /// Every kind of change watched (the object's content, its metadata, its name).
    public static let anyChange: UInt64 = modify | attrib | closeWrite | movedFrom | movedTo | create | delete | deleteSelf | moveSelf
    /// A change, or an open (of any mode: what a process may do with the descriptor, a write
    /// through a mapping included, is not reported as it happens).
    public static let changeOrOpen: UInt64 = anyChange | open

    private let group: Int32
    private let top: [UInt8]

    /// Starts watching the file system that holds `directory`.
    /// - Throws: `SandboxError` (`.io`) naming the directory and errno.
    public init(directory: String) throws(SandboxError) {
        var handle = [UInt8](repeating: 0, count: 132)
        var length: UInt32 = 0
        let fd = ahs_change_watch(directory, &handle, &length)
        guard fd >= 0 else { throw SandboxError(.io, "fanotify on \(directory): \(String(cString: strerror(errno)))") }
        group = fd
        top = Array(handle.prefix(Int(length)))
    }

    deinit { FanotifyRelease.release(group) }

    /// Every change queued since the last call (or `init`).
    /// - Throws: `SandboxError` (`.io`) when the queue cannot be read.
    public func changes() throws(SandboxError) -> [Change] {
        var out: [Change] = []
        var buffer = [ahs_change](repeating: ahs_change(), count: 512)
        while true {
            let n = top.withUnsafeBufferPointer { t in
                ahs_changes_read(group, t.baseAddress, UInt32(t.count), &buffer, Int32(buffer.count))
            }
            if n < 0 { throw SandboxError(.io, "reading fanotify events: \(String(cString: strerror(errno)))") }
            if n == 0 { return out }
            for i in 0..<Int(n) {
                var c = buffer[i]
                let name = withUnsafeBytes(of: &c.name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                let object = withUnsafeBytes(of: &c.object) { Array($0.prefix(Int(c.object_len))) }
                out.append(Change(mask: c.mask, pid: c.pid, name: name, inTop: c.in_top != 0, object: object))
            }
        }
    }

    /// The file handle of `name` in the directory `dirFD` (a link not followed), as
    /// `Change.object` holds one; nil if it has none (missing).
    public static func handle(at dirFD: Int32, _ name: String) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: 132)
        let n = ahs_file_handle(dirFD, name, &out, UInt32(out.count))
        return n < 0 ? nil : Array(out.prefix(Int(n)))
    }
}
