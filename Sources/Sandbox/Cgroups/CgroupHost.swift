import Glibc
import PolicyModel

/// The cgroup hierarchies visible to this process, where this process sits in them, and
/// where sandbox cgroups go.
///
/// cgroup v2 forbids "internal processes": a cgroup other than the root either holds
/// processes or hands controllers to its children (`cgroup.subtree_control`), never both.
/// A supervisor started in a delegated cgroup (a systemd service with `Delegate=yes`, a
/// `systemd-run --scope -p Delegate=yes` shell, a container's cgroup-namespace root) is such
/// an internal process, so `delegated()` does what container runtimes' entrypoints do: it
/// moves the processes of that cgroup into a leaf, `autoharness-supervisor`, enables the
/// controllers for the children, and sandbox cgroups are created beside the leaf. Nothing is
/// written outside the cgroup the supervisor found itself in (or, when it was started inside
/// an earlier supervisor's leaf, that leaf's parent, which the earlier one delegated).
public struct CgroupHost: Sendable {
    public struct Hierarchy: Sendable {
        /// The directory sandbox cgroups are created in: our own cgroup, or for v2 the
        /// parent of our `autoharness-supervisor` leaf.
        public var ownDirectory: String
        /// v1: the hierarchy's controllers. v2: those enabled for children
        /// (`cgroup.subtree_control` of `ownDirectory`).
        public var controllers: Set<String>
        /// v2 only: those the parent hands to `ownDirectory` (`cgroup.controllers`), i.e.
        /// what could be enabled.
        public var available: Set<String>
        public init(ownDirectory: String, controllers: Set<String>, available: Set<String> = []) {
            self.ownDirectory = ownDirectory
            self.controllers = controllers
            self.available = available
        }
    }
    /// cgroup v1 hierarchies keyed by controller.
    public var v1: [String: Hierarchy]
    /// The cgroup v2 (unified) hierarchy, if mounted and our cgroup is visible in it.
    public var v2: Hierarchy?
    /// What `delegated()` changed, for the one start-up line that says so; nil if nothing.
    public var delegation: String?
    /// Why `delegated()` could not enable a controller that is available (e.g. a read-only
    /// cgroupfs in a container), for the error that refuses a limit.
    public var delegationProblem: String?

    /// The leaf the supervisor moves into so that its own cgroup may have children with
    /// controllers.
    public static let supervisorLeaf = "autoharness-supervisor"
    /// The controllers sandboxes use.
    public static let controllersUsed = ["memory", "pids", "cpu"]

    public init(v1: [String: Hierarchy], v2: Hierarchy?) {
        self.v1 = v1
        self.v2 = v2
    }

    /// This process's hierarchies, delegated once on first use (the first sandbox launch):
    /// a supervisor does not move between cgroups afterwards.
    public static let current = detect().delegated()

    /// Reads /proc/self/cgroup and /proc/self/mountinfo. Changes nothing.
    public static func detect() -> CgroupHost {
        let own = memberships()
        var v1: [String: Hierarchy] = [:]
        var v2: Hierarchy?
        for mount in mounts() {
            if mount.type == "cgroup2", v2 == nil, let p = own[""], var d = mount.directory(of: p) {
                // Started inside an earlier supervisor's leaf (e.g. from a shell it moved
                // there): sandboxes go beside the leaf, where that supervisor enabled the
                // controllers, not below it.
                if d != mount.mountPoint, d.hasSuffix("/" + supervisorLeaf) {
                    d = String(d.dropLast(supervisorLeaf.count + 1))
                }
                v2 = Hierarchy(ownDirectory: d, controllers: words(d + "/cgroup.subtree_control"),
                               available: words(d + "/cgroup.controllers"))
            } else if mount.type == "cgroup" {
                for c in ["memory", "pids", "cpu", "freezer"] where mount.options.contains(c) {
                    if let p = own[c], let d = mount.directory(of: p), v1[c] == nil {
                        v1[c] = Hierarchy(ownDirectory: d, controllers: Set(mount.options))
                    }
                }
            }
        }
        return CgroupHost(v1: v1, v2: v2)
    }

    /// The cgroups `process` ("self" or a pid) is in, from /proc/PROCESS/cgroup: "" for the
    /// v2 hierarchy, each v1 controller by name (a v1 hierarchy's named ones as "name=X").
    public static func memberships(of process: String = "self") -> [String: String] {
        var own: [String: String] = [:]
        for line in readText("/proc/\(process)/cgroup").split(separator: "\n") {
            let f = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard f.count == 3 else { continue }
            let path = String(f[2])
            if f[1].isEmpty { own[""] = path } else {
                for c in f[1].split(separator: ",") { own[String(c)] = path }
            }
        }
        return own
    }

