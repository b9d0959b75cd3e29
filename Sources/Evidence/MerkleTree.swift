import Crypto

/// The Merkle Tree Hash of RFC 6962 §2.1 (Certificate Transparency; RFC 9162 §2.1 unchanged):
/// a leaf is SHA-256(0x00 ‖ data), a node SHA-256(0x01 ‖ left ‖ right), and a tree of n > 1
/// leaves splits at the largest power of two below n. One tree per split's per-task rewards
/// (`RewardLeaf`): its root goes into a bundle, and one leaf's audit path proves that task's
/// reward without showing any other (the eval-result predicate's per-sample root, in-toto
/// attestation PR 575).
public enum MerkleTree {
    public typealias Hash = [UInt8]

    public static func leafHash(_ data: [UInt8]) -> Hash { Array(SHA256.hash(data: [0x00] + data)) }
    static func nodeHash(_ left: Hash, _ right: Hash) -> Hash { Array(SHA256.hash(data: [0x01] + left + right)) }

    /// The root of `leaves` (each the leaf's data, not its hash); the hash of the empty string
    /// for none.
    public static func root(_ leaves: [[UInt8]]) -> Hash { root(hashes: leaves.map(leafHash)) }

    static func root(hashes: ArraySlice<Hash>) -> Hash {
        switch hashes.count {
        case 0: return Array(SHA256.hash(data: [UInt8]()))
        case 1: return hashes[hashes.startIndex]
        default:
            let k = split(hashes.count)
            return nodeHash(root(hashes: hashes.prefix(k)), root(hashes: hashes.dropFirst(k)))
        }
    }
    static func root(hashes: [Hash]) -> Hash { root(hashes: hashes[...]) }

    /// The largest power of two smaller than n (n > 1).
    static func split(_ n: Int) -> Int {
        var k = 1
        while k << 1 < n { k <<= 1 }
        return k
    }

    /// The audit path of leaf `index` (RFC 6962 §2.1.1 PATH(m, D[n])), leaf side first.
    public static func auditPath(_ index: Int, _ leaves: [[UInt8]]) -> [Hash] {
        precondition(index >= 0 && index < leaves.count)
        return path(index, leaves.map(leafHash)[...])
    }

    static func path(_ m: Int, _ hashes: ArraySlice<Hash>) -> [Hash] {
        guard hashes.count > 1 else { return [] }
        let k = split(hashes.count)
        if m < k { return path(m, hashes.prefix(k)) + [root(hashes: hashes.dropFirst(k))] }
        return path(m - k, hashes.dropFirst(k)) + [root(hashes: hashes.prefix(k))]
    }

    /// True when `leaf` is leaf `index` of a tree of `size` leaves whose root is `root`
    /// (RFC 9162 §2.1.3.2's verification, which also rejects a path of the wrong length).
    public static func verify(leaf: [UInt8], index: Int, size: Int, path: [Hash], root: Hash) -> Bool {
        guard index >= 0, index < size, path.allSatisfy({ $0.count == 32 }) else { return false }
        var fn = index
        var sn = size - 1
        var r = leafHash(leaf)
        for p in path {
            guard sn != 0 else { return false }
            if fn & 1 == 1 || fn == sn {
                r = nodeHash(p, r)
                if fn & 1 == 0 {
                    while fn & 1 == 0 && fn != 0 {
                        fn >>= 1
                        sn >>= 1
                    }
                }
            } else {
                r = nodeHash(r, p)
            }
            fn >>= 1
            sn >>= 1
        }
        return sn == 0 && r == root
    }
}
