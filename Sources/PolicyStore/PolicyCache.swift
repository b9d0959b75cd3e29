import Glibc
import PolicyModel
import SupervisorIO
import WireCoding

/// Loaded policies kept between runs (`PolicyLoader.usesCache`, `RootOwnedCache`'s
/// `policy/`), so that a one-shot `sandbox exec` does not parse and merge the same YAML
/// layers on every launch. No YAML and no Foundation here: `sandbox exec`'s front
/// (autoharness-front) looks entries up itself and hands a miss to the full CLI, which
/// loads the policy and stores it.
///
/// An entry is used only when every input of the load it records is unchanged:
/// - the key: the binary that stored it (the full CLI; `RootOwnedCache.binaryIdentity` there,
///   its file's identity in the front) and, for `sandbox exec`, the build of the launch code
///   (`LaunchCode.digest`: the front launches with its own), the search paths, the name or
///   path asked for, the variables, and whether placeholders must all resolve;
/// - the chain: each layer's path, name, `extends:` reference and full text. The top is found
///   again by the same lookup a load makes, each parent by looking up the recorded reference
///   beside its child, and each file is read and compared byte for byte. An edited layer, a
///   new file that now shadows one (an earlier search path, beside the child), or a layer
///   removed is a miss.
/// Only loads that succeeded are stored; a miss loads afresh (with full diagnostics).
public enum PolicyCache {
    public struct Layer: Equatable {
        public var path: String
        public var name: String
        public var extends: String?
        public var text: String

        public init(path: String, name: String, extends: String?, text: String) {
            self.path = path
            self.name = name
            self.extends = extends
            self.text = text
        }
    }

    public static let suffix = ".policy"

    public static func key(searchPaths: [String], nameOrPath: String, variables: [String: String], strict: Bool,
                           binary: String = RootOwnedCache.binaryIdentity, launchCode: String = "") -> String {
        var key = "autoharness policy \(PolicyCoding.version)\n" + RootOwnedCache.frame(binary)
        key += "\nlaunch code " + RootOwnedCache.frame(launchCode)
        key += "\nsearch " + searchPaths.map(RootOwnedCache.frame).joined()
        key += "\nname " + RootOwnedCache.frame(nameOrPath)
        key += "\nstrict \(strict ? 1 : 0)\nvars"
        for (k, v) in variables.sorted(by: { $0.key < $1.key }) { key += " " + RootOwnedCache.frame(k) + RootOwnedCache.frame(v) }
        return key
    }

    /// The recorded policy, if the layers `files` finds now, from `top`, are exactly the
    /// recorded ones.
    public static func lookup(key: String, top: PolicyFiles.File, files: PolicyFiles, in dir: String?) -> Policy? {
        guard let body = RootOwnedCache.load(key: key, suffix: suffix, in: dir, maxBytes: 64 << 20) else { return nil }
        var r = ByteReader(body)
        guard let count = r.count(), count > 0 else { return nil }
        var layers: [Layer] = []
        for _ in 0..<count {
            guard let path = r.string(), let name = r.string(), let extends = r.optional({ $0.string() }),
                  let text = r.string() else { return nil }
            layers.append(Layer(path: path, name: name, extends: extends, text: text))
        }
        // The chain as recorded: each layer but the last extends the next.
        guard layers.dropLast().allSatisfy({ $0.extends != nil }), layers.last?.extends == nil else { return nil }
        // Byte for byte, never String ==: Swift's equality is Unicode canonical equivalence,
        // and a path or a policy's text may change meaning (K and U+212A KELVIN SIGN name
        // different files) while comparing equal.
        func same(_ a: String, _ b: String) -> Bool { a.utf8.elementsEqual(b.utf8) }
        var expected = top
        for (i, layer) in layers.enumerated() {
            guard same(expected.path, layer.path), same(expected.name, layer.name),
                  let text = try? PolicyFiles.read(expected.path), same(text, layer.text) else { return nil }
            if let reference = layer.extends {
                guard i + 1 < layers.count,
                      let parent = try? files.locate(reference, besideDirectory: PolicyFiles.directory(of: expected.path)) else { return nil }
                expected = parent
            }
        }
        return PolicyCoding.decode(r.rest())
    }

    public static func store(key: String, layers: [Layer], policy: Policy, in dir: String?) {
        var w = ByteWriter()
        w.count(layers.count)
        for l in layers {
            w.string(l.path)
            w.string(l.name)
            w.optional(l.extends) { $0.string($1) }
            w.string(l.text)
        }
        w.raw(PolicyCoding.encode(policy))
        RootOwnedCache.store(key: key, suffix: suffix, body: w.bytes, in: dir)
    }
}
