import Crypto
import Execution
import ExperimentModel
import Foundation
import Glibc
import SupervisorIO

// What an evidence bundle measures on this host: task files, binaries, policies, the
// held-out runtime.

extension HeldOutVM {
    /// The guest a gate's held-out phase boots: its kernel image and the initramfs built from
    /// it (deterministic: the same kernel directory gives the same bytes), and the saved state
    /// it was restored from, by digest.
    func measurement() -> HeldOutRuntimeMeasurement {
        HeldOutRuntimeMeasurement(kind: "vm", kernelVersion: kernel.version, kernelSHA256: try? WorkDigest.file(kernel.vmlinuz),
                                  initramfsSHA256: WorkDigest.hex(SHA256.hash(data: GuestImage.initramfs(kernel: kernel))),
                                  acceleration: accel.rawValue, savedStateSHA256: restoredStateSHA256)
    }
}

extension Executors {
    /// Where held-out tasks run, as settled (`settleHeldOut`).
    package func heldOutMeasurement(_ config: ExperimentConfig) -> HeldOutRuntimeMeasurement {
        var m = config.executor.kind == .ray ? HeldOutRuntimeMeasurement(kind: config.gate.heldOutRuntime == .vm ? "ray-vm" : "ray")
            : heldOutVM?.measurement() ?? HeldOutRuntimeMeasurement(kind: "host")
        if config.vendorAccounts.shared { m.sharedVendorAccount = true }
        return m
    }
}

public enum EvidenceMeasure {
    /// `binaries()` once per process: the programs do not change under a running supervisor,
    /// and hashing them (the debug build's is large) is not work to repeat at every gate.
    package static let runningBinaries = binaries()

    /// The running executable and the programs installed beside it.
    public static func binaries() -> [FileDigest] {
        var out: [FileDigest] = []
        if let me = try? WorkDigest.executable() { out.append(FileDigest(name: "autoharness", sha256: me)) }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
        let dir = (exe as NSString).deletingLastPathComponent
        for name in ["autoharness-launch", "autoharness-client", "autoharness-front", "sandbox-probe"] {
            if let d = try? WorkDigest.file(dir + "/" + name) { out.append(FileDigest(name: name, sha256: d)) }
        }
        return out
    }
}
