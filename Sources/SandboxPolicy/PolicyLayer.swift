// One policy file, read from its YAML tree into typed values with a location on each.
//
// This is the schema check: every key at every level is known, every value has the right
// shape, paths are normalised and placeholders substituted. Rules that need more than one
// file (inherited mounts, `chdir` against the final mount list) live in `PolicyMerge.swift`.
// The parser records an error and moves on, so one pass reports everything wrong in a file.

import Yams

/// A value as written in one file, with where it was written.
struct Located<Value> {
    var value: Value
    var location: SourceLocation
}

/// A path after placeholder substitution and normalisation.
struct ResolvedPath {
    var path: String
    /// False while the path still contains an unresolved `{placeholder}` (only when loading
    /// with `requireAllPlaceholders: false`); checks that compare paths skip such values.
    var isConcrete: Bool
}

/// One mount entry as parsed.
struct ParsedMount {
    var spec: MountSpec
    var location: SourceLocation
    var isConcrete: Bool

    var destination: String { spec.destination }

    /// A bind whose destination may turn into a symlink at launch (`keep_symlink`): nothing
    /// can be mounted beneath it, exactly as beneath a `symlink` entry.
    var mayBeSymlink: Bool {
        if case .symlink = spec.kind { return true }
        if case .readOnly = spec.kind { return spec.keepSymlink }
        return false
    }

    var isBind: Bool { spec.source != nil }
}

/// One policy file as written: what it sets, nothing inherited yet.
struct PolicyLayer {
    var file: String
    /// The name the file was referred to by (bare name or path), for `Policy.lineage`.
    var name: String
    var extends: Located<String>?
    var description: String?
    var chdir: Located<ResolvedPath>?
    var landlock: LandlockMode?
    var mounts: [ParsedMount] = []
    var identity = Identity()
    /// The identity fields this file sets; only these override an inherited identity.
    var identityKeys: Set<String> = []
    var seccompProfile: String?
    var defaultAction: SeccompAction?
    var seccompAllow: [String] = []
    var seccompDeny: [String] = []
    var seccompQuiet: [String] = []
    var seccompWatchLinks: [String] = []
    var networkMode: Located<NetworkSpec.Mode>?
    var networkAllow: Located<[String]>?
    var limits = Limits()
    /// The limits this file sets (a value, or `none` for "explicitly unlimited").
    var limitKeys: Set<String> = []
    var envSet: [String: String] = [:]
    var envPass: [String] = []
    /// Where this file sets what `policy lint` points at: `landlock`, `limits.NAME`,
    /// `seccomp.allow.NAME`, `seccomp.quiet.NAME`.
    var places: [String: SourceLocation] = [:]

    init(file: String, name: String) {
        self.file = file
        self.name = name
    }
}

/// Reads one file's YAML into a `PolicyLayer`, collecting every error it finds.
struct LayerParser {
    let file: String
    let variables: [String: String]
    let requireAllPlaceholders: Bool
    /// The shapes and the problems found (`YAMLReader`).
    let reader: YAMLReader

    init(file: String, variables: [String: String], requireAllPlaceholders: Bool) {
        self.file = file
        self.variables = variables
        self.requireAllPlaceholders = requireAllPlaceholders
        reader = YAMLReader(file: file)
    }

    static let topLevelKeys = ["extends", "description", "filesystem", "identity", "seccomp", "network", "limits", "env"]
    static let filesystemKeys = ["chdir", "landlock", "mounts"]
    static let mountKinds = ["ro", "rw", "tmpfs", "hide", "symlink"]
    static let mountKeys = mountKinds + ["optional", "keep_symlink", "no_symlinks", "userland", "size", "mode", "target"]
    static let identityKeys = ["uid", "gid", "host_uid", "host_gid", "hostname"]
    static let seccompKeys = ["profile", "default_action", "allow", "deny", "quiet", "watch_links"]
    /// Named base allowlists the plan compiler knows.
    static let seccompProfiles = ["default"]
    static let networkKeys = ["mode", "allow"]
    static let limitKeys = ["nofile", "nproc", "fsize", "cpu_seconds", "memory", "pids", "cpus", "timeout"]
    static let envKeys = ["set", "pass"]

