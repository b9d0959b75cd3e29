// Task images on worker nodes.
//
// A task that runs on its image on the supervisor's host runs on the same image on a node: the
// same files, owners and modes, not an image the node built or pulled by name, which could
// differ (a Dockerfile's `apt-get install` is not reproducible; a tag moves). The supervisor
// archives each image's unpacked files once (`ImageArchive.make`, a tar kept in its private
// directory with its SHA-256) and, before a batch, offers every accepted node the archives
// its report says it lacks (`ImagePush`): the archive encrypted under a key made for the batch,
// that key sealed to the node, the whole offer signed. The node (`worker --receive-image`)
// checks the signature and that the offer is sealed to it, decrypts the archive to a file in
// its state directory, and unpacks it only once its SHA-256 is the signed one: no archive the
// supervisor did not make is ever unpacked there. The unpacked files are shifted into the
// node's own image id range and kept under their archive's digest (`NodeImageStore`).
// A request names each task's image by that digest (`WorkImage`, signed with the request),
// and a node without it refuses the request before its nonce.
//
// What crosses Ray is ciphertext both ways (an image is a held-out task's environment too);
// what it does not hide: an archive's size, which node lacked which, and when.

import Benchmark
import Crypto
import ExperimentModel
import Foundation
import Glibc
import Sandbox
import SupervisorIO

/// A task's image as a request names it: what its sandboxes take from the image, and the
/// digest of the archive the node unpacked it from.
public struct WorkImage: Codable, Sendable, Equatable {
    /// The image's id (`sha256:…`), as the supervisor's store has it.
    public var id: String
    /// SHA-256 (hex) of the image's archive (`ImageArchive`).
    public var archiveSHA256: String
    public var workingDirectory: String
    public var environment: [String]
    public var origin: String

    public init(_ image: TaskImage, archiveSHA256: String) {
        id = image.id
        self.archiveSHA256 = archiveSHA256
        workingDirectory = image.workingDirectory
        environment = image.environment
        origin = image.origin
    }

    /// The image on a node whose store unpacked it at `rootfs` for the ids `ids`.
    func onNode(rootfs: String, ids: HostIDRange) -> TaskImage {
        TaskImage(id: id, rootfs: rootfs, workingDirectory: workingDirectory, environment: environment, ids: ids, origin: origin)
    }
}

/// One archive offered to one node (signed by the supervisor, `ImageArchive.offer`).
public struct ImagePush: Codable, Sendable {
    public static let version = 1
    public var version = ImagePush.version
    /// SHA-256 (hex) and size of the archive in the clear.
    public var archiveSHA256: String
    public var archiveBytes: Int
    /// The host ids the archive's owners are in (the supervisor's image range).
    public var ids: HostIDRange
    /// The node's sealing key (base64): no other node opens `key`.
    public var sealedTo: String
    /// The 32-byte key the archive is encrypted with, sealed to that node.
    public var key: SealedBody
    /// Unix time after which no node takes it.
    public var expires: Double
}

struct SignedPush: Codable {
    var body: Data
    var signature: Data
}

/// An image's files as one archive, on the supervisor's side.
public struct ImageArchive: Sendable {
    public var path: String
    public var sha256: String
    public var bytes: Int
    /// The host ids its owners are in.
    public var ids: HostIDRange

    /// What a push's signature covers besides its body.
    static let domain = Array("autoharness image push v1\0".utf8)
    static let keyInfo = Array("autoharness image key v1".utf8)
    /// Plaintext per encrypted chunk.
    static let chunk = 4 << 20
    /// The largest archive a node takes.
    public static let maxBytes = 64 << 30

