import Foundation

/// What a benchmark's held-out tasks need running in the guest beside them, made by the host
/// for each phase from nothing held-out, shared read-only, and started by `vm-guest` before
/// the adapter runs (`BenchmarkKind.guestServices`).
public struct GuestServices: Codable, Sendable, Equatable {
    public var postgres: GuestPostgres?
    public init() {}

    /// In the guest, before the adapter runs.
    package func start(log: @escaping @Sendable (String) -> Void) throws {
        try postgres?.start(log: log)
    }
}

/// Where a kind builds what the guest runs beside the tasks (`GuestInputs`, the held-out VM's):
/// a new directory on the host, and the path the guest sees it at.
package protocol GuestInputDirectories {
    func directory(_ name: String) throws -> (host: String, guest: String)
}