    /// A cgroup filesystem mounted in this process's mount namespace.
    public struct Mount: Sendable {
        /// "cgroup2", or "cgroup" for a v1 hierarchy.
        public var type: String
        /// Its super options: a v1 hierarchy's controllers among them.
        public var options: [String]
        /// The cgroup the mount shows at `mountPoint` (a bind of a subtree shows less than `/`).
        public var root: String
        public var mountPoint: String

        public init(type: String, options: [String], root: String, mountPoint: String) {
            (self.type, self.options, self.root, self.mountPoint) = (type, options, root, mountPoint)
        }

        /// The directory that shows cgroup `path` of this hierarchy, if the mount shows it.
        public func directory(of path: String) -> String? {
            guard path == root || path.hasPrefix(root == "/" ? "/" : root + "/") else { return nil }
            let rel = root == "/" ? path : String(path.dropFirst(root.count))
            return rel == "/" || rel.isEmpty ? mountPoint : mountPoint + rel
        }
    }

    /// The directory of the first of `mounts` that shows cgroup `path`: of the v2 hierarchy
    /// (`controller` nil), or of the v1 hierarchy holding `controller`.
    public static func directory(of path: String, controller: String? = nil, in mounts: [Mount]) -> String? {
        mounts.lazy.compactMap { m in
            (controller.map { m.type == "cgroup" && m.options.contains($0) } ?? (m.type == "cgroup2")) ? m.directory(of: path) : nil
        }.first
    }

