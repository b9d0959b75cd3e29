// Policy files parsed once per process.
//
// A supervisor loads the same two policies for every task it runs (the agent's and the
// verifier's), each with its own placeholder values; composing the YAML tree is most of what
// a load costs. The tree depends only on the file's text, so it is kept keyed by the whole
// text's bytes (`Exact`: never String ==, which is Unicode canonical equivalence and would
// take a text edited from K to U+212A KELVIN SIGN for the one parsed before): a file that
// changes in any byte is a different key, and nothing can be stale.
// Placeholders are filled in later, by the walk over the tree, on every load. A file with no
// placeholder at all (no brace) keeps its walked layer too, keyed by text, path and name.

import Glibc
import Yams

enum ComposedYAML {
    /// Most texts kept; a supervisor uses a handful. Beyond it the cache starts over.
    static let capacity = 32

    /// Calls `body` with the tree of `text`, composing it only if this exact text has not been
    /// composed before. Yams' nodes hold reference-typed tags that it resolves in place, so
    /// a tree is only ever read under the lock, by one thread at a time.
    static func withTree<R>(_ text: String, _ body: (Node?) -> R) throws -> R {
        try store.withLock { trees in
            let key = Exact(text)
            if let hit = trees[key] { return body(hit) }
            let root = try YAMLReader.tree(text)
            if trees.count >= capacity { trees.removeAll() }
            trees[key] = root
            return body(root)
        }
    }

    /// Whether the tree of `text` is kept (tests).
    static func contains(_ text: String) -> Bool { store.withLock { $0[Exact(text)] != nil } }

    /// The parsed layer of a file without placeholders, whose result cannot depend on the
    /// values a load passes (errors included, sorted as `LayerParser.parse` returns them).
    static func constantLayer(text: String, file: String, name: String) -> (PolicyLayer, [PolicyError])? {
        constants.withLock { $0[ConstantKey(text: Exact(text), file: Exact(file), name: Exact(name))] }
    }

    static func keepConstantLayer(text: String, file: String, name: String, _ result: (PolicyLayer, [PolicyError])) {
        constants.withLock {
            if $0.count >= capacity { $0.removeAll() }
            $0[ConstantKey(text: Exact(text), file: Exact(file), name: Exact(name))] = result
        }
    }

    struct ConstantKey: Hashable {
        var text: Exact
        var file: Exact
        var name: Exact
    }

    /// A string compared and hashed by its UTF-8 bytes.
    struct Exact: Hashable {
        let utf8: [UInt8]
        init(_ s: String) { utf8 = Array(s.utf8) }
    }

    private static let store = TreeStore([:])
    private static let constants = Store<[ConstantKey: (PolicyLayer, [PolicyError])]>([:])

    private typealias TreeStore = Store<[Exact: Node?]>

    private final class Store<Value>: @unchecked Sendable {
        private var mutex = pthread_mutex_t()
        private var value: Value

        init(_ value: Value) {
            self.value = value
            pthread_mutex_init(&mutex, nil)
        }

        func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
            pthread_mutex_lock(&mutex)
            defer { pthread_mutex_unlock(&mutex) }
            return try body(&value)
        }
    }
}
