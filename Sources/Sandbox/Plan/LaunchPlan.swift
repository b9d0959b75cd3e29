import Glibc
import PolicyModel

/// A policy compiled against this host: every bind source resolved and identified by
/// device/inode, mounts ordered parents-first, the environment built, the seccomp program
/// exported. The launcher consumes this and nothing else.
public struct LaunchPlan: Sendable {
    public struct Mount: Sendable, Equatable {
        public enum Kind: Sendable, Equatable {
            case bind(source: String, readOnly: Bool, device: UInt64, inode: UInt64, isDirectory: Bool, noSymlinks: Bool = false)
            case tmpfs(size: UInt64, mode: UInt32)
            case hide
            case symlink(target: String)
        }
        public var kind: Kind
        public var destination: String
        /// Where the entry came from: `file:line` of the policy, or the command-line flag.
        public var origin: String

        public var summary: String {
            switch kind {
            case .bind(let s, let ro, _, _, _, let nosym): return "\(ro ? "ro" : "rw") \(s) -> \(destination)\(nosym ? " (no symlinks)" : "")"
            case .tmpfs(let size, let mode):
                return "tmpfs \(destination) (size \(ByteSize.format(size)), mode \(String(mode, radix: 8)))"
            case .hide: return "hide \(destination)"
            case .symlink(let t): return "symlink \(destination) -> \(t)"
            }
        }
    }

    public struct ResourceLimit: Sendable, Equatable {
        public var name: String
        public var resource: Int32
        /// What is set (the request, lowered to the supervisor's own hard limit).
        public var value: UInt64
        public var requested: UInt64
    }

    public var sandboxID: String
    public var policyName: String
    public var command: [String]
    /// `NAME=VALUE` entries: the payload's entire environment.
    public var environment: [String]
    /// PATH used to find `command[0]` when it contains no `/`.
    public var searchPath: String
    public var workingDirectory: String
    public var identity: Identity
    public var mounts: [Mount]
    /// Optional binds left out because their source does not exist.
    public var skippedMounts: [String]
    public var rlimits: [ResourceLimit]
    public var limits: Limits
    public var network: NetworkSpec
    public var filter: CompiledFilter
    public var landlock: LandlockMode
    /// `PlanOverrides.imageFiles`: read-only files the sandbox reads through its root.
    public var imageFiles: String?
    /// The capabilities the payload keeps in its own user namespace (bit n: capability n):
    /// none, but `Capabilities.imageRoot` on a task's image.
    public var keptCapabilities: UInt64 = 0

    /// Whether building this sandbox writes nothing into a host directory: no mount lies
    /// inside a directory bind, whose mount point would have to be made in the bound source.
    public var buildTouchesNoSource: Bool {
        let above = PathTree.ancestors(mounts.map(\.destination))
        return !above.contains { list in
            list.contains { i in
                if case .bind(_, _, _, _, true, _) = mounts[i].kind { return true }
                return false
            }
        }
    }

    /// The host directories and files this sandbox can write through its binds.
    public var writableSources: [String] {
        mounts.compactMap { if case .bind(let source, false, _, _, _, _) = $0.kind { return source } else { return nil } }
    }

    /// Whether this sandbox may be built while another sandbox that can write `writable`
    /// (its `writableSources`) still runs (`SandboxRunner.build`), and then be run after it
    /// as if it had been built then: the build writes no host directory
    /// (`buildTouchesNoSource`), and no bind source lies strictly inside one of `writable`.
    /// A bind captures its source as it is at the build: a directory bound whole stays live
    /// (the other sandbox writes into it, and cannot replace it: it is that sandbox's own
    /// mount), but one inside it could be renamed away and replaced afterwards, and this
    /// sandbox would see the old one.
    public func canBeBuiltWhile(writable: [String]) -> Bool {
        guard buildTouchesNoSource else { return false }
        return !mounts.contains { m in
            guard case .bind(let source, _, _, _, _, _) = m.kind else { return false }
            return writable.contains { w in w == "/" ? source != "/" : source.hasPrefix(w + "/") }
        }
    }
}