    /// The archive of `image`'s unpacked files in `directory` (the supervisor's private one),
    /// made once: GNU tar, numeric owners, modes, links, extended attributes; its digest kept
    /// beside it.
    public static func make(_ image: TaskImage, in directory: String, progress: (String) -> Void = { _ in }) throws -> ImageArchive {
        if let e = FileSystem.makeDirectories(directory, mode: 0o700) { throw ExperimentError(.io, "\(directory): \(ErrnoName.describe(e))") }
        let hex = image.id.hasPrefix("sha256:") ? String(image.id.dropFirst(7)) : image.id
        guard !hex.isEmpty, hex.allSatisfy(\.isHexDigit) else { throw ExperimentError(.usage, "task image id '\(printable(image.id))' is not sha256:HEX") }
        let path = directory + "/\(hex)-\(image.ids.uid)-\(image.ids.gid).tar"
        if case .success(let text) = InputFile.read(path + ".sha256", cap: 256),
           let (sha, size) = parseSidecar(String(decoding: text, as: UTF8.self)), let st = ImageFiles.status(path), Int(st.st_size) == size {
            return ImageArchive(path: path, sha256: sha, bytes: size, ids: image.ids)
        }
        progress("archiving the task image \(image.id.prefix(19)) for the nodes")
        // A name of this call's own: two supervisors archiving at once never share a file.
        let partial = path + ".partial-\(getpid())-" + WorkDigest.hex((0..<6).map { _ in UInt8.random(in: 0...255) })
        defer { unlink(partial) }
        // Sparse files stay sparse (an image's /var/log/lastlog can be gigabytes of holes). What
        // tar may warn about and still exit 0 (an attribute it could not read) is a failure:
        // the node would get another tree than this host's store; but for a socket, which an
        // image's files can only hold stale.
        let made = try ChildProcess.run([try tar(), "--create", "--file", partial, "--numeric-owner", "--sparse", "--xattrs", "--xattrs-include=*",
                                         "--directory", image.rootfs, "."], environment: tarEnvironment, timeout: 3600, outputCap: 1 << 16)
        let warnings = made.output.split(separator: "\n").filter { !$0.hasSuffix(": socket ignored") }
        guard made.succeeded, warnings.isEmpty else {
            progress("tar, archiving \(image.id.prefix(19)): exit \(made.status): \(String(made.output.suffix(600)))")
            throw ExperimentError(.io, "archiving a task image for worker nodes failed (tar exited \(made.status); its output is in the supervisor's log)")
        }
        let (sha, size) = try digest(partial)
        guard size <= maxBytes else { throw ExperimentError(.usage, "a task image's archive is \(size >> 30) GiB, over the \(maxBytes >> 30) GiB a node takes") }
        guard rename(partial, path) == 0 else { throw ExperimentError(.io, "\(path): \(ErrnoName.describe(errno))") }
        do throws(IOFailure) { try AtomicFile.write(Array("\(sha) \(size)\n".utf8), to: path + ".sha256", mode: 0o600) } catch {
            throw ExperimentError(.io, "", cause: error)
        }
        return ImageArchive(path: path, sha256: sha, bytes: size, ids: image.ids)
    }

    static func parseSidecar(_ text: String) -> (String, Int)? {
        let parts = text.split(separator: " ")
        guard parts.count == 2, parts[0].count == 64, let size = Int(parts[1].trimmingCharacters(in: .whitespacesAndNewlines)) else { return nil }
        return (String(parts[0]), size)
    }

    /// tar's environment: nothing of the caller's (`TAR_OPTIONS=--dereference` would archive the
    /// host's files an image's absolute links name).
    static let tarEnvironment = ["PATH": "/usr/bin:/bin", "LC_ALL": "C"]

    static func tar() throws -> String {
        for path in ["/usr/bin/tar", "/bin/tar"] where access(path, X_OK) == 0 { return path }
        throw ExperimentError(.usage, "tar is not installed: task images travel to worker nodes as tar archives (apt-get install tar)")
    }

    /// SHA-256 and size of a file, read in chunks.
    static func digest(_ path: String) throws -> (String, Int) {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { throw ExperimentError(.io, "\(path): \(ErrnoName.describe(errno))") }
        defer { close(fd) }
        var hasher = SHA256()
        guard let total = WorkDigest.feed(fd, into: &hasher) else { throw ExperimentError(.io, "\(path): \(ErrnoName.describe(errno))") }
        return (WorkDigest.hex(hasher.finalize()), total)
    }

