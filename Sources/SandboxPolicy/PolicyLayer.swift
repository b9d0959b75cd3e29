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
    var networkMode: Located<NetworkSpec.Mode>?
    var networkAllow: Located<[String]>?
    var limits = Limits()
    /// The limits this file sets (a value, or `none` for "explicitly unlimited").
    var limitKeys: Set<String> = []
    var envSet: [String: String] = [:]
    var envPass: [String] = []

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
    private(set) var errors: [PolicyError] = []

    static let topLevelKeys = ["extends", "description", "filesystem", "identity", "seccomp", "network", "limits", "env"]
    static let filesystemKeys = ["chdir", "landlock", "mounts"]
    static let mountKinds = ["ro", "rw", "tmpfs", "hide", "symlink"]
    static let mountKeys = mountKinds + ["optional", "keep_symlink", "no_symlinks", "size", "mode", "target"]
    static let identityKeys = ["uid", "gid", "host_uid", "host_gid", "hostname"]
    static let seccompKeys = ["profile", "default_action", "allow", "deny", "quiet"]
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
            return (layer, [parser.syntaxError(error, in: text)])
        }
        let sorted = parser.errors.enumerated().sorted {
            let a = $0.element.location, b = $1.element.location
            return (a?.line ?? 0, a?.column ?? 0, $0.offset) < (b?.line ?? 0, b?.column ?? 0, $1.offset)
        }
        return (layer, sorted.map(\.element))
    }

    // MARK: - Sections

    private mutating func readPolicy(_ root: Node, into layer: inout PolicyLayer) {
        guard let top = fields(of: root, in: "the top level", allowed: Self.topLevelKeys) else { return }
        if let node = top["extends"], let ref = text(node, "extends") {
            if ref.isEmpty {
                error(at: node, "extends needs a policy name or path")
            } else {
                layer.extends = Located(value: ref, location: location(of: node))
            }
        }
        if let node = top["description"] {
            layer.description = text(node, "description")
        }
        if let node = top["filesystem"] { readFilesystem(node, into: &layer) }
        if let node = top["identity"] { readIdentity(node, into: &layer) }
        if let node = top["seccomp"] { readSeccomp(node, into: &layer) }
        if let node = top["network"] { readNetwork(node, into: &layer) }
        if let node = top["limits"] { readLimits(node, into: &layer) }
        if let node = top["env"] { readEnv(node, into: &layer) }
    }

    private mutating func readFilesystem(_ node: Node, into layer: inout PolicyLayer) {
        guard let fs = fields(of: node, in: "filesystem", allowed: Self.filesystemKeys) else { return }
        if let node = fs["chdir"], let literal = text(node, "filesystem.chdir"),
            let path = path(literal, at: node, what: "chdir", placeholderHint: "PATH")
        {
            layer.chdir = Located(value: path, location: location(of: node))
        }
        if let node = fs["landlock"], let spelled = text(node, "filesystem.landlock") {
            if let mode = LandlockMode(rawValue: spelled) {
                layer.landlock = mode
            } else {
                error(at: node, "unknown landlock mode '\(spelled)' (allowed: \(LandlockMode.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
        }
        guard let node = fs["mounts"], let entries = list(node, "filesystem.mounts") else { return }
        var byDestination: [String: ParsedMount] = [:]
        for entry in entries {
            guard let mount = readMount(entry) else { continue }
            // Across files the same destination means "replace the inherited entry"; within
            // one file it can only be a mistake, and which entry wins would be arbitrary.
            if let first = byDestination[mount.destination] {
                if mount.spec.kind == .hide && first.spec.kind != .hide {
                    error(at: mount.location,
                          "hide \(mount.destination) is at exactly the destination of the \(first.spec.kindName) mount at \(first.location): hide punches holes strictly inside a bind")
                } else if first.spec.kind == .hide && mount.spec.kind != .hide {
                    error(at: mount.location,
                          "\(mount.spec.kindName) \(mount.destination) is at exactly the destination of the hide at \(first.location): hide punches holes strictly inside a bind")
                } else {
                    error(at: mount.location, "duplicate mount destination \(mount.destination) (first at \(first.location))")
                }
                continue
            }
            byDestination[mount.destination] = mount
            layer.mounts.append(mount)
        }
    }

    /// One `filesystem.mounts` entry: exactly one kind key plus the modifiers that kind takes.
    private mutating func readMount(_ node: Node) -> ParsedMount? {
        guard let entry = fields(of: node, in: "a mount entry", allowed: Self.mountKeys) else { return nil }
        let kinds = Self.mountKinds.filter { entry[$0] != nil }
        guard kinds.count == 1, let kind = kinds.first, let valueNode = entry[kind] else {
            let found = kinds.isEmpty ? "found none" : "found \(kinds.joined(separator: " and "))"
            error(at: node, "a mount entry needs exactly one of \(Self.mountKinds.joined(separator: ", ")) (\(found))")
            return nil
        }
        let modifiers: [String: [String]] = [
            "ro": ["optional", "keep_symlink", "no_symlinks"], "rw": ["optional", "no_symlinks"], "tmpfs": ["size", "mode"], "hide": [],
            "symlink": ["target"],
        ]
        var valid = true
        for key in entry.keys where key != kind && !(modifiers[kind] ?? []).contains(key) {
            let appliesTo: String
            switch key {
            case "optional": appliesTo = "ro and rw binds (a tmpfs, hide or symlink cannot be missing)"
            case "keep_symlink": appliesTo = "ro binds (it mirrors merged-/usr links; a rw grant must bind what it names)"
            case "no_symlinks": appliesTo = "ro and rw binds"
            case "size", "mode": appliesTo = "tmpfs"
            default: appliesTo = "symlink"
            }
            error(at: entry.keyNode(key) ?? node, "'\(key)' applies only to \(appliesTo), not to \(kind)")
            valid = false
        }
        guard let value = text(valueNode, kind) else { return nil }
        let loc = location(of: node)

        switch kind {
        case "ro", "rw":
            guard let (source, destination) = bindPaths(value, at: valueNode, kind: kind) else { return nil }
            let optional = entry["optional"].flatMap { bool($0, "optional") } ?? false
            let keepSymlink = entry["keep_symlink"].flatMap { bool($0, "keep_symlink") } ?? false
            let noSymlinks = entry["no_symlinks"].flatMap { bool($0, "no_symlinks") } ?? false
            guard valid else { return nil }
            let mountKind: MountSpec.Kind =
                kind == "ro" ? .readOnly(source: source.path) : .readWrite(source: source.path)
            return ParsedMount(
                spec: MountSpec(kind: mountKind, destination: destination.path, optional: optional,
                                keepSymlink: keepSymlink, noSymlinks: noSymlinks, location: loc),
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
                    error(at: node, "symlink \(destination.path) needs a 'target' (the link text, e.g. usr/bin)")
                    return nil
                }
                guard let target = text(targetNode, "symlink target") else { return nil }
                if target.isEmpty {
                    error(at: targetNode, "symlink target must not be empty")
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
            error(at: node, "\(kind) takes SRC or SRC:DST with absolute paths (got '\(value)')")
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
            error(at: node, reason)
            return nil
        }
        guard checkDestination(destination, at: node) else { return nil }
        return (source, destination)
    }

    /// The single path of a tmpfs, hide or symlink entry.
    private mutating func destinationOnly(_ value: String, at node: Node, kind: String) -> ResolvedPath? {
        guard !value.contains(":") else {
            error(at: node, "\(kind) takes one destination path, not SRC:DST (got '\(value)')")
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
        error(at: node, reason)
        return false
    }

    private mutating func readIdentity(_ node: Node, into layer: inout PolicyLayer) {
        guard let identity = fields(of: node, in: "identity", allowed: Self.identityKeys) else { return }
        // 2^32-1 is the kernel's "no id" value (-1), which id maps refuse.
        let maxID = UInt64(UInt32.max - 1)
        for (key, keyPath) in [("uid", \Identity.uid), ("gid", \Identity.gid)] {
            guard let node = identity[key], let id = integer(node, "identity.\(key)", min: 0, max: maxID) else { continue }
            if id == 0 {
                error(at: node, "identity.\(key) must not be 0: the payload never runs as root, not even namespaced root")
                continue
            }
            layer.identity[keyPath: keyPath] = UInt32(id)
            layer.identityKeys.insert(key)
        }
        for (key, keyPath) in [("host_uid", \Identity.hostUID), ("host_gid", \Identity.hostGID)] {
            guard let node = identity[key], let id = integer(node, "identity.\(key)", min: 0, max: maxID) else { continue }
            if id == 0 {
                error(at: node,
                      "identity.\(key) must not be 0: files the sandbox writes in rw binds would belong to host root (use an unprivileged id such as 65534)")
                continue
            }
            layer.identity[keyPath: keyPath] = UInt32(id)
            layer.identityKeys.insert(key)
        }
        if let node = identity["hostname"], let hostname = text(node, "identity.hostname") {
            let allowed = hostname.unicodeScalars.allSatisfy {
                ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "." || $0 == "-"
            }
            if (1...64).contains(hostname.utf8.count) && allowed {
                layer.identity.hostname = hostname
                layer.identityKeys.insert("hostname")
            } else {
                error(at: node, "identity.hostname must be 1 to 64 characters from [A-Za-z0-9.-] (got '\(hostname)')")
            }
        }
    }

    private mutating func readSeccomp(_ node: Node, into layer: inout PolicyLayer) {
        guard let seccomp = fields(of: node, in: "seccomp", allowed: Self.seccompKeys) else { return }
        if let node = seccomp["profile"], let profile = text(node, "seccomp.profile") {
            if Self.seccompProfiles.contains(profile) {
                layer.seccompProfile = profile
            } else {
                error(at: node, "unknown seccomp profile '\(profile)' (allowed: \(Self.seccompProfiles.joined(separator: ", ")))")
            }
        }
        if let node = seccomp["default_action"], let spelled = text(node, "seccomp.default_action") {
            switch SeccompActionSyntax.parse(spelled) {
            case .success(let action): layer.defaultAction = action
            case .failure(let problem): error(at: node, problem.message)
            }
        }
        let allow = syscallNames(seccomp["allow"], "seccomp.allow")
        let deny = syscallNames(seccomp["deny"], "seccomp.deny")
        let quiet = syscallNames(seccomp["quiet"], "seccomp.quiet")
        let named = Dictionary((allow + deny).map { ($0.value, $0.location) }, uniquingKeysWith: { first, _ in first })
        for name in quiet {
            if let other = named[name.value] {
                error(at: name.location, "syscall '\(name.value)' is in seccomp.quiet and also in seccomp.allow or seccomp.deny (at \(other))")
            }
        }
        layer.seccompQuiet = quiet.map(\.value).filter { named[$0] == nil }
        // Both in one file is a contradiction; across files the child's word wins (see merge).
        let denied = Dictionary(deny.map { ($0.value, $0.location) }, uniquingKeysWith: { first, _ in first })
        for name in allow {
            if let other = denied[name.value] {
                error(at: name.location, "syscall '\(name.value)' is in both seccomp.allow and seccomp.deny (deny at \(other))")
            }
        }
        layer.seccompAllow = allow.map(\.value).filter { denied[$0] == nil }
        let allowed = Set(allow.map(\.value))
        layer.seccompDeny = deny.map(\.value).filter { !allowed.contains($0) }
    }

    private mutating func syscallNames(_ node: Node?, _ what: String) -> [Located<String>] {
        guard let node, let items = list(node, what) else { return [] }
        var names: [Located<String>] = []
        var seen: Set<String> = []
        for item in items {
            guard let name = text(item, "\(what) entry") else { continue }
            let valid = !name.isEmpty && name.unicodeScalars.allSatisfy {
                ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_"
            }
            guard valid else {
                error(at: item, "'\(name)' is not a syscall name (names match [a-z0-9_]+)")
                continue
            }
            if seen.insert(name).inserted {
                names.append(Located(value: name, location: location(of: item)))
            }
        }
        return names
    }

    private mutating func readNetwork(_ node: Node, into layer: inout PolicyLayer) {
        guard let network = fields(of: node, in: "network", allowed: Self.networkKeys) else { return }
        if let node = network["mode"], let spelled = text(node, "network.mode") {
            if let mode = NetworkSpec.Mode(rawValue: spelled) {
                layer.networkMode = Located(value: mode, location: location(of: node))
            } else {
                let allowed = NetworkSpec.Mode.allCases.map(\.rawValue).joined(separator: ", ")
                error(at: node, "unknown network mode '\(spelled)' (allowed: \(allowed))")
            }
        }
        if let node = network["allow"], let items = list(node, "network.allow") {
            var endpoints: [String] = []
            var seen: Set<String> = []
            for item in items {
                guard let spelled = text(item, "network.allow entry") else { continue }
                guard let endpoint = HostPort.normalize(spelled) else {
                    error(at: item, "'\(spelled)' is not host:port (a DNS name, IPv4 address or [IPv6] address, port 1-65535)")
                    continue
                }
                if seen.insert(endpoint).inserted { endpoints.append(endpoint) }
            }
            layer.networkAllow = Located(value: endpoints, location: location(of: node))
        }
    }

    private mutating func readLimits(_ node: Node, into layer: inout PolicyLayer) {
        guard let limits = fields(of: node, in: "limits", allowed: Self.limitKeys) else { return }
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
                    error(at: node, "limits.\(key) must be at least \(ByteSize.format(minimum)) (got \(ByteSize.format(value)))")
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
            } else if let spelled = text(node, "limits.cpus") {
                if let cpus = DecimalNumber.parse(spelled), cpus > 0, cpus <= Limits.maxCPUs {
                    layer.limits.cpus = cpus
                    layer.limitKeys.insert("cpus")
                } else {
                    error(at: node, "limits.cpus must be a number of cores greater than 0 and at most \(Int(Limits.maxCPUs)), e.g. 0.5 or 2 (got '\(spelled)')")
                }
            }
        }
        if let node = limits["timeout"] {
            if isNone(node) {
                layer.limits.timeoutSeconds = nil
                layer.limitKeys.insert("timeout")
            } else if let spelled = text(node, "limits.timeout") {
                if let seconds = DurationString.parse(spelled), seconds > 0, seconds <= Limits.maxTimeoutSeconds {
                    layer.limits.timeoutSeconds = seconds
                    layer.limitKeys.insert("timeout")
                } else {
                    error(at: node, "limits.timeout must be seconds or a duration such as 90s, 10m, 2h, at most \(DurationString.format(Limits.maxTimeoutSeconds)), or none (got '\(spelled)')")
                }
            }
        }
    }

    private mutating func readEnv(_ node: Node, into layer: inout PolicyLayer) {
        guard let env = fields(of: node, in: "env", allowed: Self.envKeys) else { return }
        var setAt: [String: SourceLocation] = [:]
        if let node = env["set"], let pairs = mapping(node, "env.set") {
            for (keyNode, valueNode) in pairs {
                guard let name = text(keyNode, "env.set name") else { continue }
                guard Self.isEnvName(name) else {
                    error(at: keyNode, "'\(name)' is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
                    continue
                }
                guard let literal = text(valueNode, "env.set.\(name)"),
                    let value = substitute(literal, at: valueNode, placeholderHint: "VALUE")
                else { continue }
                layer.envSet[name] = value.text
                setAt[name] = location(of: keyNode)
            }
        }
        if let node = env["pass"], let items = list(node, "env.pass") {
            var passed: Set<String> = []
            for item in items {
                guard let name = text(item, "env.pass entry") else { continue }
                guard Self.isEnvName(name) else {
                    error(at: item, "'\(name)' is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
                    continue
                }
                if let other = setAt[name] {
                    error(at: item, "\(name) is both passed and set (set at \(other))")
                    continue
                }
                if passed.insert(name).inserted { layer.envPass.append(name) }
            }
        }
    }

    static func isEnvName(_ name: String) -> Bool { EnvSpec.isVariableName(name) }

    // MARK: - Paths and placeholders

    /// Syntax-checks `literal`'s placeholders and fills them in. With `requireAllPlaceholders`,
    /// each placeholder without a value is an error naming it.
    private mutating func substitute(_ literal: String, at node: Node, placeholderHint: String)
        -> (text: String, unresolved: [String])?
    {
        let template: Template
        do {
            template = try Template(parsing: literal)
        } catch {
            self.error(at: node, error.message)
            return nil
        }
        let result = template.substitute(variables)
        if requireAllPlaceholders && !result.unresolved.isEmpty {
            for name in result.unresolved {
                error(at: node, "placeholder {\(name)} has no value (pass --var \(name)=\(placeholderHint))")
            }
            return nil
        }
        return result
    }

    /// A path field: placeholders, then absolute, no `..`, normalised. `what` names the field
    /// in messages ("ro source", "chdir").
    private mutating func path(_ literal: String, at node: Node, what: String, placeholderHint: String)
        -> ResolvedPath?
    {
        // Judge the text as written first: "relative/{x}" can never become absolute.
        guard literal.hasPrefix("/") || literal.hasPrefix("{") else {
            error(at: node, "\(what) '\(literal)' must be an absolute path")
            return nil
        }
        guard let (text, unresolved) = substitute(literal, at: node, placeholderHint: placeholderHint) else { return nil }
        let origin = text == literal ? "" : " (from '\(literal)')"
        if unresolved.isEmpty && !text.hasPrefix("/") {
            error(at: node, "\(what) '\(text)'\(origin) must be an absolute path")
            return nil
        }
        do {
            return ResolvedPath(path: try SandboxPath.normalize(text), isConcrete: unresolved.isEmpty)
        } catch {
            switch error {
            case .dotDot: self.error(at: node, "\(what) '\(text)'\(origin) has a '..' component; write the path without it")
            case .nul: self.error(at: node, "\(what)\(origin) contains a NUL byte")
            case .tooLong: self.error(at: node, "\(what)\(origin) is longer than PATH_MAX")
            }
            return nil
        }
    }

    // MARK: - YAML shapes

    /// The keys of a mapping, with unknown keys reported (listing the allowed ones).
    struct Fields {
        private var entries: [String: (key: Node, value: Node)] = [:]
        private(set) var keys: [String] = []

        subscript(_ key: String) -> Node? { entries[key]?.value }
        func keyNode(_ key: String) -> Node? { entries[key]?.key }

        fileprivate mutating func add(_ key: String, _ keyNode: Node, _ value: Node) {
            entries[key] = (keyNode, value)
            keys.append(key)
        }
    }

    /// A mapping with a fixed set of keys. An empty value (`filesystem:` with nothing under it)
    /// counts as an empty mapping.
    private mutating func fields(of node: Node, in context: String, allowed: [String]) -> Fields? {
        guard let pairs = mapping(node, context) else { return nil }
        var fields = Fields()
        for (keyNode, value) in pairs {
            guard case .scalar(let scalar) = keyNode else {
                error(at: keyNode, "keys in \(context) must be plain words")
                continue
            }
            guard allowed.contains(scalar.string) else {
                error(at: keyNode, "unknown key '\(scalar.string)' in \(context) (allowed: \(allowed.joined(separator: ", ")))")
                continue
            }
            fields.add(scalar.string, keyNode, value)
        }
        return fields
    }

    private mutating func mapping(_ node: Node, _ what: String) -> [(Node, Node)]? {
        if isNull(node) { return [] }
        guard case .mapping(let mapping) = node else {
            error(at: node, "\(what) must be a mapping of key: value, not \(shape(of: node))")
            return nil
        }
        return mapping.map { ($0.key, $0.value) }
    }

    private mutating func list(_ node: Node, _ what: String) -> [Node]? {
        if isNull(node) { return [] }
        guard case .sequence(let sequence) = node else {
            error(at: node, "\(what) must be a list, not \(shape(of: node))")
            return nil
        }
        return Array(sequence)
    }

    /// A scalar's text exactly as written (so `mode: 0755` stays "0755" and `PORT: 08` stays
    /// "08"); YAML's own typing is used only to tell an empty value from an empty string.
    private mutating func text(_ node: Node, _ what: String) -> String? {
        guard case .scalar(let scalar) = node else {
            var message = "\(what) must be a single value, not \(shape(of: node))"
            // `ro: {workdir}` parses as the mapping {workdir: null}.
            if case .mapping(let m) = node, m.count == 1, let value = m.first?.value, isNull(value) {
                message += " (quote values that start with '{': \"{name}...\")"
            }
            error(at: node, message)
            return nil
        }
        if isNull(node) {
            error(at: node, "\(what) needs a value")
            return nil
        }
        if scalar.string.contains("\0") {
            error(at: node, "\(what) contains a NUL byte")
            return nil
        }
        return scalar.string
    }

    private mutating func bool(_ node: Node, _ what: String) -> Bool? {
        if node.tag.rawValue == Tag.Name.bool.rawValue, let value = node.bool { return value }
        if let s = node.scalar, s.style == .plain || s.style == .any {
            switch s.string {
            case "true", "True", "TRUE": return true
            case "false", "False", "FALSE": return false
            default: break
            }
        }
        let spelled = node.scalar.map { " (got '\($0.string)')" } ?? ""
        error(at: node, "\(what) must be true or false\(spelled)")
        return nil
    }

    /// A decimal integer in `min...max`.
    private mutating func integer(_ node: Node, _ what: String, min: UInt64, max: UInt64) -> UInt64? {
        guard let spelled = text(node, what) else { return nil }
        guard spelled.allSatisfy(\.isASCIIDigit), let value = UInt64(spelled), (min...max).contains(value) else {
            let range = min == 1 ? "a positive integer" : "an integer"
            error(at: node, "\(what) must be \(range) no larger than \(max) (got '\(spelled)')")
            return nil
        }
        return value
    }

    private mutating func byteSize(_ node: Node, _ what: String) -> UInt64? {
        guard let spelled = text(node, what) else { return nil }
        guard let value = ByteSize.parse(spelled), value > 0, value <= Limits.maxBytes else {
            error(at: node, "\(what) must be a positive size such as 1024, 512K, 64M or 1.5G, at most \(ByteSize.format(Limits.maxBytes)) (got '\(spelled)')")
            return nil
        }
        return value
    }

    /// Permission bits in octal, as `chmod` takes them: `1777`, `"0755"`, `0o700`. The digits
    /// are read as octal even when YAML would call them a decimal integer.
    private mutating func fileMode(_ node: Node) -> UInt32? {
        guard let spelled = text(node, "tmpfs mode") else { return nil }
        let digits = spelled.hasPrefix("0o") ? String(spelled.dropFirst(2)) : spelled
        guard !digits.isEmpty, digits.allSatisfy({ ("0"..."7").contains($0) }), let mode = UInt32(digits, radix: 8),
            mode <= 0o7777
        else {
            error(at: node, "tmpfs mode must be octal permission bits such as 1777 or 0755 (got '\(spelled)')")
            return nil
        }
        return mode
    }

    private func isNull(_ node: Node) -> Bool {
        guard case .scalar(let s) = node else { return false }
        if node.tag.rawValue == Tag.Name.null.rawValue { return true }
        return (s.style == .plain || s.style == .any) && ["", "~", "null", "Null", "NULL"].contains(s.string)
    }

    private func shape(of node: Node) -> String {
        switch node {
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        case .scalar, .alias: return "a single value"
        }
    }

    // MARK: - Diagnostics

    private func location(of node: Node) -> SourceLocation {
        SourceLocation(file: file, line: node.mark?.line ?? 0, column: node.mark?.column ?? 1)
    }

    private mutating func error(at node: Node, _ message: String) {
        error(at: location(of: node), message)
    }

    private mutating func error(at location: SourceLocation, _ message: String) {
        errors.append(PolicyError(message, at: location))
    }

    /// A Yams error as a `file:line` error.
    private func syntaxError(_ error: any Error, in text: String) -> PolicyError {
        guard let yamlError = error as? YamlError else {
            return PolicyError("YAML: \(error)", at: SourceLocation(file: file, line: 1))
        }
        func at(_ mark: Mark) -> SourceLocation { SourceLocation(file: file, line: mark.line, column: mark.column) }
        func detail(_ context: YamlError.Context?, _ problem: String) -> String {
            guard let context, !context.text.isEmpty else { return "YAML syntax error: \(problem)" }
            return "YAML syntax error: \(problem) (\(context.text) at line \(context.mark.line))"
        }
        switch yamlError {
        case .composer(_, "but found another document", let mark, _):
            return PolicyError("a policy file holds one YAML document; remove this second '---' document", at: at(mark))
        case .scanner(let context, let problem, let mark, _),
            .parser(let context, let problem, let mark, _),
            .composer(let context, let problem, let mark, _):
            return PolicyError(detail(context, problem), at: at(mark))
        case .reader(let problem, let offset, _, _):
            let line = offset.map { offset in 1 + text.prefix(offset).filter { $0 == "\n" }.count } ?? 1
            return PolicyError("cannot read YAML: \(problem)", at: SourceLocation(file: file, line: line))
        case .duplicatedKeysInMapping(let duplicates, let context):
            return duplicateKeyError(duplicates, firstAt: context.mark, in: text)
        default:
            return PolicyError("YAML: \(yamlError)", at: SourceLocation(file: file, line: 1))
        }
    }

    private func duplicateKeyError(_ duplicates: [String], firstAt mark: Mark, in text: String) -> PolicyError {
        let key = duplicates.first ?? "?"
        let first = SourceLocation(file: file, line: mark.line, column: mark.column)
        let others = duplicates.dropFirst().map { "'\($0)'" }
        let also = others.isEmpty ? "" : " (also repeated: \(others.joined(separator: ", ")))"
        if let line = YAMLDuplicateKey.repeatLine(of: key, firstAt: mark.line, column: mark.column, in: text) {
            return PolicyError("duplicate key '\(key)' (first at \(first))\(also)", at: SourceLocation(file: file, line: line, column: mark.column))
        }
        return PolicyError("duplicate key '\(key)' in this mapping\(also)", at: first)
    }
}

/// Yams reports where a duplicated key first appears; the operator needs the repeat (the line
/// to delete). Used for policies and experiment configs alike.
public enum YAMLDuplicateKey {
    /// The 1-based line of the repeat of `key`, whose first occurrence is at `line`:`column`
    /// (1-based). In block style the repeat starts in the same column further down, before any
    /// line indented less (which would have left the mapping); nil if it is not found there
    /// (e.g. flow style).
    public static func repeatLine(of key: String, firstAt line: Int, column: Int, in text: String) -> Int? {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        // `line` is 1-based, so as an index it is the line after the first occurrence.
        for index in lines.indices where index >= line {
            let l = lines[index]
            let indent = l.prefix { $0 == " " }.count
            let content = l.dropFirst(indent)
            if content.isEmpty || content.hasPrefix("#") { continue }
            if indent < column - 1 { break }
            guard indent == column - 1 else { continue }
            for spelling in [key, "\"\(key)\"", "'\(key)'"] where content.hasPrefix(spelling) {
                if content.dropFirst(spelling.count).drop(while: { $0 == " " }).first == ":" { return index + 1 }
            }
        }
        return nil
    }
}