/// Command-line additions to a policy (`sandbox exec --ro/--rw/--tmpfs/--chdir/--env`).
public struct PlanOverrides: Sendable {
    /// Appended to the policy's mounts; one with the same destination as a policy entry
    /// replaces it.
    public var mounts: [MountSpec] = []
    public var workingDirectory: String?
    /// `NAME=VALUE` sets a variable; `NAME` copies it from the supervisor's environment.
    public var environment: [String] = []
    public var timeoutSeconds: Double?
    /// A task's declared resources (Harbor's `[environment] memory_mb` and `cpus`) in place of
    /// the policy's memory and CPU limits, bounded as a policy's are.
    public var memory: UInt64?
    public var cpus: Double?
    /// A task's image: a host directory (the overlay the supervisor mounted over the image's
    /// unpacked files) that becomes the sandbox's root, writable, in place of the empty tmpfs.
    /// The policy's `userland` entries (the host's programs and libraries) are left out, every
    /// other entry is mounted inside it, and the payload is root of its user namespace (uid 0
    /// and gid 0 inside, the policy's unprivileged host ids outside, no capability), as a
    /// container's process is: the image's files belong to that host uid (`TaskImage`).
    public var imageRoot: String?
    /// The image's own files under `imageRoot` (the overlay's read-only lower layer): what a
    /// held-out sandbox on it reads, journaled for eviction like a read-only bind's source.
    public var imageFiles: String?
    /// The network mode `none` becomes `loopback`: `lo` up in the sandbox's own namespace (a
    /// task's image: tests and solutions start servers on localhost and query them).
    public var loopback = false
    /// The policy's network replaced (a local task's agent phase with `runner.network.allow`:
    /// the egress proxy to those hosts).
    public var network: NetworkSpec?
    /// The host ids an image's files belong to (`imageRoot` only): the sandbox maps its ids
    /// 0… onto them in place of the policy's one host id, and root keeps
    /// `Capabilities.imageRoot` within its own user namespace.
    public var imageIDs: HostIDRange?

    public init() {}
}

/// `count` consecutive host uids from `uid` and gids from `gid`, which a sandbox's ids 0… map to.
public struct HostIDRange: Sendable, Equatable, Codable {
    public var uid: UInt32
    public var gid: UInt32
    public var count: UInt32

    public init(uid: UInt32, gid: UInt32, count: UInt32) {
        (self.uid, self.gid, self.count) = (uid, gid, count)
    }

    /// Whether the range holds host uid `u` or gid `g`.
    public func holds(uid u: UInt32) -> Bool { u >= uid && UInt64(u) < UInt64(uid) + UInt64(count) }
    public func holds(gid g: UInt32) -> Bool { g >= gid && UInt64(g) < UInt64(gid) + UInt64(count) }
}

public enum PlanCompiler {
    static let defaultTmpfsSize: UInt64 = 64 << 20