    /// The archive encrypted under `key` into `out`: chunks of at most `chunk` bytes, each a
    /// 4-byte big-endian length and a ChaCha20-Poly1305 box (its own random nonce). Order and
    /// completeness are not the boxes' to prove: the node checks the whole plaintext's digest.
    public func encrypt(under key: SymmetricKey, to out: String) throws {
        let input = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard input >= 0 else { throw ExperimentError(.io, "\(path): \(ErrnoName.describe(errno))") }
        defer { close(input) }
        let output = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard output >= 0 else { throw ExperimentError(.io, "\(out): \(ErrnoName.describe(errno))") }
        defer { close(output) }
        var buffer = [UInt8](repeating: 0, count: Self.chunk)
        var hasher = SHA256()
        var total = 0
        while true {
            let n = try Self.readFull(input, &buffer)
            if n == 0 { break }
            hasher.update(data: buffer[..<n])
            total += n
            let box = try ChaChaPoly.seal(buffer[..<n], using: key).combined
            var length = UInt32(box.count).bigEndian
            let head = withUnsafeBytes(of: &length) { Array($0) }
            guard ImageFiles.writeAll(output, head + Array(box)) else { throw ExperimentError(.io, "\(out): \(ErrnoName.describe(errno))") }
            if n < buffer.count { break }
        }
        // What is sent is what was digested: an archive changed since (or a digest kept for
        // another file) is refused here, and made again next time.
        guard WorkDigest.hex(hasher.finalize()) == sha256, total == bytes else {
            unlink(out)
            unlink(path + ".sha256")
            throw ExperimentError(.io, "\(path) is no longer the archive its digest names; it is made again on the next run")
        }
    }

    /// Reads until `buffer` is full or the input ends; the count read.
    static func readFull(_ fd: Int32, _ buffer: inout [UInt8]) throws -> Int {
        var got = 0
        while got < buffer.count {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + got, $0.count - got) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw ExperimentError(.io, "reading an image archive: \(ErrnoName.describe(errno))") }
            if n == 0 { break }
            got += n
        }
        return got
    }

    /// The signed offer of this archive, encrypted under `key`, to the node whose sealing key
    /// is `node` (base64).
    public func offer(key: SymmetricKey, to node: String, signedWith signer: Curve25519.Signing.PrivateKey, validFor seconds: Double = 86_400) throws -> [UInt8] {
        let raw = key.withUnsafeBytes { Data($0) }
        let push = ImagePush(archiveSHA256: sha256, archiveBytes: bytes, ids: ids, sealedTo: node,
                             key: try NodeSealKey.seal(raw, to: node, info: Self.keyInfo), expires: Date().timeIntervalSince1970 + seconds)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let body = try encoder.encode(push)
        return Array(try JSONEncoder().encode(SignedPush(body: body, signature: try signer.signature(for: Self.domain + Array(body)))))
    }
}

/// A node's unpacked task images, under its state directory, each by its archive's digest:
/// `images/<sha256>-<uid>-<gid>/`, the image's root with its owners in this node's range.
public enum NodeImageStore {
    static func directory(_ state: String) -> String { state + "/images" }

    /// Where the image of archive `sha256` is unpacked for `ids`, if it is.
    public static func rootfs(_ sha256: String, ids: HostIDRange, state: String) -> String? {
        guard sha256.count == 64, sha256.allSatisfy(\.isHexDigit) else { return nil }
        let path = directory(state) + "/\(sha256)-\(ids.uid)-\(ids.gid)"
        return ImageFiles.status(path).map(FileSystem.isDirectory) == true ? path : nil
    }

    /// Which of `digests` this node holds, unpacked for its image ids.
    public static func held(_ digests: [String], state: String) -> [String] {
        guard let ids = try? ImageIDs.range() else { return [] }
        return digests.filter { rootfs($0, ids: ids, state: state) != nil }
    }

