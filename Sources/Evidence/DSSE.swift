import Crypto
import Execution
import ExperimentModel
import Foundation
import SupervisorIO

// DSSE v1 (github.com/secure-systems-lab/dsse, "envelope.md" and "protocol.md"): the signature
// covers PAE(payloadType, payload), never the JSON the envelope is written in, so a verifier
// checks bytes before it parses anything. Keys follow securesystemslib's shape
// ({"keytype":"ed25519","scheme":"ed25519","keyval":{"public":HEX}}) and its key id (SHA-256 of
// that object's canonical JSON), so `securesystemslib.dsse.Envelope.verify` and in-toto's
// Envelope accept our envelopes as they are (EvidenceTests.referenceImplementations).

/// A DSSE envelope as it is written: the payload base64, one signature per key.
public struct DSSEEnvelope: Codable, Sendable, Equatable {
    public struct Signature: Codable, Sendable, Equatable {
        public var keyid: String
        /// Base64 of the raw signature (64 bytes for Ed25519).
        public var sig: String
    }

    /// Base64 (standard alphabet, padded) of the signed bytes.
    public var payload: String
    public var payloadType: String
    public var signatures: [Signature]

    /// The bytes of standard, padded base64 that re-encodes to itself: the unused bits of the
    /// last character are zero, so no two texts carry the same bytes (the bundle is what was
    /// written, bit for bit).
    static func canonicalBase64(_ text: String) -> Data? {
        guard let d = Data(base64Encoded: text), d.base64EncodedString() == text else { return nil }
        return d
    }

    /// The Pre-Authentication Encoding: "DSSEv1 SP LEN(type) SP type SP LEN(body) SP body",
    /// lengths in ASCII decimal of the bytes.
    public static func pae(type: String, body: [UInt8]) -> [UInt8] {
        let t = Array(type.utf8)
        return Array("DSSEv1 \(t.count) ".utf8) + t + Array(" \(body.count) ".utf8) + body
    }

    /// `body` signed with `key` under `type`.
    public static func sign(_ body: [UInt8], type: String, with key: Curve25519.Signing.PrivateKey) throws -> DSSEEnvelope {
        let signature = try key.signature(for: pae(type: type, body: body))
        return DSSEEnvelope(payload: Data(body).base64EncodedString(), payloadType: type,
                            signatures: [Signature(keyid: EvidenceKey.keyID(key.publicKey), sig: Data(signature).base64EncodedString())])
    }

    /// The payload's bytes when a signature whose key id is `key`'s verifies over them;
    /// otherwise what is wrong. Nothing of the payload is parsed before this.
    public func verifiedPayload(_ key: Curve25519.Signing.PublicKey) throws(EvidenceError) -> [UInt8] {
        guard let body = Self.canonicalBase64(payload) else { throw EvidenceError("the envelope's payload is not canonical base64") }
        let id = EvidenceKey.keyID(key)
        let mine = signatures.filter { $0.keyid == id }
        guard !mine.isEmpty else {
            throw EvidenceError("no signature by key \(id) (the envelope is signed by \(signatures.map { EvidenceVerifier.shown($0.keyid) }.joined(separator: ", ")))")
        }
        let signed = Self.pae(type: payloadType, body: Array(body))
        for s in mine {
            if let raw = Self.canonicalBase64(s.sig), key.isValidSignature(raw, for: signed) { return Array(body) }
        }
        throw EvidenceError("the signature by key \(id) does not verify: the payload, its type or the signature was changed")
    }
}

/// The key types as the command line names them (it does not import Crypto).
public typealias EvidenceSigningKey = Curve25519.Signing.PrivateKey
public typealias EvidencePublicKey = Curve25519.Signing.PublicKey

/// The bundle's signing key: Ed25519, the experiment's own (made on first use in its private
/// directory, 0600) or the operator's (`--key`, a PKCS#8 PEM as `openssl genpkey -algorithm
/// ed25519` writes).
public enum EvidenceKey {
    /// The securesystemslib key object of `key` (also what a bundle carries).
    public static func sslib(_ key: Curve25519.Signing.PublicKey) -> SSLibKey {
        SSLibKey(keytype: "ed25519", scheme: "ed25519", keyval: .init(public: WorkDigest.hex(key.rawRepresentation)))
    }

