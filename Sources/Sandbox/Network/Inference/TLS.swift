import CTLS
import Glibc

/// The certificate authority of one inference gate: its key is made in this process and
/// never written anywhere; its certificate's name constraints permit only the gate's hosts,
/// so even a client that trusted it system-wide would accept it for nothing else.
final class TLSAuthority: @unchecked Sendable {
    private let raw: OpaquePointer
    /// The CA certificate (PEM), what sandboxes are told to trust.
    let certificatePEM: [UInt8]

    /// Valid for `days` (a run of a tool is bounded by its timeout, a day by default).
    init(hosts: [String], days: Int = 3) throws(SandboxError) {
        var err = [CChar](repeating: 0, count: 512)
        let made: OpaquePointer? = withCStrings(hosts) { list in
            ahs_tls_authority_new(list, Int32(hosts.count), Int32(days), &err, err.count)
        }
        guard let made else { throw SandboxError(.launch, "inference gate: \(String(cString: err))") }
        var pem = [CChar](repeating: 0, count: 8192)
        let n = ahs_tls_authority_pem(made, &pem, pem.count)
        guard n > 0 else {
            ahs_tls_authority_free(made)
            throw SandboxError(.launch, "inference gate: cannot write the CA certificate as PEM")
        }
        raw = made
        certificatePEM = pem[..<Int(n)].map { UInt8(bitPattern: $0) }
    }

    deinit { ahs_tls_authority_free(raw) }

    /// The server side of a TLS connection on `fd`, with a leaf for `host`.
    func accept(_ fd: Int32, host: String) -> Result<TLSConnection, TLSFailure> {
        var err = [CChar](repeating: 0, count: 512)
        guard let c = ahs_tls_accept(raw, fd, host, &err, err.count) else { return .failure(TLSFailure(String(cString: err))) }
        return .success(TLSConnection(c))
    }
}

/// Whom the gate trusts upstream: the system's store, plus an operator's CA file.
final class TLSUpstreamTrust: @unchecked Sendable {
    private let raw: OpaquePointer

    init(extraCAFile: String?) throws(SandboxError) {
        var err = [CChar](repeating: 0, count: 512)
        guard let u = ahs_tls_upstream_new(extraCAFile, &err, err.count) else {
            throw SandboxError(.launch, "inference gate: \(String(cString: err))\(extraCAFile.map { " (\($0))" } ?? "")")
        }
        raw = u
    }

    deinit { ahs_tls_upstream_free(raw) }

    /// The client side on `fd`: the peer's chain and name (`host`) verified.
    func connect(_ fd: Int32, host: String) -> Result<TLSConnection, TLSFailure> {
        var err = [CChar](repeating: 0, count: 512)
        guard let c = ahs_tls_connect(raw, fd, host, &err, err.count) else { return .failure(TLSFailure(String(cString: err))) }
        return .success(TLSConnection(c))
    }
}

struct TLSFailure: Error {
    var message: String
    init(_ m: String) { message = m }
}

/// One TLS connection over a descriptor the caller owns (and closes after `close()`).
final class TLSConnection {
    private var raw: OpaquePointer?

    fileprivate init(_ raw: OpaquePointer) { self.raw = raw }
    deinit { close() }

    /// Bytes read into `buffer` (> 0), 0 at the end of the stream, -1 on an error or timeout.
    func read(into buffer: inout [UInt8]) -> Int {
        guard let raw else { return -1 }
        return buffer.withUnsafeMutableBytes { ahs_tls_read(raw, $0.baseAddress, $0.count) }
    }

    func write<C: Collection>(_ bytes: C) -> Bool where C.Element == UInt8 {
        guard let raw else { return false }
        if let done = bytes.withContiguousStorageIfAvailable({ ahs_tls_write_all(raw, $0.baseAddress, $0.count) == 0 }) { return done }
        let copy = Array(bytes)
        return copy.withUnsafeBytes { ahs_tls_write_all(raw, $0.baseAddress, $0.count) == 0 }
    }

    func close() {
        if let raw { ahs_tls_close(raw) }
        raw = nil
    }
}

/// `strings` as a C array of C strings for the duration of `body`.
private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
    let copies = strings.map { strdup($0) }
    defer { copies.forEach { free($0) } }
    let pointers = copies.map { UnsafePointer($0) }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}
