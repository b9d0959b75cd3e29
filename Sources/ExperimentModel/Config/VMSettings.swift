// Where a gate's held-out phase runs, and the virtual machine's settings.
//
// `host`: in sandboxes on the supervisor's own kernel (the shared-kernel channels of docs/held-out.md's
// threat model remain, with their stated capacity). `vm`: in a fresh virtual machine per gate,
// destroyed afterwards, whose kernel, page cache, counters, lock tables and clocks nothing
// later ever shares (`HeldOutVM`). `auto` (the default): `vm` where a KVM guest really boots
// and the benchmark runs in the guest, else `host`, said once per supervisor with the
// capacity that remains.

/// `gate.held_out_runtime`.
public enum HeldOutRuntime: String, Sendable, CaseIterable, Equatable {
    case auto
    case host
    case vm
}

/// `gate.vm:` in the experiment config.
public struct VMSettings: Codable, Sendable, Equatable {
    /// `gate.vm.accel`: how qemu runs the guest.
    public enum Accel: String, Codable, Sendable, CaseIterable, Equatable {
        /// KVM when a probe boot succeeds, otherwise emulation if `allow_emulation` permits.
        case auto
        case kvm
        /// Software emulation (qemu's TCG): no KVM needed, 10-50x slower.
        case tcg
    }

    public var accel: Accel = .auto
    /// Emulation is slow enough to change what a gate costs by an order of magnitude, so a
    /// host without working KVM runs `vm` only when the operator says so.
    public var allowEmulation = false
    /// Guest memory in MiB: every held-out sandbox's tmpfs and processes live in it.
    public var memoryMiB = 2048
    /// Virtual CPUs; nil: `max_concurrency`, at most the host's online CPUs.
    public var cpus: Int?
    /// The directory `scripts/install-vm` fills: `vmlinuz`, `modules/*.ko`, `modules/order`.
    public var kernelDirectory = VMSettings.defaultKernelDirectory
    /// Seconds from qemu's start to the guest's first line on the results port.
    public var bootTimeout = 180.0

    /// Each gate's guest starts from a guest saved once where it waits for its first gate
    /// (`VMSnapshot`), instead of booting.
    public var snapshot = true
    /// Where saved guests are kept: root's, writable by no one else.
    public var snapshotDirectory = VMSettings.defaultSnapshotDirectory

    public static let defaultKernelDirectory = "/var/cache/autoharness/vm/kernel"
    public static let defaultSnapshotDirectory = "/var/cache/autoharness/vm/snapshots"
    public init() {}
}
