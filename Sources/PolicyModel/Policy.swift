import SupervisorIO
// The resolved sandbox policy: what a sandboxed process may see and do.
//
// This file is the one place the policy schema lives as types. `PolicyLoader` turns YAML into
// these values (with file:line errors); `Sandbox.PlanCompiler` turns them into a launch plan.
// Nothing here performs a syscall, so the model can be checked and shown without privileges.

/// Where a value came from, for `file:line: message` diagnostics.
public struct SourceLocation: Sendable, Hashable, CustomStringConvertible {
    public var file: String
    public var line: Int
    public var column: Int

    public init(file: String, line: Int, column: Int = 1) {
        self.file = file
        self.line = line
        self.column = column
    }

    public var description: String { "\(file):\(line)" }
}

/// A resolved policy after `extends:` has been applied.
public struct Policy: Sendable, Equatable {
    /// The policy's name (file stem for files in `policies/`, or the path given).
    public var name: String
    public var description: String?
    /// The chain of policies this one was built from, base first (for `policy show`).
    public var lineage: [String]
    public var mounts: [MountSpec]
    public var identity: Identity
    public var seccomp: SeccompSpec
    public var network: NetworkSpec
    public var limits: Limits
    public var env: EnvSpec
    /// Working directory inside the sandbox (absolute). Default `/`.
    public var chdir: String
    /// Landlock under the mounts: writes only where the policy mounts read-write.
    public var landlock: LandlockMode

    public init(
        name: String,
        description: String? = nil,
        lineage: [String] = [],
        mounts: [MountSpec] = [],
        identity: Identity = Identity(),
        seccomp: SeccompSpec = SeccompSpec(),
        network: NetworkSpec = NetworkSpec(),
        limits: Limits = Limits(),
        env: EnvSpec = EnvSpec(),
        chdir: String = "/",
        landlock: LandlockMode = .auto
    ) {
        self.name = name
        self.description = description
        self.lineage = lineage
        self.mounts = mounts
        self.identity = identity
        self.seccomp = seccomp
        self.network = network
        self.limits = limits
        self.env = env
        self.chdir = chdir
        self.landlock = landlock
    }

    /// The seccomp section as launched: without NETLINK_ROUTE sockets where the network mode
    /// is `none`. A route or neighbour lookup through one (RTM_GETROUTE with an input
    /// interface, RTM_GETNEIGH) moves statistics the kernel keeps per CPU for the whole host
    /// (/proc/net/stat/rt_cache, the neighbour tables' lookups), which any sandbox reads: a
    /// review moved in_slow_tot by a chosen amount from a sandbox with `lo` down and read it
    /// exactly in a later one (about 21 bits in a 10 s held-out phase). A namespace with no
    /// interface up has no address or route to ask about, and glibc's getaddrinfo takes a
    /// refused netlink socket as "both address families may be used".
    public var effectiveSeccomp: SeccompSpec {
        var s = seccomp
        if network.mode == .none { s.netlinkRoute = false }
        return s
    }
}

/// `filesystem.landlock`: a second wall under the mount table. With it, the payload can
/// create, write, truncate, rename into or remove files only beneath the read-write binds
/// and tmpfs mounts (and write the device nodes under /dev), whatever else a mount would
/// allow (e.g. /proc files).
public enum LandlockMode: String, Sendable, Equatable, CaseIterable {
    /// Used when the kernel has it, skipped (and said so by `-v` and `doctor`) otherwise.
    case auto
    /// The sandbox does not start on a kernel without Landlock.
    case required
    case off
}

