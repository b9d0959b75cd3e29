import Sandbox
import SandboxPolicy

/// `autoharness policy diff A B`: what one resolved policy allows that the other does not, for
/// an admin reviewing a change to a policy (or a custom one against the shipped one it
/// replaces). Each line is one permission: `+` what B allows and A does not, `-` what A allows
/// and B does not, `~` what differs without either allowing more (a mount's source, the
/// working directory, the ids).
public enum PolicyDiff {
    public struct Line: Sendable, Equatable, CustomStringConvertible {
        public enum Side: String, Sendable { case onlyB = "+", onlyA = "-", differs = "~" }
        public var side: Side
        public var text: String
        public var description: String { "\(side.rawValue) \(text)" }
    }

    /// `allowedA`/`allowedB`: the system calls each compiled filter allows (`CompiledFilter.allowedNames`).
    public static func lines(_ a: Policy, _ b: Policy, allowedA: Set<String>, allowedB: Set<String>) -> [Line] {
        var out: [Line] = []
        func more(_ bMore: Bool, _ text: String) { out.append(Line(side: bMore ? .onlyB : .onlyA, text: text)) }
        for name in allowedB.subtracting(allowedA).sorted() { more(true, "syscall \(name)") }
        for name in allowedA.subtracting(allowedB).sorted() { more(false, "syscall \(name)") }

        // Mounts by destination: visible, writable, from where.
        let (ma, mb) = (Dictionary(a.mounts.map { ($0.destination, $0) }, uniquingKeysWith: { _, l in l }),
                        Dictionary(b.mounts.map { ($0.destination, $0) }, uniquingKeysWith: { _, l in l }))
        for destination in Set(ma.keys).union(mb.keys).sorted() {
            let (x, y) = (ma[destination], mb[destination])
            let (rx, ry) = (reach(x), reach(y))
            if rx != ry {
                more(ry > rx, "mount \(destination): A \(shown(x)), B \(shown(y))")
            } else if x?.source != y?.source || x?.kindName != y?.kindName {
                out.append(Line(side: .differs, text: "mount \(destination): A \(shown(x)), B \(shown(y))"))
            }
        }

        // Links into a watched directory are recorded as they are made; unwatched, they are not.
        for d in Set(a.seccomp.watchLinks).subtracting(b.seccomp.watchLinks).sorted() { more(true, "links into \(d) made without a record (seccomp.watch_links)") }
        for d in Set(b.seccomp.watchLinks).subtracting(a.seccomp.watchLinks).sorted() { more(false, "links into \(d) made without a record (seccomp.watch_links)") }

        // The network: its mode, then the hosts a proxy lets through.
        let order: [NetworkSpec.Mode] = [.none, .loopback, .proxy]
        let (na, nb) = (order.firstIndex(of: a.network.mode) ?? 0, order.firstIndex(of: b.network.mode) ?? 0)
        if na != nb { more(nb > na, "network \(nb > na ? b.network.mode.rawValue : a.network.mode.rawValue) (the other: \(nb > na ? a.network.mode.rawValue : b.network.mode.rawValue))") }
        for host in Set(b.network.allow).subtracting(a.network.allow).sorted() { more(true, "network host \(host)") }
        for host in Set(a.network.allow).subtracting(b.network.allow).sorted() { more(false, "network host \(host)") }

        // Limits: none is more than any; a larger one is more.
        func limit(_ name: String, _ x: Double?, _ y: Double?, _ show: (Double) -> String) {
            guard x != y else { return }
            let bMore = y == nil || (x != nil && y! > x!)
            more(bMore, "\(name): A \(x.map(show) ?? "none"), B \(y.map(show) ?? "none")")
        }
        let (la, lb) = (a.limits, b.limits)
        let bytes = { (v: Double) in ByteSize.format(UInt64(v)) }
        let plain = { (v: Double) in v == v.rounded() ? String(Int64(v)) : String(v) }
        limit("memory", la.memory.map { Double($0) }, lb.memory.map { Double($0) }, bytes)
        limit("pids", la.pids.map { Double($0) }, lb.pids.map { Double($0) }, plain)
        limit("cpus", la.cpus, lb.cpus, plain)
        limit("timeout", la.timeoutSeconds, lb.timeoutSeconds, plain)
        limit("nofile", la.nofile.map { Double($0) }, lb.nofile.map { Double($0) }, plain)
        limit("nproc", la.nproc.map { Double($0) }, lb.nproc.map { Double($0) }, plain)
        limit("fsize", la.fsize.map { Double($0) }, lb.fsize.map { Double($0) }, bytes)
        limit("cpu_seconds", la.cpuSeconds.map { Double($0) }, lb.cpuSeconds.map { Double($0) }, plain)

        // Landlock: off allows what auto may not, auto what required does not start without.
        let strictness: [LandlockMode: Int] = [.off: 0, .auto: 1, .required: 2]
        let (sa, sb) = (strictness[a.landlock] ?? 0, strictness[b.landlock] ?? 0)
        if sa != sb { more(sb < sa, "landlock: A \(a.landlock.rawValue), B \(b.landlock.rawValue)") }

        // The environment: variables passed in from the supervisor's, constants set.
        for name in Set(b.env.pass).subtracting(a.env.pass).sorted() { more(true, "env pass \(name)") }
        for name in Set(a.env.pass).subtracting(b.env.pass).sorted() { more(false, "env pass \(name)") }
        for key in Set(a.env.set.keys).union(b.env.set.keys).sorted() where a.env.set[key] != b.env.set[key] {
            out.append(Line(side: .differs, text: "env set \(key): A \(a.env.set[key].map { "\"\($0)\"" } ?? "unset"), B \(b.env.set[key].map { "\"\($0)\"" } ?? "unset")"))
        }

        let (ia, ib) = (a.identity, b.identity)
        if (ia.uid, ia.gid, ia.hostUID, ia.hostGID, ia.span) != (ib.uid, ib.gid, ib.hostUID, ib.hostGID, ib.span) {
            func ids(_ i: Identity) -> String { "\(i.uid):\(i.gid) as host \(i.hostUID):\(i.hostGID)\(i.span > 1 ? " (+\(i.span - 1))" : "")" }
            out.append(Line(side: .differs, text: "identity: A \(ids(ia)), B \(ids(ib))"))
        }
        if a.chdir != b.chdir { out.append(Line(side: .differs, text: "chdir: A \(a.chdir), B \(b.chdir)")) }
        return out
    }

    /// How much a mount gives the sandbox: nothing (absent or hidden), something fixed (a
    /// symlink, an empty tmpfs), a host path to read, one to write.
    static func reach(_ m: MountSpec?) -> Int {
        switch m?.kind {
        case nil, .hide?: return 0
        case .symlink?, .tmpfs?: return 1
        case .readOnly?: return 2
        case .readWrite?: return 3
        }
    }

    static func shown(_ m: MountSpec?) -> String {
        guard let m else { return "absent" }
        switch m.kind {
        case .readOnly(let s): return "ro from \(s)"
        case .readWrite(let s): return "rw from \(s)"
        case .tmpfs: return "tmpfs"
        case .hide: return "hidden"
        case .symlink(let t): return "symlink to \(t)"
        }
    }
}
