import Benchmark
import Foundation
import Glibc

/// `init --images`: whether a new experiment's tasks get their own image now, as a
/// registry download would, so that every task runs on it without further configuration.
public enum ImagesAtInit: String, Sendable, CaseIterable {
    /// Where podman is on PATH, the verifier tools are installed, and the dataset has tasks
    /// with an image (a `docker_image` or an environment/Dockerfile).
    case auto
    /// As auto, and refused when podman or the verifier tools are missing.
    case build
    /// No image: tasks run on the host's userland until `autoharness images`.
    case none

    public struct Plan: Sendable {
        /// Make the images once the experiment exists.
        public var build: Bool
        /// Why not, for `auto` (printed by init).
        public var note: String?
    }

    /// The benchmarks whose tasks can run on their image.
    static let benchmarks = ["local", "terminal-bench"]

    func plan(benchmark: String, dataset: String) throws -> Plan {
        guard self != .none else { return Plan(build: false) }
        guard Self.benchmarks.contains(benchmark) else {
            if self == .build { throw ExperimentError(.usage, "--images build: \(benchmark) does not run its tasks on images (\(Self.benchmarks.joined(separator: ", ")) do)") }
            return Plan(build: false)
        }
        let count = Self.imageTasks(benchmark == "local" ? dataset + "/tasks" : dataset)
        guard count > 0 else {
            if self == .build { throw ExperimentError(.usage, "--images build: no task of \(dataset) has a docker_image or an environment/Dockerfile") }
            return Plan(build: false)
        }
        var missing: [String] = []
        if Self.onPath("podman") == nil { missing.append("podman is not on PATH (apt-get install podman)") }
        if (try? VerifierTools(directory: ExperimentSupervisor.defaultVerifierTools)) == nil {
            missing.append("the verifier tools, which a task on its image needs, are not at \(ExperimentSupervisor.defaultVerifierTools) (scripts/install-verifier-tools)")
        }
        guard missing.isEmpty else {
            if self == .build { throw ExperimentError(.usage, "--images build: " + missing.joined(separator: "; ")) }
            return Plan(build: false, note: "images: \(count) task(s) have an image, not made: \(missing.joined(separator: "; ")); they run on this host's userland until `autoharness images`")
        }
        return Plan(build: true)
    }

    /// Task directories under `directory` with a docker_image or an environment/Dockerfile.
    static func imageTasks(_ directory: String) -> Int {
        let fm = FileManager.default
        guard let names = try? fm.contentsOfDirectory(atPath: directory) else { return 0 }
        return names.filter { name in
            let t = directory + "/" + name
            if fm.fileExists(atPath: t + "/environment/Dockerfile") { return true }
            guard let toml = try? String(contentsOfFile: t + "/task.toml", encoding: .utf8) else { return false }
            return toml.split(separator: "\n").contains { $0.trimmingCharacters(in: .whitespaces).hasPrefix("docker_image") }
        }.count
    }

    static func onPath(_ program: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        return path.split(separator: ":").map { $0 + "/" + program }.first { access($0, X_OK) == 0 }
    }
}