/// One entry of the sandbox's filesystem. The sandbox root starts as an empty tmpfs; only
/// entries listed here (plus a fresh `/proc` and a minimal `/dev`) exist inside.
public struct MountSpec: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// Bind `source` (absolute host path, may contain `{placeholders}`) read-only, recursively.
        case readOnly(source: String)
        /// Bind `source` read-write. Submounts keep their own flags; nosuid/nodev are forced.
        case readWrite(source: String)
        /// A fresh tmpfs; `size` in bytes (nil: the default, 64 MiB), `mode` its root permissions.
        case tmpfs(size: UInt64?, mode: UInt32)
        /// Cover `destination` (a file or directory provided by an earlier bind) with an empty,
        /// read-only object, so a granted tree can have holes punched *into* it.
        case hide
        /// A symbolic link at `destination` whose text is `target` (e.g. `/bin -> usr/bin`).
        case symlink(target: String)
    }

    public var kind: Kind
    /// Absolute, normalised path inside the sandbox.
    public var destination: String
    /// When true, a bind whose source does not exist is skipped instead of failing.
    public var optional: Bool
    /// For binds: if the source is itself a symbolic link, recreate the link inside instead of
    /// binding its target (keeps merged-/usr layouts such as `/lib -> usr/lib` intact).
    public var keepSymlink: Bool
    /// For binds: symbolic links inside the bound tree are not followed at all (the mount is
    /// MOUNT_ATTR_NOSYMFOLLOW; opening one fails with ELOOP, readlink still works). For trees a
    /// less trusted process wrote, e.g. the verifier's view of the agent's work dir.
    public var noSymlinks: Bool
    /// For ro binds: this entry is part of the host's userland (programs, libraries, the
    /// loader's /etc files), which a task's image replaces: a sandbox built on an image
    /// (`PlanOverrides.imageRoot`) leaves every such entry out and has the image's instead.
    public var userland: Bool
    /// Where the entry was written, for diagnostics. Ignored by `==`.
    public var location: SourceLocation?

    public init(
        kind: Kind, destination: String, optional: Bool = false, keepSymlink: Bool = false,
        noSymlinks: Bool = false, userland: Bool = false, location: SourceLocation? = nil
    ) {
        self.kind = kind
        self.destination = destination
        self.optional = optional
        self.keepSymlink = keepSymlink
        self.noSymlinks = noSymlinks
        self.userland = userland
        self.location = location
    }

    public static func == (a: MountSpec, b: MountSpec) -> Bool {
        a.kind == b.kind && a.destination == b.destination && a.optional == b.optional
            && a.keepSymlink == b.keepSymlink && a.noSymlinks == b.noSymlinks && a.userland == b.userland
    }

    /// The host path this entry reads from, if it is a bind.
    public var source: String? {
        switch kind {
        case .readOnly(let s), .readWrite(let s): return s
        default: return nil
        }
    }

    public var kindName: String {
        switch kind {
        case .readOnly: return "ro"
        case .readWrite: return "rw"
        case .tmpfs: return "tmpfs"
        case .hide: return "hide"
        case .symlink: return "symlink"
        }
    }
}

/// Who the payload is, inside and outside the user namespace.
public struct Identity: Sendable, Equatable {
    /// uid/gid seen inside the sandbox. Must be non-zero.
    public var uid: UInt32
    public var gid: UInt32
    /// The host ids those map to. Files the sandbox creates in read-write binds are owned by
    /// these on the host; they should be unprivileged ids (default: nobody/nogroup).
    public var hostUID: UInt32
    public var hostGID: UInt32
    /// How many consecutive ids map: uid…uid+span-1 to hostUID…hostUID+span-1 (gids alike).
    /// 1 but on a task's image, whose root and system users all need an id (never a policy key).
    public var span: UInt32
    public var hostname: String

    public init(
        uid: UInt32 = 1000, gid: UInt32 = 1000, hostUID: UInt32 = 65534, hostGID: UInt32 = 65534, span: UInt32 = 1,
        hostname: String = "sandbox"
    ) {
        self.span = span
        self.uid = uid
        self.gid = gid
        self.hostUID = hostUID
        self.hostGID = hostGID
        self.hostname = hostname
    }
}

/// What the kernel does with a syscall the allowlist does not permit.
public enum SeccompAction: Sendable, Equatable, CustomStringConvertible {
    /// Fail the call with this errno (e.g. ENOSYS, EPERM) and report it.
    case errno(Int32)
    /// Report it and kill the whole sandbox.
    case kill

    public var description: String {
        switch self {
        case .errno(let e): return "errno(\(ErrnoName.name(e)))"
        case .kill: return "kill"
        }
    }
}

public struct SeccompSpec: Sendable, Equatable {
    /// Named base allowlist (`default`; see `SyscallProfiles`).
    public var profile: String
    /// For syscalls outside the allowlist.
    public var defaultAction: SeccompAction
    /// Extra syscall names allowed on top of the profile (must not name a hard-denied syscall).
    public var allow: [String]
    /// Syscall names removed from the allowlist; they fail with EPERM and are reported.
    public var deny: [String]
    /// Syscall names refused with ENOSYS, as if the kernel lacked them, and not reported:
    /// for calls that benign programs probe and fall back from (libuv's pidfd_open, file
    /// watchers' inotify), so an ordinary session records no violations.
    public var quiet: [String]
    /// Whether `socket(AF_NETLINK, _, NETLINK_ROUTE)` passes (what getifaddrs and `ip` use).
    /// Not a policy key: `Policy.effectiveSeccomp` turns it off where `network.mode` is
    /// `none`, since there is nothing there to ask about.
    public var netlinkRoute: Bool
    /// Directories of the sandbox's root (`/tests`) into which a symbolic link the sandbox
    /// makes is recorded (`seccomp.watch_links`): its symlink and symlinkat calls wait while
    /// the supervisor resolves the target in the caller's view, then go on.
    public var watchLinks: [String]