    /// Compiles `policy` for `command`. Throws with the offending entry's origin when a source
    /// is missing or an override contradicts the policy.
    public static func compile(
        policy: Policy,
        command: [String],
        overrides: PlanOverrides = PlanOverrides(),
        hostEnvironment: [String: String],
        sandboxID: String = SandboxID.make()
    ) throws(SandboxError) -> LaunchPlan {
        guard let first = command.first, !first.isEmpty else {
            throw SandboxError(.invalidArgument, "no command given")
        }
        // The network as overridden, before anything (the filter, the proxy's variables) reads it.
        var policy = policy
        if let network = overrides.network {
            policy.network = network
        } else if overrides.loopback && policy.network.mode == .none {
            policy.network.mode = .loopback
        }
        var specs = policy.mounts
        var identity = policy.identity
        var kept: UInt64 = 0
        if overrides.imageRoot != nil {
            specs.removeAll(where: \.userland)
            identity.uid = 0
            identity.gid = 0
            if let ids = overrides.imageIDs {
                guard ids.count >= 1, ids.uid != 0, ids.gid != 0, UInt64(ids.uid) + UInt64(ids.count) <= UInt64(UInt32.max),
                      UInt64(ids.gid) + UInt64(ids.count) <= UInt64(UInt32.max) else {
                    throw SandboxError(.invalidArgument, "image ids: \(ids.count) from host uid \(ids.uid), gid \(ids.gid) is not a range of unprivileged ids")
                }
                (identity.hostUID, identity.hostGID, identity.span) = (ids.uid, ids.gid, ids.count)
                kept = ids.count > 1 ? Capabilities.imageRoot : 0
            }
        }
        for o in overrides.mounts {
            let dest = try normalize(o.destination, what: "--\(o.kindName) destination")
            if let src = o.source {
                _ = try normalize(src, what: "--\(o.kindName) source")
            }
            if let why = SandboxPath.reservedReason(forDestination: dest) {
                throw SandboxError(.invalidArgument, "--\(o.kindName) \(o.destination): \(why)")
            }
            var spec = o
            spec.destination = dest
            if let i = specs.firstIndex(where: { $0.destination == dest }) {
                specs[i] = spec
            } else {
                specs.append(spec)
            }
        }

        var mounts: [LaunchPlan.Mount] = []
        var skipped: [String] = []
        for spec in specs {
            let origin = spec.location.map { "\($0)" } ?? "--\(spec.kindName)"
            switch spec.kind {
            case .readOnly(let source), .readWrite(let source):
                var st = stat()
                if lstat(source, &st) != 0 {
                    if spec.optional {
                        skipped.append("\(source) -> \(spec.destination)")
                        continue
                    }
                    throw SandboxError(
                        .sourceMissing, "\(origin): bind source \(source): \(String(cString: strerror(errno)))",
                        errno: errno)
                }
                if spec.keepSymlink && (st.st_mode & S_IFMT) == S_IFLNK {
                    mounts.append(.init(kind: .symlink(target: try readLink(source)), destination: spec.destination, origin: origin))
                    continue
                }
                // Checked as given (command-line mounts reach this point unchecked) and as
                // resolved (a root-owned link may point anywhere, / included).
                if let why = SandboxPath.forbiddenReason(forSource: source) {
                    throw SandboxError(.invalidPolicy, "\(origin): \(why)")
                }
                let resolved = try resolveSource(source, origin: origin)
                if let why = SandboxPath.forbiddenReason(forSource: resolved) {
                    throw SandboxError(.invalidPolicy, "\(origin): \(source) resolves to \(resolved): \(why)")
                }
                guard stat(resolved, &st) == 0 else {
                    throw SandboxError(.sourceMissing, "\(origin): bind source \(resolved): \(String(cString: strerror(errno)))", errno: errno)
                }
                let isDir = (st.st_mode & S_IFMT) == S_IFDIR
                let readOnly: Bool
                if case .readOnly = spec.kind { readOnly = true } else { readOnly = false }
                mounts.append(.init(
                    kind: .bind(source: resolved, readOnly: readOnly, device: UInt64(st.st_dev),
                                inode: UInt64(st.st_ino), isDirectory: isDir, noSymlinks: spec.noSymlinks),
                    destination: spec.destination, origin: origin))
            case .tmpfs(let size, let mode):
                mounts.append(.init(kind: .tmpfs(size: size ?? defaultTmpfsSize, mode: mode), destination: spec.destination, origin: origin))
            case .hide:
                mounts.append(.init(kind: .hide, destination: spec.destination, origin: origin))
            case .symlink(let target):
                mounts.append(.init(kind: .symlink(target: target), destination: spec.destination, origin: origin))
            }
        }
        if let root = overrides.imageRoot {
            // First: the launcher takes entry 0 at / as the root every other entry is mounted in.
            let resolved = try resolveSource(try normalize(root, what: "image root"), origin: "image root")
            var st = stat()
            guard stat(resolved, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
                throw SandboxError(.sourceMissing, "image root \(resolved): not a directory", errno: errno)
            }
            mounts.insert(.init(kind: .bind(source: resolved, readOnly: false, device: UInt64(st.st_dev), inode: UInt64(st.st_ino),
                                            isDirectory: true), destination: "/", origin: "image root"), at: 0)
        }
        // Nothing may be mounted through a symlink the sandbox itself creates.
        let below = PathTree.descendants(ancestors: PathTree.ancestors(mounts.map(\.destination)))
        for (i, link) in mounts.enumerated() {
            guard case .symlink = link.kind, let inner = below[i].first.map({ mounts[$0] }) else { continue }
            throw SandboxError(.invalidPolicy, "\(inner.origin): \(inner.destination) lies under the symlink \(link.destination) (\(link.origin))")
        }
        // Parents before children; the sort is stable so equal depths keep policy order.
        mounts = mounts.enumerated().sorted { a, b in
            let da = depth(a.element.destination), db = depth(b.element.destination)
            return da != db ? da < db : a.offset < b.offset
        }.map(\.element)
        try checkMountPoints(mounts)

        let cwd = try normalize(overrides.workingDirectory ?? policy.chdir, what: "working directory")
        var env = try buildEnvironment(policy.env, overrides.environment, host: hostEnvironment)
        if policy.network.mode == .proxy {
            // The only route out; set for every HTTP client convention. Loopback is exempt: it
            // is the sandbox's own private `lo` (services a benchmark runs side by side talk
            // over it), and the proxy would refuse it anyway.
            let url = "http://127.0.0.1:\(EgressProxy.port)"
            env.removeAll { ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"]
                .contains(String($0.prefix { $0 != "=" })) }
            env += ["HTTPS_PROXY=\(url)", "HTTP_PROXY=\(url)", "https_proxy=\(url)", "http_proxy=\(url)", "NO_PROXY=127.0.0.1,localhost,::1", "no_proxy=127.0.0.1,localhost,::1"]
        }
        var limits = policy.limits
        if let t = overrides.timeoutSeconds {
            // The policy's own timeout was bounded when it loaded; an override (a task's
            // timeout, --timeout) is bounded here, the one place every launch passes.
            guard t > 0, t <= Limits.maxTimeoutSeconds else {
                throw SandboxError(.invalidArgument, "timeout \(t) s: must be greater than 0 and at most \(Int(Limits.maxTimeoutSeconds)) s (\(DurationString.format(Limits.maxTimeoutSeconds)))")
            }
            limits.timeoutSeconds = t
        }
        if let m = overrides.memory {
            guard m > 0, m <= Limits.maxBytes else { throw SandboxError(.invalidArgument, "memory \(m) bytes: must be greater than 0 and at most \(Limits.maxBytes)") }
            limits.memory = m
        }
        if let c = overrides.cpus {
            guard c > 0, c <= Limits.maxCPUs else { throw SandboxError(.invalidArgument, "cpus \(c): must be greater than 0 and at most \(Int(Limits.maxCPUs))") }
            limits.cpus = c
        }
        Timing.mark("mounts resolved")
        let filter: CompiledFilter
        do {
            filter = try SeccompCompiler.compile(policy.effectiveSeccomp, chroot: kept & Capabilities.sysChroot != 0)
        } catch {
            // The compiler sees only the seccomp section; name the policy it came from.
            throw SandboxError(error.code, "policy \(policy.lineage.last ?? policy.name): \(error.message)", errno: error.errno)
        }
        Timing.mark("seccomp compiled")

        var rlimits = [LaunchPlan.ResourceLimit(name: "core", resource: Int32(RLIMIT_CORE.rawValue), value: 0, requested: 0)]
        func add(_ name: String, _ resource: Int32, _ value: UInt64?) {
            guard let value else { return }
            // Only lowering is possible (raising a hard limit needs CAP_SYS_RESOURCE on the
            // host), so a request above the supervisor's own hard limit gets that limit.
            var cur = rlimit()
            let hard = getrlimit(__rlimit_resource_t(UInt32(resource)), &cur) == 0 ? UInt64(cur.rlim_max) : UInt64.max
            rlimits.append(.init(name: name, resource: resource, value: min(value, hard), requested: value))
        }
        add("nofile", Int32(RLIMIT_NOFILE.rawValue), limits.nofile)
        add("nproc", Int32(__RLIMIT_NPROC.rawValue), limits.nproc)
        add("fsize", Int32(RLIMIT_FSIZE.rawValue), limits.fsize)
        add("cpu", Int32(RLIMIT_CPU.rawValue), limits.cpuSeconds)

        let searchPath = env.first(where: { $0.hasPrefix("PATH=") }).map { String($0.dropFirst(5)) } ?? "/usr/bin:/bin"
        return LaunchPlan(
            sandboxID: sandboxID, policyName: policy.name, command: command, environment: env,
            searchPath: searchPath, workingDirectory: cwd, identity: identity, mounts: mounts,
            skippedMounts: skipped, rlimits: rlimits, limits: limits, network: policy.network,
            filter: filter, landlock: policy.landlock, imageFiles: overrides.imageRoot == nil ? nil : overrides.imageFiles,
            keptCapabilities: kept)
    }