    /// Parses `text` (the contents of `file`). Errors come back sorted by line.
    static func parse(
        _ text: String, file: String, name: String, variables: [String: String], requireAllPlaceholders: Bool
    ) -> (PolicyLayer, [PolicyError]) {
        // Without a brace there is no placeholder: the result depends on the text, the file
        // and the name only (base.yaml, under every policy a supervisor loads per task).
        let constant = !text.utf8.contains(UInt8(ascii: "{"))
        if constant, let hit = ComposedYAML.constantLayer(text: text, file: file, name: name) { return hit }
        let result = parseUncached(text, file: file, name: name, variables: variables, requireAllPlaceholders: requireAllPlaceholders)
        if constant { ComposedYAML.keepConstantLayer(text: text, file: file, name: name, result) }
        return result
    }

    private static func parseUncached(
        _ text: String, file: String, name: String, variables: [String: String], requireAllPlaceholders: Bool
    ) -> (PolicyLayer, [PolicyError]) {
        var parser = LayerParser(file: file, variables: variables, requireAllPlaceholders: requireAllPlaceholders)
        var layer = PolicyLayer(file: file, name: name)
        do {
            // The tree comes from a per-process cache keyed by the text (ComposedYAML); the
            // walk below, which fills in this load's placeholders, runs every time.
            try ComposedYAML.withTree(text) { root in
                if let root { parser.readPolicy(root, into: &layer) }
            }
        } catch {
            let problem = YAMLReader.problem(of: error, in: text, file: file, document: "a policy file")
            return (layer, [PolicyError(problem.message, at: problem.location)])
        }
        return (layer, parser.reader.sortedProblems.map { PolicyError($0.message, at: $0.location) })
    }

    // MARK: - Sections

    private mutating func readPolicy(_ root: Node, into layer: inout PolicyLayer) {
        guard let top = reader.fields(of: root, in: "the top level", allowed: Self.topLevelKeys) else { return }
        if let node = top["extends"], let ref = reader.text(node, "extends") {
            if ref.isEmpty {
                reader.error(at: node, "extends needs a policy name or path")
            } else {
                layer.extends = Located(value: ref, location: reader.location(of: node))
            }
        }
        if let node = top["description"] {
            layer.description = reader.text(node, "description")
        }
        if let node = top["filesystem"] { readFilesystem(node, into: &layer) }
        if let node = top["identity"] { readIdentity(node, into: &layer) }
        if let node = top["seccomp"] { readSeccomp(node, into: &layer) }
        if let node = top["network"] { readNetwork(node, into: &layer) }
        if let node = top["limits"] { readLimits(node, into: &layer) }
        if let node = top["env"] { readEnv(node, into: &layer) }
    }

