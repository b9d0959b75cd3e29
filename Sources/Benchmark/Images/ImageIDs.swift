// The host ids a task image's sandboxes are.
//
// An image holds files of several owners (root, _apt, postgres, www-data) and its packages'
// scripts switch between them, so its sandbox maps a span of ids, 0-65535 inside, onto a
// range of host ids no account and no other sandbox uses, as rootless podman maps a user's
// subordinate ids. The admin names the range the way podman's users do, with a line for
// `autoharness` in /etc/subuid and /etc/subgid (`autoharness:START:COUNT`, COUNT at least
// 65536); without one, the range below 2^31 that ends at 2^31-1, refused if an account's
// subordinate ids overlap it. Every range starts above 65535, past every account a Debian host
// creates (login.defs: UID_MAX 60000) and past nobody (65534), the policies' host id.

import FoundationEssentials
import Sandbox
import SupervisorIO

public enum ImageIDs {
    /// Ids inside: 0 (root) to 65535 (nobody is 65534), as an image's /etc/passwd names them.
    public static let span: UInt32 = 65536
    /// The first host id of the range when the admin names none: 2^31 - 65536, so the range's
    /// last id is 2^31 - 1 (tools that keep ids in a signed 32-bit integer still see them).
    public static let defaultStart: UInt32 = 2_147_418_112
    static let name = "autoharness"

    /// The range this host gives task images (see the top of this file).
    public static func range(subuid: String = "/etc/subuid", subgid: String = "/etc/subgid") throws(BenchmarkError) -> HostIDRange {
        let uids = try entries(subuid)
        let gids = try entries(subgid)
        let ownU = uids.first { $0.user == name }
        let ownG = gids.first { $0.user == name }
        if ownU != nil || ownG != nil {
            guard let u = ownU, let g = ownG else {
                throw BenchmarkError(.configuration, "\(ownU == nil ? subuid : subgid) has no line for \(name), but \(ownU == nil ? subgid : subuid) has one: task images need both (\(name):START:\(span))")
            }
            for e in [u, g] where e.count < span || e.start <= 65535 || UInt64(e.start) + UInt64(span) > UInt64(UInt32.max) {
                throw BenchmarkError(.configuration, "\(e.file):\(e.line): \(name):\(e.start):\(e.count): task images need \(span) ids starting above 65535")
            }
            return HostIDRange(uid: u.start, gid: g.start, count: span)
        }
        let range = HostIDRange(uid: defaultStart, gid: defaultStart, count: span)
        for e in uids + gids where e.start < defaultStart + span && UInt64(e.start) + UInt64(e.count) > UInt64(defaultStart) {
            throw BenchmarkError(.configuration, "\(e.file):\(e.line): \(e.user)'s subordinate ids overlap the ids task images use by default (\(span) from \(defaultStart)): give \(name) a range of its own, a line \(name):START:\(span) in \(subuid) and \(subgid)")
        }
        return range
    }

    struct Entry {
        var user: String
        var start: UInt32
        var count: UInt32
        var file: String
        var line: Int
    }

    /// The lines of a subordinate-id file; none when it does not exist. A line that is not
    /// `NAME:START:COUNT` is refused with its place.
    static func entries(_ path: String) throws(BenchmarkError) -> [Entry] {
        let bytes: [UInt8]
        switch InputFile.read(path, cap: 1 << 20) {
        case .success(let b): bytes = b
        case .failure(.missing): return []
        case .failure(let p): throw BenchmarkError(.io, "\(path): \(p.explanation("a subordinate-id file"))")
        }
        var out: [Entry] = []
        for (i, raw) in String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            let f = line.split(separator: ":", omittingEmptySubsequences: false)
            guard f.count == 3, !f[0].isEmpty, let start = UInt32(f[1]), let count = UInt32(f[2]) else {
                throw BenchmarkError(.configuration, "\(path):\(i + 1): \(line): not NAME:START:COUNT")
            }
            out.append(Entry(user: String(f[0]), start: start, count: count, file: path, line: i + 1))
        }
        return out
    }
}
