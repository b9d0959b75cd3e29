/// An uncompressed initramfs: the kernel's "newc" cpio format (Documentation/driver-api/
/// early-userspace/buffer-format.rst), built in memory. Every entry is owned by root; parent
/// directories are added before their children; nothing is read from the host here.
struct Initramfs {
    private(set) var bytes: [UInt8] = []
    private var directories: Set<String> = [""]
    private var inode: UInt32 = 1

    /// A directory (and any missing parents), mode 0755 unless given.
    mutating func directory(_ path: String, mode: UInt32 = 0o755) {
        let p = Self.relative(path)
        guard !directories.contains(p) else { return }
        parents(of: p)
        directories.insert(p)
        entry(p, mode: 0o040000 | mode, data: [])
    }

    mutating func file(_ path: String, _ data: [UInt8], mode: UInt32 = 0o644) {
        let p = Self.relative(path)
        parents(of: p)
        entry(p, mode: 0o100000 | mode, data: data)
    }

    mutating func symlink(_ path: String, to target: String) {
        let p = Self.relative(path)
        parents(of: p)
        entry(p, mode: 0o120777, data: Array(target.utf8))
    }

    mutating func characterDevice(_ path: String, major: UInt32, minor: UInt32, mode: UInt32 = 0o600) {
        let p = Self.relative(path)
        parents(of: p)
        entry(p, mode: 0o020000 | mode, data: [], rdev: (major, minor))
    }

    /// The archive with its trailer.
    func archive() -> [UInt8] {
        var copy = self
        copy.entry("TRAILER!!!", mode: 0, data: [], isTrailer: true)
        return copy.bytes
    }

    private mutating func parents(of p: String) {
        var prefix = ""
        for part in p.split(separator: "/").dropLast() {
            prefix = prefix.isEmpty ? String(part) : prefix + "/" + part
            if !directories.contains(prefix) {
                directories.insert(prefix)
                entry(prefix, mode: 0o040755, data: [])
            }
        }
    }

    private static func relative(_ path: String) -> String {
        String(path.drop(while: { $0 == "/" }))
    }

    private mutating func entry(_ name: String, mode: UInt32, data: [UInt8], rdev: (UInt32, UInt32) = (0, 0), isTrailer: Bool = false) {
        let fields: [UInt32] = [
            isTrailer ? 0 : inode, mode, 0, 0, mode & 0o170000 == 0o040000 ? 2 : 1, 0, UInt32(data.count),
            0, 0, rdev.0, rdev.1, UInt32(name.utf8.count + 1), 0,
        ]
        inode += 1
        bytes += Array("070701".utf8)
        for f in fields {
            let hex = String(f, radix: 16)
            bytes += Array((String(repeating: "0", count: 8 - hex.count) + hex).utf8)
        }
        bytes += Array(name.utf8) + [0]
        pad()
        bytes += data
        pad()
    }

    private mutating func pad() {
        while bytes.count % 4 != 0 { bytes.append(0) }
    }
}
