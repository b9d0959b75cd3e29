import Benchmark
import ExperimentModel
import Foundation

extension ExperimentSupervisor {
    /// `autoharness images`: builds the image of every task of a `local` benchmark, or of a
    /// `terminal-bench` one with `env_provider: local`, with an environment/Dockerfile or a
    /// docker_image (podman, on this host), for the host ids image sandboxes run as (`ImageIDs`).
    /// Returns how many tasks have an image now, and the problems of those that do not.
    public func buildImages(log: (String) -> Void) throws -> (images: Int, problems: [String: String]) {
        let tasks: [BenchmarkTask]
        if let local = adapter as? LocalAdapter {
            tasks = local.benchmark.tasks
        } else if let harbor = adapter as? HarborAdapter, harbor.environmentProvider == "local" {
            tasks = harbor.localTasks.filter { $0.problem == nil }
        } else {
            throw ExperimentError(.usage, "autoharness images builds the images of a local benchmark's tasks, or terminal-bench's with env_provider: local; \(adapter.name) runs its tasks otherwise")
        }
        let store = TaskImageStore(experimentRoot: layout.root)
        let problems = try store.prepare(tasks, ids: try ImageIDs.range(), progress: log)
        return (store.load(tasks).images.byTask.count, problems)
    }
}
