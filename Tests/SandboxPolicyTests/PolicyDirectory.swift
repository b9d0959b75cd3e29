import Foundation
import PolicyStore
import Testing

@testable import SandboxPolicy

/// A throwaway directory of policy files, removed when the value is released.
final class PolicyDirectory {
    let path: String

    init(_ files: [String: String]) throws {
        path = FileManager.default.temporaryDirectory
            .appendingPathComponent("sandbox-policy-tests-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        for (name, text) in files {
            try write(name, text)
        }
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }

    func write(_ name: String, _ text: String) throws {
        let file = path + "/" + name
        try FileManager.default.createDirectory(
            atPath: PolicyFiles.directory(of: file), withIntermediateDirectories: true)
        try text.write(toFile: file, atomically: true, encoding: .utf8)
    }

    var loader: PolicyLoader { PolicyLoader(searchPaths: [path]) }

    func load(_ name: String, variables: [String: String] = [:], requireAllPlaceholders: Bool = true) throws -> Policy {
        try loader.load(name, variables: variables, requireAllPlaceholders: requireAllPlaceholders)
    }

    /// The errors loading `name` produces; records an issue if it loads.
    func errors(
        _ name: String, variables: [String: String] = [:], requireAllPlaceholders: Bool = true,
        sourceLocation: Testing.SourceLocation = #_sourceLocation
    ) -> [PolicyError] {
        do {
            let policy = try load(name, variables: variables, requireAllPlaceholders: requireAllPlaceholders)
            Issue.record("expected \(name) to fail, but it loaded: \(policy)", sourceLocation: sourceLocation)
            return []
        } catch let diagnostics as PolicyDiagnostics {
            return diagnostics.errors
        } catch {
            Issue.record("unexpected error type \(type(of: error)): \(error)", sourceLocation: sourceLocation)
            return []
        }
    }

    /// The single error loading `name` produces.
    func error(
        _ name: String, variables: [String: String] = [:], requireAllPlaceholders: Bool = true,
        sourceLocation: Testing.SourceLocation = #_sourceLocation
    ) -> PolicyError? {
        let all = errors(name, variables: variables, requireAllPlaceholders: requireAllPlaceholders,
                         sourceLocation: sourceLocation)
        #expect(all.count == 1, "expected exactly one error, got: \(all)", sourceLocation: sourceLocation)
        return all.first
    }
}

extension PolicyError {
    /// The file name (not the temp directory) and line, for compact assertions.
    var where_: String {
        guard let location else { return "-" }
        return "\(location.file.split(separator: "/").last ?? ""):\(location.line)"
    }
}

/// The package's own `policies/` directory, found from this file's path.
let shippedPolicies: String = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("policies").path