    /// securesystemslib's default key id: SHA-256 of the key object's canonical JSON (sorted
    /// keys, no whitespace; `compute_default_keyid`).
    public static func keyID(_ key: Curve25519.Signing.PublicKey) -> String {
        let text = #"{"keytype":"ed25519","keyval":{"public":""# + WorkDigest.hex(key.rawRepresentation) + #""},"scheme":"ed25519"}"#
        return WorkDigest.hex(SHA256.hash(data: Array(text.utf8)))
    }

    /// The experiment's key at `path`, made when there is none.
    public static func load(orCreateAt path: String) throws -> Curve25519.Signing.PrivateKey { try KeyFile.ed25519(orCreateAt: path) }

    /// The DER prefix of an Ed25519 PKCS#8 private key (RFC 8410: version 0, id-Ed25519, an
    /// OCTET STRING holding the 32-byte seed) and of its SubjectPublicKeyInfo.
    static let pkcs8Prefix: [UInt8] = [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]
    static let spkiPrefix: [UInt8] = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00]

    /// An operator's key file: a PKCS#8 PEM ("PRIVATE KEY") only. 32 raw bytes are not taken:
    /// any 32-byte file (a public key given by mistake, a password file) would sign.
    public static func loadOperatorKey(_ path: String) throws -> Curve25519.Signing.PrivateKey {
        let bytes: [UInt8]
        switch InputFile.read(path, cap: 16 << 10) {
        case .success(let b): bytes = b
        case .failure(let p): throw ExperimentError(.usage, "\(path): \(p.explanation("an Ed25519 private key"))")
        }
        if let der = pemBody(bytes, label: "PRIVATE KEY"), der.count == 48, Array(der.prefix(16)) == pkcs8Prefix,
           let k = try? Curve25519.Signing.PrivateKey(rawRepresentation: der.suffix(32)) {
            return k
        }
        throw ExperimentError(.usage, "\(path) is not an Ed25519 private key as a PKCS#8 PEM (`openssl genpkey -algorithm ed25519 -out \(path)`)")
    }

    /// A public key as an operator or a reader has it: securesystemslib's hex, base64 of the
    /// 32 bytes, a SubjectPublicKeyInfo PEM ("PUBLIC KEY"), or a key object (JSON) as
    /// `autoharness evidence key --json` prints it; given inline or as a file.
    public static func parsePublic(_ text: String) -> Curve25519.Signing.PublicKey? {
        let t = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if t.count == 64, let raw = hexBytes(t) { return try? .init(rawRepresentation: raw) }
        if let der = pemBody(Array(t.utf8), label: "PUBLIC KEY"), der.count == 44, Array(der.prefix(12)) == spkiPrefix {
            return try? .init(rawRepresentation: der.suffix(32))
        }
        if t.hasPrefix("{"), let k = try? JSONDecoder().decode(SSLibKey.self, from: Data(t.utf8)), k.keytype == "ed25519",
           let raw = hexBytes(k.keyval.public) {
            return try? .init(rawRepresentation: raw)
        }
        if let raw = Data(base64Encoded: t), raw.count == 32 { return try? .init(rawRepresentation: raw) }
        return nil
    }

    /// The public key as a SubjectPublicKeyInfo PEM.
    public static func pem(_ key: Curve25519.Signing.PublicKey) -> String {
        "-----BEGIN PUBLIC KEY-----\n" + Data(spkiPrefix + Array(key.rawRepresentation)).base64EncodedString() + "\n-----END PUBLIC KEY-----\n"
    }

    static func pemBody(_ bytes: [UInt8], label: String) -> [UInt8]? {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let begin = text.range(of: "-----BEGIN \(label)-----"), let end = text.range(of: "-----END \(label)-----"),
              begin.upperBound <= end.lowerBound else { return nil }
        let body = text[begin.upperBound..<end.lowerBound].filter { !$0.isWhitespace }
        return Data(base64Encoded: String(body)).map { Array($0) }
    }

    static func hexBytes(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            default: nil
            }
        }
        var i = 0
        while i < digits.count {
            guard let h = value(digits[i]), let l = value(digits[i + 1]) else { return nil }
            out.append(h << 4 | l)
            i += 2
        }
        return out
    }
}

/// securesystemslib's key object.
public struct SSLibKey: Codable, Sendable, Equatable {
    public struct KeyVal: Codable, Sendable, Equatable { public var `public`: String }
    public var keytype: String
    public var scheme: String
    public var keyval: KeyVal
}

/// Why a bundle does not verify (or cannot be made).
public struct EvidenceError: AutoharnessError, CustomStringConvertible {
    public var message: String
    public var category: ErrorCategory { .refused }
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