    static func buildEnvironment(_ spec: EnvSpec, _ flags: [String], host: [String: String]) throws(SandboxError) -> [String] {
        var env: [String: String] = [:]
        var order: [String] = []
        func put(_ k: String, _ v: String) {
            if env[k] == nil { order.append(k) }
            env[k] = v
        }
        for (k, v) in spec.set.sorted(by: { $0.key < $1.key }) { put(k, v) }
        for k in spec.pass { if let v = host[k] { put(k, v) } }
        for f in flags {
            if let eq = f.firstIndex(of: "=") {
                let k = String(f[..<eq])
                guard EnvSpec.isVariableName(k) else { throw SandboxError(.invalidArgument, "--env \(f): '\(k)' is not a valid variable name") }
                put(k, String(f[f.index(after: eq)...]))
            } else {
                guard EnvSpec.isVariableName(f) else { throw SandboxError(.invalidArgument, "--env \(f): not a valid variable name") }
                if let v = host[f] { put(f, v) }
            }
        }
        return order.map { "\($0)=\(env[$0]!)" }
    }

    /// The loader's normalisation for command-line paths: absolute, one spelling, no `..`.
    static func normalize(_ path: String, what: String) throws(SandboxError) -> String {
        guard path.hasPrefix("/") else { throw SandboxError(.invalidArgument, "\(what) \(path): must be an absolute path") }
        do {
            return try SandboxPath.normalize(path)
        } catch {
            let why = error == .dotDot ? "'..' is not allowed" : error == .nul ? "contains a NUL byte" : "too long"
            throw SandboxError(.invalidArgument, "\(what) \(path): \(why)")
        }
    }

