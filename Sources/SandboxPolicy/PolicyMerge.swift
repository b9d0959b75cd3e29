// `extends:` — folding a chain of policy files into one — and the rules that can only be
// checked on the result: the final mount list, `chdir` against it, the network allowlist
// against the final mode.

/// The chain's files merged base-first, with the locations the final checks point at.
struct MergedLayers {
    var description: String?
    var chdir: Located<ResolvedPath>?
    var landlock = LandlockMode.auto
    var mounts: [ParsedMount] = []
    var identity = Identity()
    var seccomp = SeccompSpec()
    var networkMode = NetworkSpec.Mode.none
    var networkModeLocation: SourceLocation?
    var networkAllow: Located<[String]>?
    var limits = Limits()
    var env = EnvSpec()
    /// Where the final values were set (`PolicyLayer.places`), the last file's word on each.
    var places: [String: SourceLocation] = [:]
    /// What a file takes back that a policy it extends closed (`policy lint`): a syscall the
    /// parent denies allowed again, a read-only or hidden path made writable or visible, the
    /// Landlock wall lowered, a memory or pids limit lifted.
    var widenings: [PolicyError] = []
    /// How many files were applied so far (the first has no parent to widen).
    private var applied = 0

    /// Applies `child` on top of what has been merged so far. Errors are contradictions between
    /// the child and what it inherits.
    mutating func apply(_ child: PolicyLayer, errors: inout [PolicyError]) {
        if applied > 0 { noteWidenings(child) }
        applied += 1
        places.merge(child.places) { _, new in new }
        if let description = child.description { self.description = description }
        if let chdir = child.chdir { self.chdir = chdir }
        if let landlock = child.landlock { self.landlock = landlock }
        mergeMounts(child.mounts, errors: &errors)

        for key in child.identityKeys {
            switch key {
            case "uid": identity.uid = child.identity.uid
            case "gid": identity.gid = child.identity.gid
            case "host_uid": identity.hostUID = child.identity.hostUID
            case "host_gid": identity.hostGID = child.identity.hostGID
            default: identity.hostname = child.identity.hostname
            }
        }

        if let profile = child.seccompProfile { seccomp.profile = profile }
        if let action = child.defaultAction { seccomp.defaultAction = action }
        // The child has the last word on each name: allowing removes an inherited deny and
        // denying removes an inherited allow.
        let childNames = Set(child.seccompAllow + child.seccompDeny + child.seccompQuiet)
        seccomp.allow = union(seccomp.allow.filter { !childNames.contains($0) }, child.seccompAllow)
        seccomp.deny = union(seccomp.deny.filter { !childNames.contains($0) }, child.seccompDeny)
        seccomp.quiet = union(seccomp.quiet.filter { !childNames.contains($0) }, child.seccompQuiet)
        seccomp.watchLinks = union(seccomp.watchLinks, child.seccompWatchLinks)

        if let mode = child.networkMode {
            places["network.mode"] = mode.location
            networkMode = mode.value
            networkModeLocation = mode.location
            // An allowlist means nothing without the proxy; dropping it when the child turns
            // the proxy off keeps the child from inheriting an error it did not write.
            if mode.value != .proxy && child.networkAllow == nil { networkAllow = nil }
        }
        if let allow = child.networkAllow { networkAllow = allow }

        let limitFields: [(String, WritableKeyPath<Limits, UInt64?>)] = [
            ("nofile", \.nofile), ("nproc", \.nproc), ("fsize", \.fsize), ("cpu_seconds", \.cpuSeconds),
            ("memory", \.memory), ("pids", \.pids),
        ]
        for (key, keyPath) in limitFields where child.limitKeys.contains(key) {
            limits[keyPath: keyPath] = child.limits[keyPath: keyPath]
        }
        if child.limitKeys.contains("cpus") { limits.cpus = child.limits.cpus }
        if child.limitKeys.contains("timeout") { limits.timeoutSeconds = child.limits.timeoutSeconds }

        // Same last-word rule as seccomp: setting a name stops passing it, and vice versa.
        let childPass = Set(child.envPass)
        env.set = env.set.filter { !childPass.contains($0.key) }.merging(child.envSet) { _, new in new }
        env.pass = union(env.pass.filter { child.envSet[$0] == nil }, child.envPass)
    }

