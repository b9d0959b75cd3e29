// Finding policy files, following `extends:`, and producing a `Policy`.
//
// Policies are supervisor-owned files; the loader still treats them as input to check, not
// to trust: a policy that loads is one whose every mount, limit and name has been validated,
// and every rejection says `file:line` so it can be fixed without guessing.

import Glibc
import PolicyStore
import SupervisorIO

/// Loads YAML sandbox policies into `Policy` values.
public struct PolicyLoader: Sendable {
    /// Directories holding `NAME.yaml`, searched in order for bare policy names.
    public var searchPaths: [String]
    /// Whether `load` keeps what it loaded in `RootOwnedCache`'s `policy/` and uses it while
    /// every layer file is unchanged (`PolicyCache`): one-shot `sandbox exec` sets it.
    public var usesCache = false
    /// Part of every cache key: `sandbox exec` puts its launch code's build there
    /// (`LaunchCode.digest`), which its front must share to use the entry.
    public var cacheKeyLaunchCode = ""
    /// Where cached policies live; nil: no cache (not root).
    public var cacheDirectory: String? = RootOwnedCache.directory("policy")

    public init(searchPaths: [String]) {
        self.searchPaths = searchPaths
    }

    /// Loads a policy and everything it extends.
    ///
    /// - Parameters:
    ///   - nameOrPath: a bare name (`base`), looked up as `NAME.yaml` in `searchPaths`, or a
    ///     path (anything containing `/` or ending in `.yaml`/`.yml`).
    ///   - variables: values for `{name}` placeholders, e.g. `["workdir": "/tmp/x"]`.
    ///   - requireAllPlaceholders: true when launching (an unresolved placeholder is an
    ///     error); false for `policy check`/`show`, which leave them as written.
    /// - Throws: `PolicyDiagnostics` with every error found, loaded file first, by line.
    public func load(
        _ nameOrPath: String, variables: [String: String] = [:], requireAllPlaceholders: Bool = true
    ) throws -> Policy {
        try loadMerged(nameOrPath, variables: variables, requireAllPlaceholders: requireAllPlaceholders, cached: usesCache).policy
    }

    /// What `policy lint` judges: the policy as `load` makes it (placeholders unresolved, no
    /// cache), what each file reopens of what it extends, and where the final values were set.
    public func lintInput(_ nameOrPath: String) throws -> PolicyLintInput {
        let (policy, merged) = try loadMerged(nameOrPath, variables: [:], requireAllPlaceholders: false, cached: false)
        return PolicyLintInput(policy: policy, file: try resolvePath(nameOrPath), widenings: merged?.widenings ?? [], places: merged?.places ?? [:])
    }

