import Glibc
import PolicyModel
import SupervisorIO

/// Finding and reading policy files: what `PolicyLoader` does before any YAML is parsed, and
/// all that `PolicyCache` needs to decide that a loaded policy still stands. Plain libc and
/// no Foundation: `sandbox exec`'s front (autoharness-front) uses it on every launch.
public struct PolicyFiles: Sendable {
    /// Directories holding `NAME.yaml`, searched in order for bare policy names.
    public var searchPaths: [String]

    public init(searchPaths: [String]) {
        self.searchPaths = searchPaths
    }

    public struct File: Sendable, Equatable {
        public var path: String
        /// How it was referred to: the bare name, or the path as given.
        public var name: String

        public init(path: String, name: String) {
            self.path = path
            self.name = name
        }
    }

    /// Bare names are looked up as `NAME.yaml` in `besideDirectory` (the extending file's
    /// directory, so a policy set can be moved as a unit), then in `searchPaths`. Relative
    /// paths in `extends:` are relative to the extending file, not the working directory.
    public func locate(_ reference: String, besideDirectory directory: String?) throws(PolicyError) -> File {
        guard !reference.isEmpty else { throw PolicyError("empty policy name") }
        if reference.contains("/") || reference.hasSuffix(".yaml") || reference.hasSuffix(".yml") {
            let path = reference.hasPrefix("/") ? reference : directory.map { Self.join($0, reference) } ?? reference
            guard Self.isRegularFile(path) else { throw PolicyError("policy file \(path) does not exist") }
            return File(path: path, name: reference)
        }
        guard Self.isValidName(reference) else {
            throw PolicyError(
                "'\(reference)' is neither a policy name ([A-Za-z0-9_-], then also '.') nor a path ending in .yaml")
        }
        let directories = (directory.map { [$0] } ?? []) + searchPaths
        for candidate in directories.map({ Self.join($0, reference + ".yaml") }) where Self.isRegularFile(candidate) {
            return File(path: candidate, name: reference)
        }
        guard !directories.isEmpty else {
            throw PolicyError("no policy named '\(reference)': no policy directories are configured")
        }
        let available = Set(directories.flatMap(Self.policyNames(in:))).sorted()
        let availableNote = available.isEmpty ? "none found" : available.joined(separator: ", ")
        throw PolicyError(
            "no policy named '\(reference)' (looked for \(reference).yaml in \(directories.joined(separator: ", ")); available: \(availableNote))")
    }

    public static func isValidName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first != "." else { return false }
        return name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0)
                || $0 == "_" || $0 == "-" || $0 == "."
        }
    }

    /// Names of the policies in `directory` (followed if it is a symlink), for the message
    /// that a name was not found.
    private static func policyNames(in directory: String) -> [String] {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        return (FileSystem.entries(of: fd) ?? []).map(FileSystem.display)
            .filter { $0.hasSuffix(".yaml") && !$0.hasPrefix(".") }.map { String($0.dropLast(5)) }
    }

    private static func isRegularFile(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG
    }

    /// Largest policy file read.
    public static let maxFileBytes = 1 << 20

    public static func read(_ path: String) throws(PolicyError) -> String {
        let bytes: [UInt8]
        switch InputFile.read(path, cap: maxFileBytes) {
        case .success(let b): bytes = b
        case .failure(let problem): throw PolicyError("policy file \(path): \(problem.explanation("a policy file"))")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw PolicyError("policy file \(path) is not valid UTF-8")
        }
        return text
    }

    public static func directory(of path: String) -> String { POSIX.split(path).directory }

    public static func join(_ directory: String, _ name: String) -> String {
        if directory == "." || directory.isEmpty { return name }
        return directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }
}