    /// What `child` reopens of what has been merged so far (its parents), into `widenings`.
    private mutating func noteWidenings(_ child: PolicyLayer) {
        let at = { (key: String) in child.places[key] ?? SourceLocation(file: child.file, line: 1) }
        for name in child.seccompAllow where seccomp.deny.contains(name) {
            widenings.append(PolicyError("seccomp.allow re-allows \(name), which a policy it extends denies", at: at("seccomp.allow.\(name)")))
        }
        for name in child.seccompQuiet where seccomp.deny.contains(name) {
            widenings.append(PolicyError("seccomp.quiet takes \(name), which a policy it extends denies (and so reports), out of the audit", at: at("seccomp.quiet.\(name)")))
        }
        let strength: [LandlockMode: Int] = [.off: 0, .auto: 1, .required: 2]
        if let mode = child.landlock, strength[mode]! < strength[landlock]! {
            widenings.append(PolicyError("filesystem.landlock \(mode.rawValue) lowers the \(landlock.rawValue) of a policy it extends", at: at("landlock")))
        }
        for (key, value) in [("memory", limits.memory), ("pids", limits.pids)] where value != nil && child.limitKeys.contains(key) {
            let lifted = key == "memory" ? child.limits.memory == nil : child.limits.pids == nil
            if lifted { widenings.append(PolicyError("limits.\(key): none lifts the limit a policy it extends sets", at: at("limits.\(key)"))) }
        }
        let inherited = Dictionary(mounts.map { ($0.destination, $0) }, uniquingKeysWith: { first, _ in first })
        for mount in child.mounts {
            guard let parent = inherited[mount.destination] else { continue }
            switch (parent.spec.kind, mount.spec.kind) {
            case (.readOnly, .readWrite), (.tmpfs, .readWrite), (.symlink, .readWrite):
                widenings.append(PolicyError("rw \(mount.destination) makes writable what a policy it extends mounts \(parent.spec.kindName) (at \(parent.location))", at: mount.location))
            case (.hide, .readOnly), (.hide, .readWrite):
                widenings.append(PolicyError("\(mount.spec.kindName) \(mount.destination) exposes what a policy it extends hides (at \(parent.location))", at: mount.location))
            default: break
            }
        }
    }

    /// The parent's list, then the child's; a child entry with an inherited destination takes
    /// that entry's place, which is how a child re-grants or narrows a path its parent mounts.
    private mutating func mergeMounts(_ childMounts: [ParsedMount], errors: inout [PolicyError]) {
        var position = Dictionary(mounts.enumerated().map { ($1.destination, $0) }, uniquingKeysWith: { first, _ in first })
        for mount in childMounts {
            guard let index = position[mount.destination] else {
                position[mount.destination] = mounts.count
                mounts.append(mount)
                continue
            }
            let inherited = mounts[index]
            if mount.spec.kind == .hide && inherited.spec.kind != .hide {
                errors.append(PolicyError(
                    "hide \(mount.destination) is at exactly the destination of the inherited \(inherited.spec.kindName) mount at \(inherited.location): hide punches holes strictly inside a bind",
                    at: mount.location))
                continue
            }
            mounts[index] = mount
        }
    }

    private func union(_ a: [String], _ b: [String]) -> [String] {
        let inA = Set(a)
        return a + b.filter { !inA.contains($0) }
    }

    // MARK: - Checks on the final policy