    /// A mountinfo path field as the path it is: the kernel writes a space, tab, newline and
    /// backslash in one as `\040`, `\011`, `\012` and `\134`.
    static func unescaped(_ field: Substring) -> String {
        guard field.contains("\\") else { return String(field) }
        var bytes: [UInt8] = []
        let u = Array(field.utf8)
        var i = 0
        while i < u.count {
            if u[i] == UInt8(ascii: "\\"), i + 3 < u.count, let v = UInt8(String(decoding: u[(i + 1)...(i + 3)], as: UTF8.self), radix: 8) {
                bytes.append(v)
                i += 4
            } else {
                bytes.append(u[i])
                i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The cgroup filesystems in /proc/self/mountinfo, in its order.
    public static func mounts() -> [Mount] {
        var out: [Mount] = []
        for line in readText("/proc/self/mountinfo").split(separator: "\n") {
            // `PRE - POST`; the optional fields in PRE end at a lone "-" (proc(5) mountinfo).
            let fields = line.split(separator: " ")
            guard let dash = fields.firstIndex(of: "-") else { continue }
            let pre = fields[..<dash]
            let post = Array(fields[(dash + 1)...])
            guard pre.count >= 5, post.count >= 3, post[0] == "cgroup2" || post[0] == "cgroup" else { continue }
            out.append(Mount(type: String(post[0]), options: post[2].split(separator: ",").map(String.init),
                             root: unescaped(pre[pre.startIndex + 3]), mountPoint: unescaped(pre[pre.startIndex + 4])))
        }
        return out
    }

    /// Ends the sandboxes a dead supervisor left (a kill -9 mid-gate leaves the coding agent
    /// frozen) and returns a line for each; once per process, also done before the first
    /// launch. Call it at start-up.
    public func endOrphanedSandboxes() -> [String] { SandboxCgroup.sweepNow(self) }

    /// Enables the v2 controllers sandboxes use and that are available but not yet enabled
    /// for our cgroup's children, moving the cgroup's processes into the supervisor leaf
    /// first if the kernel requires it (EBUSY: the no-internal-processes rule). A v1
    /// hierarchy that already offers a controller is left as it is (hybrid hosts).
    public func delegated() -> CgroupHost {
        guard var v2 else { return self }
        var out = self
        let missing = Self.controllersUsed.filter {
            v2.available.contains($0) && !v2.controllers.contains($0) && v1[$0] == nil
        }
        guard !missing.isEmpty else { return self }
        let dir = v2.ownDirectory
        let request = missing.map { "+" + $0 }.joined(separator: " ")
        var moved: [pid_t] = []
        var err = Self.writeErrno(dir + "/cgroup.subtree_control", request)
        if err == EBUSY {
            let r = Self.moveProcesses(of: dir, into: dir + "/" + Self.supervisorLeaf)
            moved = r.moved
            if let problem = r.problem {
                out.delegationProblem = problem
                return out
            }
            err = Self.writeErrno(dir + "/cgroup.subtree_control", request)
        }
        if err != 0 {
            out.delegationProblem = "enabling \(missing.joined(separator: " ")) in \(dir)/cgroup.subtree_control failed: \(String(cString: strerror(err)))"
                + (err == EROFS ? " (the cgroup filesystem is mounted read-only here)" : "")
            return out
        }
        v2.controllers = Self.words(dir + "/cgroup.subtree_control")
        out.v2 = v2
        let movedText = moved.isEmpty ? "" :
            "moved \(moved.count == 1 ? "this process" : "\(moved.count) processes (\(moved.map(String.init).joined(separator: " ")))") into \(dir)/\(Self.supervisorLeaf), "
        out.delegation = "cgroup v2: \(movedText)enabled \(missing.joined(separator: " ")) for sandboxes under \(dir)"
        return out
    }

    /// Moves every process of `dir` into `leaf` (created if needed): `first` (ours), then the
    /// rest until a re-read finds the cgroup empty (a process may fork while we move).
    /// Returns the pids moved and, if the cgroup could not be emptied, why.
    static func moveProcesses(of dir: String, into leaf: String, first: pid_t = getpid()) -> (moved: [pid_t], problem: String?) {
        if mkdir(leaf, 0o755) != 0 && errno != EEXIST {
            return ([], "creating the supervisor's leaf cgroup \(leaf) failed: \(String(cString: strerror(errno)))")
        }
        var moved: [pid_t] = []
        var pending = [first]
        for _ in 0..<50 {
            for p in pending {
                let e = writeErrno(leaf + "/cgroup.procs", "\(p)")
                if e == 0 { moved.append(p) } else if e != ESRCH {
                    return (moved, "moving pid \(p) from \(dir) into \(leaf) failed: \(String(cString: strerror(e)))")
                }
            }
            pending = readText(dir + "/cgroup.procs").split(separator: "\n").compactMap { pid_t($0) }
            if pending.isEmpty { return (moved, nil) }
        }
        return (moved, "\(dir) still holds processes \(pending.map(String.init).joined(separator: " ")) after moving them into \(leaf) 50 times")
    }

    /// Where each requested limit would be enforced, without creating anything. With
    /// `assumingDelegation`, a v2 controller that is available but not yet enabled counts
    /// (what `policy show` reports before any sandbox ran).
    public func plan(for limits: Limits, assumingDelegation: Bool = false) -> [(controller: String, version: Int, parent: String)] {
        var out: [(String, Int, String)] = []
        for c in Self.requested(limits) {
            if let v2, v2.controllers.contains(c) || (assumingDelegation && v2.available.contains(c) && v1[c] == nil) {
                out.append((c, 2, v2.ownDirectory))
            } else if let h = v1[c] {
                out.append((c, 1, h.ownDirectory))
            }
        }
        return out
    }

    /// Where a freezable sandbox's freezer cgroup goes: the unified hierarchy where it is
    /// mounted (`cgroup.freeze` is core, needs no controller, and frozen tasks still die by
    /// SIGKILL), else the v1 freezer.
    func freezerParent() -> (version: Int, parent: String)? {
        if let v2 { return (2, v2.ownDirectory) }
        if let h = v1["freezer"] { return (1, h.ownDirectory) }
        return nil
    }

    static func requested(_ limits: Limits) -> [String] {
        var r: [String] = []
        if limits.memory != nil { r.append("memory") }
        if limits.pids != nil { r.append("pids") }
        if limits.cpus != nil { r.append("cpu") }
        return r
    }

    /// Why `controller` cannot be used here, and what would fix it.
    public func unusable(_ controller: String) -> String {
        var state: [String] = []
        if let v2 {
            let avail = v2.available.sorted().joined(separator: " ")
            let enabled = v2.controllers.sorted().joined(separator: " ")
            state.append("cgroup v2 at \(v2.ownDirectory): available [\(avail)], enabled for children [\(enabled)]")
        } else {
            state.append("cgroup v2: not mounted")
        }
        state.append("cgroup v1 \(controller): not mounted")
        var text = "no usable \(controller) controller (\(state.joined(separator: "; ")))"
        if let delegationProblem, v2?.available.contains(controller) == true {
            text += "; \(delegationProblem). Fix: give the supervisor a writable cgroup filesystem (in a container: `--privileged`, or mount /sys/fs/cgroup read-write; see container/README.md)"
        } else if v2 != nil {
            text += ". Fix: the cgroup this supervisor runs in has not been given the \(controller) controller by its parent; "
                + "on a systemd host run it as a service with Delegate=yes or as `systemd-run -p Delegate=yes --scope autoharness …`; "
                + "in a container, give it its own cgroup namespace and a writable /sys/fs/cgroup (see container/README.md); "
                + "`autoharness doctor` shows the host's state"
        }
        return text
    }

    static func words(_ path: String) -> Set<String> {
        Set(readText(path).split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init))
    }

    /// Writes `value` to a cgroupfs file; 0 or the errno.
    static func writeErrno(_ path: String, _ value: String) -> Int32 {
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return errno }
        defer { close(fd) }
        let n = value.withCString { Glibc.write(fd, $0, strlen($0)) }
        return n >= 0 ? 0 : errno
    }
}
