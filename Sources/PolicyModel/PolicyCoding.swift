import SupervisorIO
import WireCoding

// A compact binary form of `Policy`, for the loaded-policy cache (`PolicyLoader.usesCache`):
// decoding one takes microseconds, where loading its YAML layers takes about a millisecond of
// every one-shot `sandbox exec`.
//
// Every field of every type is written, in declaration order, by exhaustive code: a new enum
// case does not compile until it is coded here, and PolicyCodingTests counts each struct's
// stored properties, so a new field fails a test until it is coded too. A cached policy that
// silently lost a field would be a sandbox weaker than its policy file says.

public enum PolicyCoding {
    /// Bumped whenever the layout changes (older entries then miss: their key differs).
    public static let version = 4

    public static func encode(_ p: Policy) -> [UInt8] {
        var w = ByteWriter()
        w.string(p.name)
        w.optional(p.description) { $0.string($1) }
        w.strings(p.lineage)
        w.count(p.mounts.count)
        for m in p.mounts { w.mount(m) }
        w.u32(p.identity.uid)
        w.u32(p.identity.gid)
        w.u32(p.identity.hostUID)
        w.u32(p.identity.hostGID)
        w.u32(p.identity.span)
        w.string(p.identity.hostname)
        w.string(p.seccomp.profile)
        switch p.seccomp.defaultAction {
        case .errno(let e): w.u8(0); w.u32(UInt32(bitPattern: e))
        case .kill: w.u8(1)
        }
        w.strings(p.seccomp.allow)
        w.strings(p.seccomp.deny)
        w.strings(p.seccomp.quiet)
        w.u8(p.seccomp.netlinkRoute ? 1 : 0)
        w.string(p.network.mode.rawValue)
        w.strings(p.network.allow)
        for v in [p.limits.nofile, p.limits.nproc, p.limits.fsize, p.limits.cpuSeconds, p.limits.memory, p.limits.pids] {
            w.optional(v) { $0.u64($1) }
        }
        w.optional(p.limits.cpus) { $0.u64($1.bitPattern) }
        w.optional(p.limits.timeoutSeconds) { $0.u64($1.bitPattern) }
        let env = p.env.set.sorted { $0.key < $1.key }
        w.count(env.count)
        for (k, v) in env { w.string(k); w.string(v) }
        w.strings(p.env.pass)
        w.string(p.chdir)
        w.string(p.landlock.rawValue)
        w.strings(p.seccomp.watchLinks)
        return w.bytes
    }

    /// The policy `encode` wrote, or nil for bytes that are not exactly one.
    public static func decode(_ bytes: [UInt8]) -> Policy? {
        var r = ByteReader(bytes)
        guard let p = r.policy(), r.atEnd else { return nil }
        return p
    }
}

extension ByteWriter {
    mutating func mount(_ m: MountSpec) {
        switch m.kind {
        case .readOnly(let source): u8(0); string(source)
        case .readWrite(let source): u8(1); string(source)
        case .tmpfs(let size, let mode):
            u8(2)
            optional(size) { $0.u64($1) }
            u32(mode)
        case .hide: u8(3)
        case .symlink(let target): u8(4); string(target)
        }
        string(m.destination)
        bool(m.optional)
        bool(m.keepSymlink)
        bool(m.noSymlinks)
        bool(m.userland)
        optional(m.location) { w, l in
            w.string(l.file)
            w.u64(UInt64(bitPattern: Int64(l.line)))
            w.u64(UInt64(bitPattern: Int64(l.column)))
        }
    }
}

extension ByteReader {
    mutating func mount() -> MountSpec? {
        let kind: MountSpec.Kind
        switch u8() {
        case 0: guard let s = string() else { return nil }; kind = .readOnly(source: s)
        case 1: guard let s = string() else { return nil }; kind = .readWrite(source: s)
        case 2:
            guard let size = optional({ $0.u64() }), let mode = u32() else { return nil }
            kind = .tmpfs(size: size, mode: mode)
        case 3: kind = .hide
        case 4: guard let t = string() else { return nil }; kind = .symlink(target: t)
        default: return nil
        }
        guard let destination = string(), let optional = bool(), let keepSymlink = bool(), let noSymlinks = bool(),
              let userland = bool(),
              let location = self.optional({ r -> SourceLocation? in
                  guard let file = r.string(), let line = r.u64(), let column = r.u64() else { return nil }
                  return SourceLocation(file: file, line: Int(Int64(bitPattern: line)), column: Int(Int64(bitPattern: column)))
              }) else { return nil }
        return MountSpec(kind: kind, destination: destination, optional: optional, keepSymlink: keepSymlink,
                         noSymlinks: noSymlinks, userland: userland, location: location)
    }

    mutating func policy() -> Policy? {
        guard let name = string(), let description = optional({ $0.string() }), let lineage = strings(),
              let mountCount = count() else { return nil }
        var mounts: [MountSpec] = []
        for _ in 0..<mountCount {
            guard let m = mount() else { return nil }
            mounts.append(m)
        }
        guard let uid = u32(), let gid = u32(), let hostUID = u32(), let hostGID = u32(), let span = u32(), let hostname = string(),
              let profile = string() else { return nil }
        let defaultAction: SeccompAction
        switch u8() {
        case 0: guard let e = u32() else { return nil }; defaultAction = .errno(Int32(bitPattern: e))
        case 1: defaultAction = .kill
        default: return nil
        }
        guard let allow = strings(), let deny = strings(), let quiet = strings(), let netlink = u8(), netlink <= 1,
              let modeName = string(), let mode = NetworkSpec.Mode(rawValue: modeName), let networkAllow = strings() else { return nil }
        var counts: [UInt64?] = []
        for _ in 0..<6 {
            guard let v = optional({ $0.u64() }) else { return nil }
            counts.append(v)
        }
        guard let cpus = optional({ $0.u64() }), let timeout = optional({ $0.u64() }), let envCount = count() else { return nil }
        var set: [String: String] = [:]
        for _ in 0..<envCount {
            guard let k = string(), let v = string(), set.updateValue(v, forKey: k) == nil else { return nil }
        }
        guard let pass = strings(), let chdir = string(), let landlockName = string(),
              let landlock = LandlockMode(rawValue: landlockName), let watchLinks = strings() else { return nil }
        return Policy(
            name: name, description: description, lineage: lineage, mounts: mounts,
            identity: Identity(uid: uid, gid: gid, hostUID: hostUID, hostGID: hostGID, span: span, hostname: hostname),
            seccomp: SeccompSpec(profile: profile, defaultAction: defaultAction, allow: allow, deny: deny, quiet: quiet, netlinkRoute: netlink == 1,
                                 watchLinks: watchLinks),
            network: NetworkSpec(mode: mode, allow: networkAllow),
            limits: Limits(nofile: counts[0], nproc: counts[1], fsize: counts[2], cpuSeconds: counts[3], memory: counts[4],
                           pids: counts[5], cpus: cpus.map { Double(bitPattern: $0) }, timeoutSeconds: timeout.map { Double(bitPattern: $0) }),
            env: EnvSpec(set: set, pass: pass), chdir: chdir, landlock: landlock)
    }
}