    /// Rules about the finished mount list and its relation to `chdir` and the network.
    /// Entries whose destination still has an unresolved placeholder are left out: nothing
    /// can be said about where they land.
    func validate(errors: inout [PolicyError]) {
        let concrete = mounts.filter(\.isConcrete)
        // Every rule below is about one mount and the mounts above or below it: found for all
        // of them at once (`PathTree`), not by comparing each pair.
        let above = PathTree.ancestors(concrete.map(\.destination))
        let below = PathTree.descendants(ancestors: above)
        for (index, mount) in concrete.enumerated() {
            if let link = above[index].filter({ concrete[$0].mayBeSymlink }).min().map({ concrete[$0] }) {
                // The launcher would have to create a mount point through a symlink, i.e.
                // somewhere the link text decides, not the policy.
                let what = link.spec.keepSymlink
                    ? "which may be a symlink (keep_symlink at \(link.location))"
                    : "which is a symlink (at \(link.location))"
                errors.append(PolicyError(
                    "\(mount.spec.kindName) \(mount.destination) lies under \(link.destination), \(what)",
                    at: mount.location))
                continue
            }
            if mount.spec.kind == .hide {
                checkHide(mount, index: index, above: above[index].map { ($0, concrete[$0]) }, errors: &errors)
            }
            // Mounts apply in order: a later mount over an ancestor buries the earlier entry,
            // which for a hide would silently re-expose what it hid.
            for buried in below[index].prefix(while: { $0 < index }).map({ concrete[$0] }) {
                errors.append(PolicyError(
                    "\(mount.spec.kindName) \(mount.destination) would be mounted over the earlier \(buried.spec.kindName) \(buried.destination) (at \(buried.location)) and hide it; list \(mount.destination) before it",
                    at: mount.location))
            }
        }

        if let chdir, chdir.value.isConcrete, chdir.value.path != "/" {
            // At or under a mount, or a directory on the way to one (the launcher creates
            // those in the read-only root, so they exist but cannot be written).
            let inside = mounts.contains {
                SandboxPath.isAtOrUnder(chdir.value.path, $0.destination)
                    || SandboxPath.isAtOrUnder($0.destination, chdir.value.path)
            }
            // The root itself holds only mount points; a working directory there would be an
            // empty read-only directory the launcher happened to create.
            if !inside && mounts.allSatisfy(\.isConcrete) {
                errors.append(PolicyError(
                    "chdir \(chdir.value.path) is not inside any mount destination and holds none (mount something at, above or below it)",
                    at: chdir.location))
            }
        }

        if let allow = networkAllow, !allow.value.isEmpty, networkMode != .proxy {
            let modeNote = networkModeLocation.map { " (mode \(networkMode.rawValue) set at \($0))" } ?? " (mode is none by default)"
            errors.append(PolicyError(
                "network.allow needs network mode proxy: only the proxy can enforce a host allowlist\(modeNote)",
                at: allow.location))
        }
    }

    /// A hide covers something an earlier bind provides: the nearest earlier mount above it
    /// must be a ro or rw bind (a tmpfs starts empty, and outside any mount is the bare root).
    /// `above` holds the mounts it lies under, nearest first, with their list positions.
    private func checkHide(
        _ hide: ParsedMount, index: Int, above: [(Int, ParsedMount)], errors: inout [PolicyError]
    ) {
        guard let enclosing = above.first(where: { $0.0 < index })?.1 else {
            // A bind listed after the hide is reported as burying it, which says how to fix it.
            if !above.isEmpty { return }
            errors.append(PolicyError(
                "hide \(hide.destination) must lie strictly under an earlier ro or rw mount destination (it hides part of a bind)",
                at: hide.location))
            return
        }
        if !enclosing.isBind {
            errors.append(PolicyError(
                "hide \(hide.destination) lies under the \(enclosing.spec.kindName) at \(enclosing.destination) (at \(enclosing.location)); hide only punches holes in ro or rw binds",
                at: hide.location))
        }
    }
}
