import Foundation
import SupervisorIO
import Testing
import TestSupport

/// `FileSystem.copyLayer`: an overlay upper layer a sandbox wrote, copied for another overlay
/// with everything overlayfs and the programs in it read (owners, set-id bits, attributes,
/// whiteouts, hard links, times), and nothing followed.
@Suite("Copying an overlay's upper layer")
struct LayerCopyTests {
    /// Makes the layer (python3: nodes and attributes Foundation cannot make).
    static let make = """
        import os, stat, sys
        d = sys.argv[1]
        os.makedirs(d + "/usr/local/bin"); os.makedirs(d + "/etc/opaque")
        p = d + "/usr/local/bin/tool"
        open(p, "w").write("#!/bin/sh\\necho tool\\n")
        os.chown(p, 1234, 5678); os.chmod(p, 0o4755)
        os.setxattr(p, "security.capability", bytes.fromhex("01000002" + "00200000" * 1 + "00000000" * 3))
        os.utime(p, (1000000000, 1000000000))
        os.link(p, d + "/usr/local/bin/tool-again")
        os.symlink("/etc/passwd", d + "/etc/host-passwd")
        os.lchown(d + "/etc/host-passwd", 1234, 5678)
        os.mknod(d + "/etc/removed", stat.S_IFCHR | 0o600, os.makedev(0, 0))
        os.mkfifo(d + "/etc/fifo", 0o640)
        os.setxattr(d + "/etc/opaque", "trusted.overlay.opaque", b"y")
        os.chown(d + "/etc/opaque", 42, 43); os.chmod(d + "/etc/opaque", 0o1750)
        os.utime(d + "/etc/opaque", (2000000000, 2000000000))
        """

    /// Describes a tree, one line per entry, sorted.
    static let describe = """
        import os, stat, sys
        d = sys.argv[1]
        out = []
        for root, dirs, files in os.walk(d):
            for n in sorted(dirs + files):
                p = os.path.join(root, n); s = os.lstat(p); r = p[len(d):]
                line = f"{r} {stat.filemode(s.st_mode)} {s.st_uid}:{s.st_gid} links={s.st_nlink}"
                if stat.S_ISCHR(s.st_mode): line += f" dev={os.major(s.st_rdev)}:{os.minor(s.st_rdev)}"
                if stat.S_ISLNK(s.st_mode): line += " -> " + os.readlink(p)
                else:
                    line += f" mtime={int(s.st_mtime)}"
                    if not stat.S_ISFIFO(s.st_mode) and not stat.S_ISCHR(s.st_mode):
                        line += " xattrs=" + ",".join(f"{a}={os.getxattr(p, a).hex()}" for a in sorted(os.listxattr(p)))
                if stat.S_ISREG(s.st_mode): line += " data=" + open(p, "rb").read().hex()
                out.append(line)
        inos = {}
        for root, dirs, files in os.walk(d):
            for n in files:
                s = os.lstat(os.path.join(root, n))
                if stat.S_ISREG(s.st_mode): inos.setdefault(s.st_ino, []).append(n)
        out.append("shared inodes: " + ";".join(sorted(",".join(sorted(v)) for v in inos.values() if len(v) > 1)))
        print("\\n".join(sorted(out)))
        """