    public init(
        profile: String = "default", defaultAction: SeccompAction = .errno(38 /* ENOSYS */),
        allow: [String] = [], deny: [String] = [], quiet: [String] = [], netlinkRoute: Bool = true, watchLinks: [String] = []
    ) {
        self.profile = profile
        self.defaultAction = defaultAction
        self.allow = allow
        self.deny = deny
        self.quiet = quiet
        self.netlinkRoute = netlinkRoute
        self.watchLinks = watchLinks
    }
}

public struct NetworkSpec: Sendable, Equatable {
    public enum Mode: String, Sendable, Equatable, CaseIterable {
        /// A private network namespace with no interface up.
        case none
        /// A private network namespace with only `lo` up.
        case loopback
        /// Loopback plus an HTTP CONNECT proxy to `allow` (served by `autoharness run`).
        case proxy
    }
    public var mode: Mode
    /// `host:port` pairs reachable through the proxy (mode `proxy` only).
    public var allow: [String]

    public init(mode: Mode = .none, allow: [String] = []) {
        self.mode = mode
        self.allow = allow
    }
}

/// Resource limits. `nil` means "not limited by this policy".
public struct Limits: Sendable, Equatable {
    // rlimits (per process)
    public var nofile: UInt64?
    public var nproc: UInt64?
    /// Largest file the payload may write, bytes.
    public var fsize: UInt64?
    /// CPU time per process, seconds.
    public var cpuSeconds: UInt64?
    // cgroup limits (the whole sandbox)
    /// Memory for the whole sandbox, bytes.
    public var memory: UInt64?
    /// Maximum number of tasks in the whole sandbox.
    public var pids: UInt64?
    /// CPU bandwidth in cores (e.g. 0.5, 2).
    public var cpus: Double?
    /// Wall-clock limit in seconds; the whole tree is killed when it expires (exit 124).
    public var timeoutSeconds: Double?

    public init(
        nofile: UInt64? = nil, nproc: UInt64? = nil, fsize: UInt64? = nil,
        cpuSeconds: UInt64? = nil, memory: UInt64? = nil, pids: UInt64? = nil,
        cpus: Double? = nil, timeoutSeconds: Double? = nil
    ) {
        self.nofile = nofile
        self.nproc = nproc
        self.fsize = fsize
        self.cpuSeconds = cpuSeconds
        self.memory = memory
        self.pids = pids
        self.cpus = cpus
        self.timeoutSeconds = timeoutSeconds
    }
}

extension Limits {
    // The largest value each limit may be given. Past these a value is a mistake (a typo,
    // `1e300`), not a policy: the kernel's own ceilings for counts (PID_MAX_LIMIT for pids
    // and nproc, nr_open's default for nofile), and for time and sizes far more than any
    // sandbox needs.
    /// `nofile`, `nproc`, `pids`, `cpu_seconds` by name.
    public static let maxCounts: [String: UInt64] = ["nofile": 1 << 20, "nproc": 4_194_304, "pids": 4_194_304, "cpu_seconds": 31_536_000]
    /// `memory`, `fsize` and a tmpfs `size` (1024T).
    public static let maxBytes: UInt64 = 1 << 50
    public static let maxCPUs = 1024.0
    /// `timeout` (a week), and any wall-clock limit a sandbox is given.
    public static let maxTimeoutSeconds = 604_800.0
}

/// The payload's environment is built from nothing: only `set` and `pass` reach it.
public struct EnvSpec: Sendable, Equatable {
    /// Variables set to fixed values (values may contain `{placeholders}`).
    public var set: [String: String]
    /// Names copied from the supervisor's environment when present.
    public var pass: [String]

    public init(set: [String: String] = [:], pass: [String] = []) {
        self.set = set
        self.pass = pass
    }

    /// `[A-Za-z_][A-Za-z0-9_]*`: the names policies and `--env` may use.
    public static func isVariableName(_ name: String) -> Bool {
        func letter(_ c: Unicode.Scalar) -> Bool { c == "_" || ("A"..."Z").contains(c) || ("a"..."z").contains(c) }
        guard let first = name.unicodeScalars.first, letter(first) else { return false }
        return name.unicodeScalars.allSatisfy { letter($0) || ("0"..."9").contains($0) }
    }
}
