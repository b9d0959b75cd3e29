import Benchmark
import Foundation

extension ExperimentSupervisor {
    /// Where this experiment's task images are kept (`TaskImageStore`).
    static func imageStore(root: String) -> TaskImageStore {
        TaskImageStore(directory: ExperimentLayout(root: root).privateDirectory + "/images")
    }

    /// `autoharness images`: builds the image of every task of a `local` benchmark with an
    /// environment/Dockerfile (podman, on this host), for the host ids image sandboxes run as
    /// (`ImageIDs`).
    /// Returns how many tasks have an image now, and the problems of those that do not.
    public func buildImages(log: (String) -> Void) throws -> (images: Int, problems: [String: String]) {
        guard let local = adapter as? LocalAdapter else {
            throw ExperimentError(.usage, "autoharness images builds the images of a local benchmark's tasks; \(adapter.name) runs its tasks otherwise")
        }
        let store = Self.imageStore(root: layout.root)
        let problems = try store.prepare(local.benchmark.tasks, ids: try ImageIDs.range(), progress: log)
        return (store.load(local.benchmark.tasks).images.byTask.count, problems)
    }
}