    /// Resolves a bind source to its real path, following a symbolic link only when the
    /// directory holding it is owned by root and writable by no one else.
    ///
    /// The supervisor clones sources as host root, so a link planted by an earlier sandbox in
    /// a directory it could write (a work dir, a notes file's folder) would otherwise hand a
    /// later sandbox any host file — with root doing the path traversal. Links in root-owned
    /// system directories (/etc/localtime -> /usr/share/zoneinfo/…) are still followed.
    /// A mount inside a read-only directory bind needs its mount point to exist in the bound
    /// source already: init cannot create it there (EROFS at launch, with no word of why).
    /// Checked here, where the message can name both entries and the missing path. `mounts`
    /// is parents-first; the nearest enclosing mount is the one that decides.
    static func checkMountPoints(_ mounts: [LaunchPlan.Mount]) throws(SandboxError) {
        let above = PathTree.ancestors(mounts.map(\.destination))
        for (i, inner) in mounts.enumerated() {
            if case .hide = inner.kind { continue }  // hides only what exists
            // Parents-first, so the nearest mount above that comes earlier is the one that decides.
            guard let outer = above[i].first(where: { $0 < i }).map({ mounts[$0] }),
                  case .bind(let source, true, _, _, true, _) = outer.kind else { continue }
            let rel = String(inner.destination.dropFirst(outer.destination == "/" ? 1 : outer.destination.count + 1))
            var st = stat()
            if lstat(source + "/" + rel, &st) == 0 { continue }
            let isDir: Bool
            switch inner.kind {
            case .bind(_, _, _, _, let d, _): isDir = d
            case .tmpfs: isDir = true
            default: isDir = false
            }
            throw SandboxError(.invalidPolicy, """
                \(inner.origin): \(inner.summary) cannot be mounted: \(inner.destination) lies inside the read-only bind \
                \(outer.summary) (\(outer.origin)), where \(source)/\(rel) does not exist, and a mount point cannot be \
                created in a read-only bind. Create \(source)/\(rel) (\(isDir ? "a directory" : "an empty file")) first, \
                or bind something else there.\(inner.destination.hasSuffix("/learnings.md") ? " (`autoharness run` creates learnings.md inside the workspace view; a hand-run `sandbox exec --policy coding-agent` must do the same.)" : "")
                """)
        }
    }

