import Foundation
import Testing
import TestSupport

@testable import Experiment
@testable import Execution

/// `vm-exec`'s jail, with python3 standing in for an escaped qemu (what an escape could call
/// runs under our filter alone here, without qemu's own). From an adversarial review.
@Suite("The held-out VM's qemu jail, attacked from inside")
struct VMJailTests {
    static func jail(_ work: String, _ script: String, redirect: String = "") throws -> Run {
        try FileManager.default.createDirectory(atPath: work + "/export", withIntermediateDirectories: true)
        chmod(work, 0o700)
        let command = [Built.autoharness, "vm-exec", "--work", work, "--read", "/var/cache/autoharness/vm/kernel/vmlinuz",
                       "--uid", "\(HeldOutVM.qemuID)", "--gid", "\(HeldOutVM.qemuID)", "--", "/usr/bin/python3", "-c", script]
        return try runProcess("/bin/bash", ["-c", "exec " + command.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ") + " " + redirect])
    }

    @Test("what an escape would use is refused: the parent-death signal cleared, the keyrings, a user namespace, a vsock or inet socket, file handles; a descriptor vm-exec was given (a host directory) is closed; the process is not its namespace's first")
    func escapesRefused() throws {
        try requireRoot()
        try #require(access("/var/cache/autoharness/vm/kernel/vmlinuz", R_OK) == 0, "no guest kernel: run scripts/install-vm")
        let dir = try TempDir()
        let r = try Self.jail(dir.path + "/w", """
            import ctypes, errno, os, socket
            libc = ctypes.CDLL(None, use_errno=True)
            def call(name, rc):
                print(name, "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno()))
            call("pdeathsig", libc.prctl(1, 0, 0, 0, 0))
            call("add_key", libc.syscall(248, b"user", b"carry", b"HELDOUT", 7, -4))
            call("keyctl", libc.syscall(250, 0, -3, 0))
            call("unshare", libc.syscall(272, 0x10000000))
            call("name_to_handle_at", libc.syscall(303, -100, b"/usr", ctypes.create_string_buffer(136), ctypes.byref(ctypes.c_int()), 0))
            for family in (40, socket.AF_INET):
                try:
                    socket.socket(family, socket.SOCK_STREAM); print("socket", family, "ok")
                except OSError as e:
                    print("socket", family, errno.errorcode.get(e.errno))
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); print("unix ok")
            try:
                os.stat("/proc/self/fd/5"); print("fd 5 open")
            except OSError:
                print("fd 5 closed")
            print("pid", os.getpid())
            """, redirect: "5</root")
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        for line in ["pdeathsig EPERM", "add_key EPERM", "keyctl EPERM", "unshare EPERM", "name_to_handle_at EPERM",
                     "socket 40 EAFNOSUPPORT", "socket 2 EAFNOSUPPORT", "unix ok", "fd 5 closed", "pid 2"] {
            #expect(r.stdout.contains(line + "\n"), "\(line)\n\(r.stdout)\(r.stderr)")
        }
    }

    @Test("killing vm-exec ends the jailed program, which holds no parent-death signal of its own (its namespace's first process, root, dies with vm-exec and takes the namespace)")
    func diesWithVMExec() throws {
        try requireRoot()
        try #require(access("/var/cache/autoharness/vm/kernel/vmlinuz", R_OK) == 0, "no guest kernel: run scripts/install-vm")
        let dir = try TempDir()
        try FileManager.default.createDirectory(atPath: dir.path + "/w/export", withIntermediateDirectories: true)
        chmod(dir.path + "/w", 0o700)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Built.autoharness)
        p.arguments = ["vm-exec", "--work", dir.path + "/w", "--read", "/var/cache/autoharness/vm/kernel/vmlinuz", "--uid", "\(HeldOutVM.qemuID)",
                       "--gid", "\(HeldOutVM.qemuID)", "--", "/usr/bin/python3", "-c", "import time\nfor _ in range(600):\n    time.sleep(0.1)\n"]
        try p.run()
        func children(_ pid: Int32) -> [Int32] {
            (procText("/proc/\(pid)/task/\(pid)/children") ?? "").split(separator: " ").compactMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
        var program: Int32?
        for _ in 0..<100 where program == nil {
            usleep(50_000)
            if let stub = children(p.processIdentifier).first, let q = children(stub).first,
               (procText("/proc/\(q)/status") ?? "").contains("Uid:\t\(HeldOutVM.qemuID)") { program = q }
        }
        let q = try #require(program, "the jailed program did not start")
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        #expect(endsWithin(q, seconds: 5), "the jailed program \(q) outlived vm-exec")
    }
}