    private mutating func readFilesystem(_ node: Node, into layer: inout PolicyLayer) {
        guard let fs = reader.fields(of: node, in: "filesystem", allowed: Self.filesystemKeys) else { return }
        if let node = fs["chdir"], let literal = reader.text(node, "filesystem.chdir"),
            let path = path(literal, at: node, what: "chdir", placeholderHint: "PATH")
        {
            layer.chdir = Located(value: path, location: reader.location(of: node))
        }
        if let node = fs["landlock"], let spelled = reader.text(node, "filesystem.landlock") {
            if let mode = LandlockMode(rawValue: spelled) {
                layer.landlock = mode
                layer.places["landlock"] = reader.location(of: node)
            } else {
                reader.error(at: node, "unknown landlock mode '\(spelled)' (allowed: \(LandlockMode.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
        }
        guard let node = fs["mounts"], let entries = reader.list(node, "filesystem.mounts") else { return }
        var byDestination: [String: ParsedMount] = [:]
        for entry in entries {
            guard let mount = readMount(entry) else { continue }
            // Across files the same destination means "replace the inherited entry"; within
            // one file it can only be a mistake, and which entry wins would be arbitrary.
            if let first = byDestination[mount.destination] {
                if mount.spec.kind == .hide && first.spec.kind != .hide {
                    reader.error(at: mount.location,
                          "hide \(mount.destination) is at exactly the destination of the \(first.spec.kindName) mount at \(first.location): hide punches holes strictly inside a bind")
                } else if first.spec.kind == .hide && mount.spec.kind != .hide {
                    reader.error(at: mount.location,
                          "\(mount.spec.kindName) \(mount.destination) is at exactly the destination of the hide at \(first.location): hide punches holes strictly inside a bind")
                } else {
                    reader.error(at: mount.location, "duplicate mount destination \(mount.destination) (first at \(first.location))")
                }
                continue
            }
            byDestination[mount.destination] = mount
            layer.mounts.append(mount)
        }
    }

    /// One `filesystem.mounts` entry: exactly one kind key plus the modifiers that kind takes.
    private mutating func readMount(_ node: Node) -> ParsedMount? {
        guard let entry = reader.fields(of: node, in: "a mount entry", allowed: Self.mountKeys) else { return nil }
        let kinds = Self.mountKinds.filter { entry[$0] != nil }
        guard kinds.count == 1, let kind = kinds.first, let valueNode = entry[kind] else {
            let found = kinds.isEmpty ? "found none" : "found \(kinds.joined(separator: " and "))"
            reader.error(at: node, "a mount entry needs exactly one of \(Self.mountKinds.joined(separator: ", ")) (\(found))")
            return nil
        }
        let modifiers: [String: [String]] = [
            "ro": ["optional", "keep_symlink", "no_symlinks", "userland"], "rw": ["optional", "no_symlinks"], "tmpfs": ["size", "mode"], "hide": [],
            "symlink": ["target"],
        ]
        var valid = true
        for key in entry.keys where key != kind && !(modifiers[kind] ?? []).contains(key) {
            let appliesTo: String
            switch key {
            case "optional": appliesTo = "ro and rw binds (a tmpfs, hide or symlink cannot be missing)"
            case "keep_symlink": appliesTo = "ro binds (it mirrors merged-/usr links; a rw grant must bind what it names)"
            case "no_symlinks": appliesTo = "ro and rw binds"
            case "userland": appliesTo = "ro binds (the host's programs and libraries, which a task's image replaces)"
            case "size", "mode": appliesTo = "tmpfs"
            default: appliesTo = "symlink"
            }
            reader.error(at: entry.keyNode(key) ?? node, "'\(key)' applies only to \(appliesTo), not to \(kind)")
            valid = false
        }
        guard let value = reader.text(valueNode, kind) else { return nil }
        let loc = reader.location(of: node)

        switch kind {
        case "ro", "rw":
            guard let (source, destination) = bindPaths(value, at: valueNode, kind: kind) else { return nil }
            let optional = entry["optional"].flatMap { reader.bool($0, "optional") } ?? false
            let keepSymlink = entry["keep_symlink"].flatMap { reader.bool($0, "keep_symlink") } ?? false
            let noSymlinks = entry["no_symlinks"].flatMap { reader.bool($0, "no_symlinks") } ?? false
            let userland = entry["userland"].flatMap { reader.bool($0, "userland") } ?? false
            guard valid else { return nil }
            let mountKind: MountSpec.Kind =
                kind == "ro" ? .readOnly(source: source.path) : .readWrite(source: source.path)
            return ParsedMount(
                spec: MountSpec(kind: mountKind, destination: destination.path, optional: optional,
                                keepSymlink: keepSymlink, noSymlinks: noSymlinks, userland: userland, location: loc),
                location: loc, isConcrete: destination.isConcrete)

        default:
            guard let destination = destinationOnly(value, at: valueNode, kind: kind) else { return nil }
            let mountKind: MountSpec.Kind
            switch kind {
            case "tmpfs":
                let size = entry["size"].flatMap { byteSize($0, "tmpfs size") }
                let mode = entry["mode"].flatMap { fileMode($0) }
                if entry["size"] != nil && size == nil || entry["mode"] != nil && mode == nil { valid = false }
                mountKind = .tmpfs(size: size, mode: mode ?? 0o755)
            case "hide":
                mountKind = .hide
            default:
                guard let targetNode = entry["target"] else {
                    reader.error(at: node, "symlink \(destination.path) needs a 'target' (the link text, e.g. usr/bin)")
                    return nil
                }
                guard let target = reader.text(targetNode, "symlink target") else { return nil }
                if target.isEmpty {
                    reader.error(at: targetNode, "symlink target must not be empty")
                    return nil
                }
                mountKind = .symlink(target: target)
            }
            guard valid else { return nil }
            return ParsedMount(
                spec: MountSpec(kind: mountKind, destination: destination.path, location: loc),
                location: loc, isConcrete: destination.isConcrete)
        }
    }

    /// `SRC` (destination = source) or `SRC:DST`. Split before substitution, so a `:` inside a
    /// placeholder's value cannot move the boundary between host path and sandbox path.
    private mutating func bindPaths(_ value: String, at node: Node, kind: String) -> (ResolvedPath, ResolvedPath)? {
        let parts = value.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard parts.count <= 2, parts.allSatisfy({ !$0.isEmpty }) else {
            reader.error(at: node, "\(kind) takes SRC or SRC:DST with absolute paths (got '\(value)')")
            return nil
        }
        guard let source = path(parts[0], at: node, what: "\(kind) source", placeholderHint: "PATH") else { return nil }
        let destination: ResolvedPath
        if parts.count == 2 {
            guard let dst = path(parts[1], at: node, what: "\(kind) destination", placeholderHint: "PATH") else {
                return nil
            }
            destination = dst
        } else {
            destination = source
        }
        if source.path.hasPrefix("/"), let reason = SandboxPath.forbiddenReason(forSource: source.path) {
            reader.error(at: node, reason)
            return nil
        }
        guard checkDestination(destination, at: node) else { return nil }
        return (source, destination)
    }

    /// The single path of a tmpfs, hide or symlink entry.
    private mutating func destinationOnly(_ value: String, at node: Node, kind: String) -> ResolvedPath? {
        guard !value.contains(":") else {
            reader.error(at: node, "\(kind) takes one destination path, not SRC:DST (got '\(value)')")
            return nil
        }
        guard let destination = path(value, at: node, what: "\(kind) destination", placeholderHint: "PATH"),
            checkDestination(destination, at: node)
        else { return nil }
        return destination
    }

    private mutating func checkDestination(_ destination: ResolvedPath, at node: Node) -> Bool {
        // A destination still holding a placeholder is checked when it has a value; a literal
        // prefix such as "/proc/{x}" can be judged already.
        guard destination.path.hasPrefix("/"), let reason = SandboxPath.reservedReason(forDestination: destination.path)
        else { return true }
        reader.error(at: node, reason)
        return false
    }

    private mutating func readIdentity(_ node: Node, into layer: inout PolicyLayer) {
        guard let identity = reader.fields(of: node, in: "identity", allowed: Self.identityKeys) else { return }
        // 2^32-1 is the kernel's "no id" value (-1), which id maps refuse.
        let maxID = UInt64(UInt32.max - 1)
        for (key, keyPath) in [("uid", \Identity.uid), ("gid", \Identity.gid)] {
            guard let node = identity[key], let id = integer(node, "identity.\(key)", min: 0, max: maxID) else { continue }
            if id == 0 {
                reader.error(at: node, "identity.\(key) must not be 0: the payload never runs as root, not even namespaced root")
                continue
            }
            layer.identity[keyPath: keyPath] = UInt32(id)
            layer.identityKeys.insert(key)
        }
        for (key, keyPath) in [("host_uid", \Identity.hostUID), ("host_gid", \Identity.hostGID)] {
            guard let node = identity[key], let id = integer(node, "identity.\(key)", min: 0, max: maxID) else { continue }
            if id == 0 {
                reader.error(at: node,
                      "identity.\(key) must not be 0: files the sandbox writes in rw binds would belong to host root (use an unprivileged id such as 65534)")
                continue
            }
            layer.identity[keyPath: keyPath] = UInt32(id)
            layer.identityKeys.insert(key)
        }
        if let node = identity["hostname"], let hostname = reader.text(node, "identity.hostname") {
            let allowed = hostname.unicodeScalars.allSatisfy {
                ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "." || $0 == "-"
            }
            if (1...64).contains(hostname.utf8.count) && allowed {
                layer.identity.hostname = hostname
                layer.identityKeys.insert("hostname")
            } else {
                reader.error(at: node, "identity.hostname must be 1 to 64 characters from [A-Za-z0-9.-] (got '\(hostname)')")
            }
        }
    }

    private mutating func readSeccomp(_ node: Node, into layer: inout PolicyLayer) {
        guard let seccomp = reader.fields(of: node, in: "seccomp", allowed: Self.seccompKeys) else { return }
        if let node = seccomp["profile"], let profile = reader.text(node, "seccomp.profile") {
            if Self.seccompProfiles.contains(profile) {
                layer.seccompProfile = profile
            } else {
                reader.error(at: node, "unknown seccomp profile '\(profile)' (allowed: \(Self.seccompProfiles.joined(separator: ", ")))")
            }
        }
        if let node = seccomp["default_action"], let spelled = reader.text(node, "seccomp.default_action") {
            switch SeccompActionSyntax.parse(spelled) {
            case .success(let action): layer.defaultAction = action
            case .failure(let problem): reader.error(at: node, problem.message)
            }
        }
        let allow = syscallNames(seccomp["allow"], "seccomp.allow")
        let deny = syscallNames(seccomp["deny"], "seccomp.deny")
        let quiet = syscallNames(seccomp["quiet"], "seccomp.quiet")
        let named = Dictionary((allow + deny).map { ($0.value, $0.location) }, uniquingKeysWith: { first, _ in first })
        for name in quiet {
            if let other = named[name.value] {
                reader.error(at: name.location, "syscall '\(name.value)' is in seccomp.quiet and also in seccomp.allow or seccomp.deny (at \(other))")
            }
        }
        layer.seccompQuiet = quiet.map(\.value).filter { named[$0] == nil }
        // Both in one file is a contradiction; across files the child's word wins (see merge).
        let denied = Dictionary(deny.map { ($0.value, $0.location) }, uniquingKeysWith: { first, _ in first })
        for name in allow {
            if let other = denied[name.value] {
                reader.error(at: name.location, "syscall '\(name.value)' is in both seccomp.allow and seccomp.deny (deny at \(other))")
            }
        }
        layer.seccompAllow = allow.map(\.value).filter { denied[$0] == nil }
        for name in allow { layer.places["seccomp.allow.\(name.value)"] = name.location }
        for name in quiet { layer.places["seccomp.quiet.\(name.value)"] = name.location }
        for name in deny { layer.places["seccomp.deny.\(name.value)"] = name.location }
        let allowed = Set(allow.map(\.value))
        layer.seccompDeny = deny.map(\.value).filter { !allowed.contains($0) }
        if let node = seccomp["watch_links"], let items = reader.list(node, "seccomp.watch_links") {
            for item in items {
                guard let path = reader.text(item, "seccomp.watch_links entry") else { continue }
                // A directory of the root (`/tests`): the supervisor tells it by its device.
                guard path.hasPrefix("/"), path.count > 1, !path.dropFirst().contains("/"), path != "/.", path != "/.." else {
                    reader.error(at: item, "seccomp.watch_links: '\(path)' is not a directory of the sandbox's root (/tests)")
                    continue
                }
                layer.seccompWatchLinks.append(path)
            }
        }
    }

    private mutating func syscallNames(_ node: Node?, _ what: String) -> [Located<String>] {
        guard let node, let items = reader.list(node, what) else { return [] }
        var names: [Located<String>] = []
        var seen: Set<String> = []
        for item in items {
            guard let name = reader.text(item, "\(what) entry") else { continue }
            let valid = !name.isEmpty && name.unicodeScalars.allSatisfy {
                ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_"
            }
            guard valid else {
                reader.error(at: item, "'\(name)' is not a syscall name (names match [a-z0-9_]+)")
                continue
            }
            if seen.insert(name).inserted {
                names.append(Located(value: name, location: reader.location(of: item)))
            }
        }
        return names
    }

    private mutating func readNetwork(_ node: Node, into layer: inout PolicyLayer) {
        guard let network = reader.fields(of: node, in: "network", allowed: Self.networkKeys) else { return }
        if let node = network["mode"], let spelled = reader.text(node, "network.mode") {
            if let mode = NetworkSpec.Mode(rawValue: spelled) {
                layer.networkMode = Located(value: mode, location: reader.location(of: node))
            } else {
                let allowed = NetworkSpec.Mode.allCases.map(\.rawValue).joined(separator: ", ")
                reader.error(at: node, "unknown network mode '\(spelled)' (allowed: \(allowed))")
            }
        }
        if let node = network["allow"], let items = reader.list(node, "network.allow") {
            var endpoints: [String] = []
            var seen: Set<String> = []
            for item in items {
                guard let spelled = reader.text(item, "network.allow entry") else { continue }
                guard let endpoint = HostPort.normalize(spelled) else {
                    reader.error(at: item, "'\(spelled)' is not host:port (a DNS name, IPv4 address or [IPv6] address, port 1-65535)")
                    continue
                }
                if seen.insert(endpoint).inserted { endpoints.append(endpoint) }
            }
            layer.networkAllow = Located(value: endpoints, location: reader.location(of: node))
        }
    }

    private mutating func readLimits(_ node: Node, into layer: inout PolicyLayer) {
        guard let limits = reader.fields(of: node, in: "limits", allowed: Self.limitKeys) else { return }
        for key in Self.limitKeys { if let n = limits[key] { layer.places["limits.\(key)"] = reader.location(of: n) } }
        // `none` says "unlimited" explicitly, so a child can lift a limit it inherits.
        func isNone(_ node: Node) -> Bool {
            if case .scalar(let s) = node, s.string == "none" { return true }
            return false
        }
        let counts: [(String, WritableKeyPath<Limits, UInt64?>)] = [
            ("nofile", \.nofile), ("nproc", \.nproc), ("cpu_seconds", \.cpuSeconds), ("pids", \.pids),
        ]
        for (key, keyPath) in counts {
            guard let node = limits[key] else { continue }
            if isNone(node) {
                layer.limits[keyPath: keyPath] = nil
            } else if let value = integer(node, "limits.\(key)", min: 1, max: Limits.maxCounts[key]!) {
                layer.limits[keyPath: keyPath] = value
            } else {
                continue
            }
            layer.limitKeys.insert(key)
        }
        let sizes: [(String, WritableKeyPath<Limits, UInt64?>, minimum: UInt64)] = [
            ("fsize", \.fsize, 1), ("memory", \.memory, 1 << 20),
        ]
        for (key, keyPath, minimum) in sizes {
            guard let node = limits[key] else { continue }
            if isNone(node) {
                layer.limits[keyPath: keyPath] = nil
            } else if let value = byteSize(node, "limits.\(key)") {
                guard value >= minimum else {
                    reader.error(at: node, "limits.\(key) must be at least \(ByteSize.format(minimum)) (got \(ByteSize.format(value)))")
                    continue
                }
                layer.limits[keyPath: keyPath] = value
            } else {
                continue
            }
            layer.limitKeys.insert(key)
        }
        if let node = limits["cpus"] {
            if isNone(node) {
                layer.limits.cpus = nil
                layer.limitKeys.insert("cpus")
            } else if let spelled = reader.text(node, "limits.cpus") {
                if let cpus = DecimalNumber.parse(spelled), cpus > 0, cpus <= Limits.maxCPUs {
                    layer.limits.cpus = cpus
                    layer.limitKeys.insert("cpus")
                } else {
                    reader.error(at: node, "limits.cpus must be a number of cores greater than 0 and at most \(Int(Limits.maxCPUs)), e.g. 0.5 or 2 (got '\(spelled)')")
                }
            }
        }
        if let node = limits["timeout"] {
            if isNone(node) {
                layer.limits.timeoutSeconds = nil
                layer.limitKeys.insert("timeout")
            } else if let spelled = reader.text(node, "limits.timeout") {
                if let seconds = DurationString.parse(spelled), seconds > 0, seconds <= Limits.maxTimeoutSeconds {
                    layer.limits.timeoutSeconds = seconds
                    layer.limitKeys.insert("timeout")
                } else {
                    reader.error(at: node, "limits.timeout must be seconds or a duration such as 90s, 10m, 2h, at most \(DurationString.format(Limits.maxTimeoutSeconds)), or none (got '\(spelled)')")
                }
            }
        }
    }

    private mutating func readEnv(_ node: Node, into layer: inout PolicyLayer) {
        guard let env = reader.fields(of: node, in: "env", allowed: Self.envKeys) else { return }
        var setAt: [String: SourceLocation] = [:]
        if let node = env["set"], let pairs = reader.pairs(node, "env.set") {
            for (keyNode, valueNode) in pairs {
                guard let name = reader.text(keyNode, "env.set name") else { continue }
                guard Self.isEnvName(name) else {
                    reader.error(at: keyNode, "'\(name)' is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
                    continue
                }
                guard let literal = reader.text(valueNode, "env.set.\(name)"),
                    let value = substitute(literal, at: valueNode, placeholderHint: "VALUE")
                else { continue }
                layer.envSet[name] = value.text
                setAt[name] = reader.location(of: keyNode)
            }
        }
        if let node = env["pass"], let items = reader.list(node, "env.pass") {
            var passed: Set<String> = []
            for item in items {
                guard let name = reader.text(item, "env.pass entry") else { continue }
                guard Self.isEnvName(name) else {
                    reader.error(at: item, "'\(name)' is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
                    continue
                }
                if let other = setAt[name] {
                    reader.error(at: item, "\(name) is both passed and set (set at \(other))")
                    continue
                }
                if passed.insert(name).inserted { layer.envPass.append(name) }
            }
        }
    }

    static func isEnvName(_ name: String) -> Bool { EnvSpec.isVariableName(name) }
}