    /// Takes one offer (`pushBytes`, as `ImageArchive.offer` made it) and its encrypted archive
    /// from `input`: refused unless signed by `trusted`, sealed to this node, unexpired, and
    /// the archive decrypts to exactly the signed size and digest; only then unpacked, into a
    /// directory of its own, its owners shifted into this node's image range, and kept under
    /// its digest. Returns where. An image held already is not taken again (its input is
    /// not read).
    public static func receive(_ pushBytes: [UInt8], input: Int32, trusted: String, state: String, scratchRoot: String) throws -> String {
        try RemoteWorker.checkStateDirectory(state)
        // Beside train work (a shared hold on the node's lock): a worker that finds none
        // running clears what a killed receive left (`lockNode`).
        _ = try RemoteWorker.lockNode(state, scratchRoot: scratchRoot, exclusive: false)
        guard let raw = Data(base64Encoded: trusted.trimmingCharacters(in: .whitespacesAndNewlines)),
              let supervisor = try? Curve25519.Signing.PublicKey(rawRepresentation: raw) else {
            throw ExperimentError(.usage, "the supervisor key is not a base64 Ed25519 public key")
        }
        guard let signed = try? JSONDecoder().decode(SignedPush.self, from: Data(pushBytes)),
              supervisor.isValidSignature(signed.signature, for: ImageArchive.domain + Array(signed.body)) else {
            throw ExperimentError(.refused, "the image offer is not signed by the supervisor: refused, nothing unpacked")
        }
        let push: ImagePush
        do { push = try JSONDecoder().decode(ImagePush.self, from: signed.body) } catch {
            throw ExperimentError(.refused, "the signed image offer does not decode", cause: error)
        }
        let nodeKey = try NodeSealKey.load(orCreateAt: state + "/node-key")
        guard push.version == ImagePush.version, push.sealedTo == NodeSealKey.publicText(nodeKey),
              let opened = NodeSealKey.open(push.key, with: nodeKey, info: ImageArchive.keyInfo), opened.count == 32 else {
            throw ExperimentError(.refused, "the image offer is for another node: refused, nothing unpacked")
        }
        guard push.expires > Date().timeIntervalSince1970 else { throw ExperimentError(.refused, "the image offer expired: refused, nothing unpacked") }
        guard push.archiveSHA256.count == 64, push.archiveSHA256.allSatisfy(\.isHexDigit), (0...ImageArchive.maxBytes).contains(push.archiveBytes),
              push.ids.count == ImageIDs.span else {
            throw ExperimentError(.refused, "the image offer's digest, size or id range is not valid: refused, nothing unpacked")
        }
        let ids: HostIDRange
        do { ids = try ImageIDs.range() } catch { throw ExperimentError(.io, "this node's image id range", cause: error) }
        if let held = rootfs(push.archiveSHA256, ids: ids, state: state) { return held }
        let store = directory(state)
        if let e = FileSystem.makeDirectories(store, mode: 0o700) { throw ExperimentError(.io, "\(store): \(ErrnoName.describe(e))") }
        let staging = store + "/.partial-\(push.archiveSHA256)-\(getpid())"
        _ = FileSystem.removeTree(staging)
        defer { _ = FileSystem.removeTree(staging) }
        guard mkdir(staging, 0o700) == 0, mkdir(staging + "/root", 0o755) == 0 else { throw ExperimentError(.io, "\(staging): \(ErrnoName.describe(errno))") }
        // Room for the archive and its unpacked files (about as large), and a gigabyte to spare.
        var vfs = statvfs()
        // (A file system that states no size, as ramfs, is not measured.)
        if statvfs(store, &vfs) == 0, vfs.f_blocks > 0, UInt64(vfs.f_bavail) * UInt64(vfs.f_frsize) < 2 * UInt64(push.archiveBytes) + (1 << 30) {
            throw ExperimentError(.io, "no room in \(store) for a task image of \(push.archiveBytes >> 20) MiB (twice that and 1 GiB are needed): nothing unpacked")
        }
        let tarFile = staging + "/archive.tar"
        try decrypt(input, key: SymmetricKey(data: opened), to: tarFile, expected: push)
        let tar = try ImageArchive.tar()
        let unpacked = try ChildProcess.run([tar, "--extract", "--file", tarFile, "--numeric-owner", "--same-owner", "--same-permissions",
                                             "--xattrs", "--xattrs-include=*", "--warning=no-timestamp", "--directory", staging + "/root"],
                                            environment: ImageArchive.tarEnvironment, timeout: 3600, outputCap: 1 << 16)
        unlink(tarFile)
        // A warning (an attribute this file system cannot hold) leaves another tree than the
        // supervisor's: a failure, as an exit status would be. (A time stamp in the future is
        // kept as it is, and not warned of.)
        guard unpacked.succeeded, unpacked.output.isEmpty else {
            throw ExperimentError(.io, "unpacking task image \(push.archiveSHA256.prefix(16)): tar exited \(unpacked.status): \(String(unpacked.output.suffix(600)))")
        }
        // Every owner into this node's range, from the range the archive was made in: an entry
        // outside that range (none, from the supervisor's store) becomes the range's nobody.
        if push.ids != ids && (ids.holds(uid: push.ids.uid) || push.ids.holds(uid: ids.uid) || ids.holds(gid: push.ids.gid) || push.ids.holds(gid: ids.gid)) {
            throw ExperimentError(.usage, "this node's image id range (\(ids.uid):\(ids.gid)) overlaps the supervisor's (\(push.ids.uid):\(push.ids.gid)) without being it: give both the same range, or ranges apart (/etc/subuid, /etc/subgid)")
        }
        do throws(IOFailure) {
            try FileSystem.shiftOwners(of: staging + "/root", uid: ids.uid, gid: ids.gid, count: ids.count, fromUID: push.ids.uid, fromGID: push.ids.gid)
        } catch {
            throw ExperimentError(.io, "task image \(push.archiveSHA256.prefix(16)): shifting its owners into this node's range", cause: error)
        }
        // On disk before it is named: a crash never leaves a torn image under its digest.
        let synced = try ChildProcess.run(["/bin/sync", "--file-system", staging + "/root"], environment: ImageArchive.tarEnvironment, timeout: 600)
        guard synced.succeeded else { throw ExperimentError(.io, "\(staging): sync --file-system: \(String(synced.output.suffix(300)))") }
        let final = store + "/\(push.archiveSHA256)-\(ids.uid)-\(ids.gid)"
        guard rename(staging + "/root", final) == 0 else {
            if errno == EEXIST || errno == ENOTEMPTY, let held = rootfs(push.archiveSHA256, ids: ids, state: state) { return held }
            throw ExperimentError(.io, "\(final): \(ErrnoName.describe(errno))")
        }
        return final
    }