    @Test("owners, set-id bits, file capabilities, the overlay's opaque mark, hard links, times, whiteouts and FIFOs are copied; a link is copied as a link")
    func copiesEverything() throws {
        try requireRoot()
        let dir = try TempDir()
        defer { try? FileManager.default.removeItem(atPath: dir.path) }
        let (source, destination) = (dir.file("upper"), dir.file("copy"))
        let made = try runProcess("/usr/bin/python3", ["-c", Self.make, source])
        try #require(made.status == 0, "\(made.stderr)")
        try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: false)
        try FileSystem.copyLayer(from: source, to: destination)
        let a = try runProcess("/usr/bin/python3", ["-c", Self.describe, source])
        let b = try runProcess("/usr/bin/python3", ["-c", Self.describe, destination])
        try #require(a.status == 0 && b.status == 0, "\(a.stderr) \(b.stderr)")
        #expect(a.stdout == b.stdout, "source:\n\(a.stdout)\ncopy:\n\(b.stdout)")
        // The description covers what matters: a failing copy would differ in these.
        for needle in ["/usr/local/bin/tool -rwsr-xr-x 1234:5678 links=2 mtime=1000000000 xattrs=security.capability=",
                       "/etc/removed crw------- 0:0 links=1 dev=0:0", "/etc/fifo prw-r-----",
                       "/etc/host-passwd lrwxrwxrwx 1234:5678 links=1 -> /etc/passwd",
                       "/etc/opaque drwxr-x--T 42:43 links=2 mtime=2000000000 xattrs=trusted.overlay.opaque=79",
                       "shared inodes: tool,tool-again"] {
            #expect(b.stdout.contains(needle), "\(needle)\n\(b.stdout)")
        }
    }

    @Test("a device node other than a whiteout is refused, and so is a tree deeper than the limit")
    func refusals() throws {
        try requireRoot()
        let dir = try TempDir()
        defer { try? FileManager.default.removeItem(atPath: dir.path) }
        let device = try runProcess("/usr/bin/python3", ["-c", "import os, stat, sys; os.makedirs(sys.argv[1]); os.mknod(sys.argv[1] + '/null', stat.S_IFCHR | 0o666, os.makedev(1, 3))",
                                                         dir.file("dev")])
        try #require(device.status == 0, "\(device.stderr)")
        try FileManager.default.createDirectory(atPath: dir.file("dev-copy"), withIntermediateDirectories: false)
        #expect(throws: IOFailure.self) { try FileSystem.copyLayer(from: dir.file("dev"), to: dir.file("dev-copy")) }

        try FileManager.default.createDirectory(atPath: dir.file("deep/a/a/a/a"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir.file("deep-copy"), withIntermediateDirectories: false)
        #expect(throws: IOFailure.self) { try FileSystem.copyLayer(from: dir.file("deep"), to: dir.file("deep-copy"), maxDepth: 3) }
        try FileManager.default.createDirectory(atPath: dir.file("deep-copy2"), withIntermediateDirectories: false)
        try FileSystem.copyLayer(from: dir.file("deep"), to: dir.file("deep-copy2"), maxDepth: 5)
    }

    @Test("a hard link's second name is linked to its own file when directory names are not UTF-8 (names are bytes, never decoded)")
    func nonUTF8HardLinks() throws {
        try requireRoot()
        // On tmpfs, which lists the newest entry first: "\xff" is copied before the decoy's
        // directory, whose name is what "\xff" decodes to.
        let dir = "/dev/shm/ah-layer-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (source, destination) = (dir + "/src", dir + "/dst")
        // "\xff" holds F ("secret"); "\xef\xbf\xbd" (U+FFFD, how "\xff" decodes) holds a decoy
        // of the same name; F's second name is z/link.
        let made = try runProcess("/usr/bin/python3", ["-c", """
            import os, sys
            s = sys.argv[1].encode()
            os.makedirs(s + b"/z"); os.makedirs(s + b"/\\xef\\xbf\\xbd"); os.makedirs(s + b"/\\xff")
            open(s + b"/\\xef\\xbf\\xbd/f", "w").write("decoy")
            open(s + b"/\\xff/f", "w").write("secret")
            os.link(s + b"/\\xff/f", s + b"/z/link")
            """, source])
        try #require(made.status == 0, "\(made.stderr)")
        try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: false)
        try FileSystem.copyLayer(from: source, to: destination)
        #expect((try? String(contentsOfFile: destination + "/z/link", encoding: .utf8)) == "secret")
        var st = stat()
        #expect(stat(destination + "/z/link", &st) == 0 && st.st_nlink == 2)
    }

    @Test("a sparse file is copied sparse: its holes cost the copy nothing")
    func sparse() throws {
        try requireRoot()
        let dir = try TempDir()
        defer { try? FileManager.default.removeItem(atPath: dir.path) }
        let (source, destination) = (dir.file("src"), dir.file("dst"))
        // 256 MiB of hole with 4 KiB of data in the middle.
        let made = try runProcess("/usr/bin/python3", ["-c", """
            import os, sys
            os.makedirs(sys.argv[1]); f = open(sys.argv[1] + "/hole", "wb"); f.truncate(256 << 20)
            f.seek(100 << 20); f.write(b"x" * 4096)
            """, source])
        try #require(made.status == 0, "\(made.stderr)")
        try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: false)
        try FileSystem.copyLayer(from: source, to: destination)
        var a = stat(), b = stat()
        #expect(stat(source + "/hole", &a) == 0 && stat(destination + "/hole", &b) == 0)
        #expect(b.st_size == a.st_size && b.st_blocks <= a.st_blocks + 8, "source \(a.st_blocks) blocks, copy \(b.st_blocks)")
        let copy = try Data(contentsOf: URL(fileURLWithPath: destination + "/hole"))
        #expect(copy[(100 << 20)..<((100 << 20) + 4096)].allSatisfy { $0 == UInt8(ascii: "x") } && copy[0] == 0 && copy.last == 0)
    }
}
