import Benchmark
import ExperimentModel
import Foundation
import Sandbox

extension RemoteWorker {
    /// What a local request's tasks run with on this node besides their files: the images its
    /// tasks name, from this node's store, and the verifier tools. Refused (before the nonce)
    /// when an image is not here, when images meet a held-out VM (not built), or when the
    /// toolbox is not at the supervisor's path.
    static func nodeEnvironment(_ request: WorkRequest, _ s: Settings) throws -> (TaskImages, VerifierTools?) {
        var tools: VerifierTools?
        if let dir = request.verifierTools {
            guard request.vm == nil else { throw ExperimentError(.refused, "a request names the verifier tools and a held-out VM (not built together): refused, nothing ran") }
            do { tools = try VerifierTools(directory: dir) } catch {
                throw ExperimentError(.refused, "this node has no verifier tools at the supervisor's path: refused, nothing ran", cause: error)
            }
            let digest = try? WorkDigest.tree(dir, cache: s.stateDirectory + "/digests")
            guard digest == request.verifierToolsSHA256 else {
                throw ExperimentError(.refused, "this node's verifier tools (sha256 \((digest ?? "unreadable").prefix(16))) are not the supervisor's (\((request.verifierToolsSHA256 ?? "none").prefix(16))): refused, nothing ran")
            }
        }
        var refused: [String: String] = [:]
        for t in request.tasks { if let why = t.imageRefused { refused[t.id] = String(why.prefix(4096)) } }
        let named = request.tasks.compactMap { t in t.image.map { (t.id, $0) } }
        guard !named.isEmpty else {
            var none = TaskImages()
            none.refused = refused
            return (none, tools)
        }
        guard request.tool == nil, request.vm == nil else {
            throw ExperimentError(.refused, "a request with task images names a tool or a held-out VM (not built): refused, nothing ran")
        }
        let ids: HostIDRange
        do { ids = try ImageIDs.range() } catch { throw ExperimentError(.refused, "this node's task image ids: refused, nothing ran", cause: error) }
        var byTask: [String: TaskImage] = [:]
        for (id, image) in named {
            guard let rootfs = NodeImageStore.rootfs(image.archiveSHA256, ids: ids, state: s.stateDirectory) else {
                throw ExperimentError(.refused, "this node does not hold task \(id)'s image (archive sha256 \(image.archiveSHA256.prefix(16))): refused, nothing ran")
            }
            byTask[id] = image.onNode(rootfs: rootfs, ids: ids)
        }
        var images = TaskImages(byTask)
        images.refused = refused
        return (images, tools)
    }
}
