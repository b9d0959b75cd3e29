import Benchmark
import Foundation
import Glibc
import SupervisorIO

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

    /// For benchmark `name`, whose task directories (of `dataset`) are `tasks` where its tasks
    /// can run on their own image (`BenchmarkKind.imageTasks`).
    package func plan(benchmark name: String, tasks: String?, dataset: String) throws -> Plan {
        guard self != .none else { return Plan(build: false) }
        guard let tasks else {
            if self == .build { throw ExperimentError(.usage, "--images build: \(name) does not run its tasks on images") }
            return Plan(build: false)
        }
        let count = Self.imageTasks(tasks)
        guard count > 0 else {
            if self == .build { throw ExperimentError(.usage, "--images build: no task of \(dataset) has a docker_image or an environment/Dockerfile") }
            return Plan(build: false)
        }
        var missing: [String] = []
        if Self.onPath("podman") == nil { missing.append("podman is not on PATH (apt-get install podman)") }
        if (try? VerifierTools(directory: ExperimentLayout.defaultVerifierTools)) == nil {
            missing.append("the verifier tools, which a task on its image needs, are not at \(ExperimentLayout.defaultVerifierTools) (scripts/install-verifier-tools)")
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
            guard case .success(let bytes) = InputFile.read(t + "/task.toml", cap: LocalBenchmark.maxTaskTomlBytes) else { return false }
            return String(decoding: bytes, as: UTF8.self).split(separator: "\n").contains { $0.trimmingCharacters(in: .whitespaces).hasPrefix("docker_image") }
        }.count
    }

    static func onPath(_ program: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        return path.split(separator: ":").map { $0 + "/" + program }.first { access($0, X_OK) == 0 }
    }
}