    /// The encrypted chunks from `input` into `out`, refused (and `out` removed) unless they
    /// open and their plaintext is exactly the offer's size and digest.
    static func decrypt(_ input: Int32, key: SymmetricKey, to out: String, expected push: ImagePush) throws {
        let output = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard output >= 0 else { throw ExperimentError(.io, "\(out): \(ErrnoName.describe(errno))") }
        defer { close(output) }
        var hasher = SHA256()
        var total = 0
        var head = [UInt8](repeating: 0, count: 4)
        let limit = ImageArchive.chunk + 12 + 16
        while true {
            let n = try ImageArchive.readFull(input, &head)
            if n == 0 { break }
            let length = Int(head.reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
            guard n == 4, (29...limit).contains(length) else { unlink(out); throw ExperimentError(.refused, "the image archive's framing is not valid: refused, nothing unpacked") }
            var box = [UInt8](repeating: 0, count: length)
            guard try ImageArchive.readFull(input, &box) == length, let sealed = try? ChaChaPoly.SealedBox(combined: box),
                  let plain = try? ChaChaPoly.open(sealed, using: key) else {
                unlink(out)
                throw ExperimentError(.refused, "the image archive does not decrypt with the offer's key: refused, nothing unpacked")
            }
            total += plain.count
            guard total <= push.archiveBytes else { unlink(out); throw ExperimentError(.refused, "the image archive is longer than its offer says: refused, nothing unpacked") }
            hasher.update(data: plain)
            guard ImageFiles.writeAll(output, Array(plain)) else { let e = errno; unlink(out); throw ExperimentError(.io, "\(out): \(ErrnoName.describe(e))") }
        }
        guard total == push.archiveBytes, WorkDigest.hex(hasher.finalize()) == push.archiveSHA256 else {
            unlink(out)
            throw ExperimentError(.refused, "the image archive is not the one its offer names (size or SHA-256): refused, nothing unpacked")
        }
    }
}

enum ImageFiles {
    /// The status of `path` itself (a link is not followed), or nil.
    static func status(_ path: String) -> stat? {
        var st = stat()
        return lstat(path, &st) == 0 ? st : nil
    }

    /// Writes all of `bytes`; false (errno set) on a failure.
    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, $0.count - done) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            done += n
        }
        return true
    }
}