    static func resolveSource(_ source: String, origin: String) throws(SandboxError) -> String {
        var pending = source.split(separator: "/").map(String.init)
        var resolved: [String] = []
        var followed = 0
        while !pending.isEmpty {
            let part = pending.removeFirst()
            if part.isEmpty || part == "." { continue }
            if part == ".." {
                _ = resolved.popLast()
                continue
            }
            let parent = "/" + resolved.joined(separator: "/")
            let path = (parent == "/" ? "" : parent) + "/" + part
            var st = stat()
            guard lstat(path, &st) == 0 else {
                throw SandboxError(.sourceMissing, "\(origin): bind source \(source): \(path): \(String(cString: strerror(errno)))", errno: errno)
            }
            guard (st.st_mode & S_IFMT) == S_IFLNK else {
                resolved.append(part)
                continue
            }
            var pst = stat()
            guard stat(parent, &pst) == 0, pst.st_uid == 0, pst.st_mode & 0o022 == 0 else {
                throw SandboxError(.invalidPolicy, "\(origin): bind source \(source): refusing to follow the symbolic link \(path): its directory \(parent) is writable by someone other than root (uid \(pst.st_uid), mode \(String(pst.st_mode & 0o7777, radix: 8)))")
            }
            followed += 1
            guard followed <= 40 else { throw SandboxError(.invalidPolicy, "\(origin): bind source \(source): too many symbolic links", errno: ELOOP) }
            let target = try readLink(path)
            if target.hasPrefix("/") { resolved.removeAll() }
            pending = target.split(separator: "/").map(String.init) + pending
        }
        return "/" + resolved.joined(separator: "/")
    }

    static func depth(_ path: String) -> Int { path == "/" ? 0 : path.split(separator: "/").count }

    private static func readLink(_ path: String) throws(SandboxError) -> String {
        var buf = [CChar](repeating: 0, count: 4097)
        let n = readlink(path, &buf, 4096)
        guard n > 0 else { throw SandboxError(.sourceMissing, "readlink \(path): \(String(cString: strerror(errno)))", errno: errno) }
        return String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// Sandbox identifiers: `sbx-` and 12 random hex digits; they name cgroups and audit records.
public enum SandboxID {
    public static func make() -> String {
        var rng = SystemRandomNumberGenerator()
        let v = rng.next() & 0xFFFF_FFFF_FFFF
        let hex = String(v, radix: 16)
        return "sbx-" + String(repeating: "0", count: 12 - hex.count) + hex
    }
}