    /// `load`, with the merged layers it made (nil when the policy came from the cache).
    private func loadMerged(
        _ nameOrPath: String, variables: [String: String], requireAllPlaceholders: Bool, cached: Bool
    ) throws -> (policy: Policy, merged: MergedLayers?) {
        var errors: [PolicyError] = []
        let top: PolicyFiles.File
        do {
            top = try locate(nameOrPath, besideDirectory: nil)
        } catch {
            throw PolicyDiagnostics(errors: [error])
        }
        let cacheKey = cached && cacheDirectory != nil
            ? PolicyCache.key(searchPaths: searchPaths, nameOrPath: nameOrPath, variables: variables, strict: requireAllPlaceholders,
                              launchCode: cacheKeyLaunchCode)
            : nil
        if let cacheKey, let hit = PolicyCache.lookup(key: cacheKey, top: top, files: files, in: cacheDirectory) {
            return (hit, nil)
        }
        var read: [PolicyCache.Layer] = []

        // Walk up the chain, child first. Keep reading past a file with errors so that one
        // run reports problems in the parents too.
        var layers: [PolicyLayer] = []
        var chain: [(file: PolicyFiles.File, identity: String)] = []
        var current = top
        while true {
            chain.append((current, Self.identity(ofFile: current.path)))
            let text: String
            do {
                text = try PolicyFiles.read(current.path)
            } catch {
                errors.append(error)
                break
            }
            let (layer, layerErrors) = LayerParser.parse(
                text, file: current.path, name: current.name, variables: variables,
                requireAllPlaceholders: requireAllPlaceholders)
            errors += layerErrors
            layers.append(layer)
            read.append(PolicyCache.Layer(path: current.path, name: current.name, extends: layer.extends?.value, text: text))
            guard let extends = layer.extends else { break }
            let parent: PolicyFiles.File
            do {
                parent = try locate(extends.value, besideDirectory: PolicyFiles.directory(of: current.path))
            } catch {
                errors.append(PolicyError(error.message, at: extends.location))
                break
            }
            let parentIdentity = Self.identity(ofFile: parent.path)
            if let start = chain.firstIndex(where: { $0.identity == parentIdentity }) {
                let loop = chain[start...].map(\.file.path) + [parent.path]
                errors.append(PolicyError("extends cycle: \(loop.joined(separator: " -> "))", at: extends.location))
                break
            }
            current = parent
        }

        // Merging half-read files would only produce errors about entries that were dropped.
        guard errors.isEmpty else { throw diagnostics(errors, chain: chain.map(\.file.path)) }

        var merged = MergedLayers()
        for layer in layers.reversed() {
            merged.apply(layer, errors: &errors)
        }
        merged.validate(errors: &errors)
        guard errors.isEmpty else { throw diagnostics(errors, chain: chain.map(\.file.path)) }

        let policy = Policy(
            name: top.name,
            description: merged.description,
            lineage: layers.reversed().map(\.name),
            mounts: merged.mounts.map(\.spec),
            identity: merged.identity,
            seccomp: merged.seccomp,
            network: NetworkSpec(mode: merged.networkMode, allow: merged.networkAllow?.value ?? []),
            limits: merged.limits,
            env: merged.env,
            chdir: merged.chdir?.value.path ?? "/",
            landlock: merged.landlock
        )
        if let cacheKey { PolicyCache.store(key: cacheKey, layers: read, policy: policy, in: cacheDirectory) }
        return (policy, merged)
    }

    /// The file `load` would read for `nameOrPath`.
    /// - Throws: `PolicyError` if there is no such policy.
    public func resolvePath(_ nameOrPath: String) throws -> String {
        try locate(nameOrPath, besideDirectory: nil).path
    }

    // MARK: - Finding files

    var files: PolicyFiles { PolicyFiles(searchPaths: searchPaths) }

    public func locate(_ reference: String, besideDirectory directory: String?) throws(PolicyError) -> PolicyFiles.File {
        try files.locate(reference, besideDirectory: directory)
    }

    /// Largest policy file read.
    public static let maxFileBytes = PolicyFiles.maxFileBytes

    /// What makes two spellings the same file, for cycle detection (`./a.yaml`, `a`, a symlink).
    private static func identity(ofFile path: String) -> String {
        var st = stat()
        guard stat(path, &st) == 0 else { return path }
        return "\(st.st_dev):\(st.st_ino)"
    }

    /// Errors grouped by file (the loaded file first, then its parents), each file's by line.
    private func diagnostics(_ errors: [PolicyError], chain: [String]) -> PolicyDiagnostics {
        func rank(_ error: PolicyError) -> (Int, Int, Int) {
            guard let location = error.location else { return (-1, 0, 0) }
            return (chain.firstIndex(of: location.file) ?? chain.count, location.line, location.column)
        }
        let sorted = errors.enumerated().sorted { a, b in
            let ra = rank(a.element), rb = rank(b.element)
            return ra != rb ? ra < rb : a.offset < b.offset
        }
        return PolicyDiagnostics(errors: sorted.map(\.element))
    }
}

/// A loaded policy with what `policy lint` needs beyond it.
public struct PolicyLintInput: Sendable {
    public var policy: Policy
    /// The policy's own file.
    public var file: String
    /// What a file of the chain takes back that a policy it extends closed, each at its line.
    public var widenings: [PolicyError]
    /// Where the final values were set: `landlock`, `limits.NAME`, `network.mode`,
    /// `seccomp.allow.NAME`, `seccomp.quiet.NAME`, `seccomp.deny.NAME`.
    public var places: [String: SourceLocation]
}
