import Benchmark
import ExperimentModel
import Foundation

struct ImagesOperation {
    let experiment: ExperimentContext

    /// `autoharness images`: builds the image of every task of a `local` benchmark, or of a
    /// `terminal-bench` one with `env_provider: local`, with an environment/Dockerfile or a
    /// docker_image (podman, on this host), for the host ids image sandboxes run as (`ImageIDs`).
    /// Returns how many tasks have an image now, and the problems of those that do not.
    func buildImages(log: (String) -> Void) throws -> (images: Int, problems: [String: String]) {
        let tasks: [BenchmarkTask]
        if let local = experiment.adapter as? LocalAdapter {
            tasks = local.benchmark.tasks
        } else if let harbor = experiment.adapter as? HarborAdapter, harbor.environmentProvider == "local" {
            tasks = harbor.localTasks.filter { $0.problem == nil }
        } else {
            throw ExperimentError(.usage, "autoharness images builds the images of a local benchmark's tasks, or terminal-bench's with env_provider: local; \(experiment.adapter.name) runs its tasks otherwise")
        }
        let store = TaskImageStore(experimentRoot: experiment.layout.root)
        let problems = try store.prepare(tasks, ids: try ImageIDs.range(), progress: log)
        return (store.load(tasks).images.byTask.count, problems)
    }
}
