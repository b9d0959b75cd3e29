import Foundation
import Testing
import TestSupport

/// The audit session counter (`/proc/self/sessionid`): a process whose loginuid is unset may
/// set it once, without any capability, and each such write takes the counter's next number.
/// `autoharness` sets its own loginuid at start (`LoginUID`), so every sandbox inherits a set
/// one and cannot move the counter. Issue 54's review: 5, 6, 7 read from a sandbox without it.
@Suite("The audit loginuid is set before any sandbox")
struct LoginUIDTests {
    @Test("started with an unset loginuid, a sandbox without Landlock tries to set its own and gets EPERM")
    func sandboxCannotTakeASession() throws {
        try requireRoot()
        let dir = try TempDir()
        let off = try dir.file("off.yaml", "extends: base\nfilesystem:\n  landlock: off\n")
        // The wrapper unsets its own loginuid (root may: CAP_AUDIT_CONTROL), as a service
        // started by systemd or a CI runner has it, then becomes `autoharness sandbox exec`.
        let wrapper = """
            import os, sys
            with open('/proc/self/loginuid', 'w') as f: f.write('4294967295')
            assert open('/proc/self/loginuid').read().strip() == '4294967295'
            os.execv(sys.argv[1], sys.argv[1:])
            """
        func attempt(_ action: String, _ args: String...) throws -> Run {
            try runProcess("/usr/bin/python3", ["-c", wrapper, Built.autoharness, "sandbox", "exec", "--policy", off, "--timeout", "30",
                                                "--ro", "\(Built.probe):/probe", "--", "/probe", action] + args)
        }
        let w = try attempt("write", "/proc/self/loginuid", "1000")
        try #require(!w.stderr.contains("AssertionError") && !w.stderr.contains("PermissionError"),
                     "this host would not let root unset its loginuid (audit's immutable loginuid?): \(w.stderr)")
        #expect(w.errnoName == "EPERM", "the sandbox set its loginuid: \(w.stdout) \(w.stderr)")
    }
}
