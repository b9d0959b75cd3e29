import CSandboxLaunch
import Glibc
import PolicyModel
import SupervisorIO

/// Which of a plan's mounts a template root holds (`SharedTrees.template(for:in:)`).
///
/// A sandbox's root is a tmpfs holding only mount points and symlinks, read-only once built,
/// with the plan's mounts attached in order. For a long-lived supervisor most of those are the
/// same in every sandbox of a plan: the read-only binds of the host's /usr and /etc files and
/// the symlinks. A template root holds them, built once; each sandbox clones it whole (one
/// system call) and mounts only the rest itself, on mount points the template already holds.
///
/// The rules, in the plan's order (parents before children):
/// - In the template: read-only binds and symlinks, unless an earlier entry that is not in it
///   lies at or above the destination (it would then sit on that entry in the sandbox, and it
///   must stay on it). Nothing a sandbox can write to is ever in it: tmpfs, read-write binds,
///   and the hide entries' own small tmpfs stay each sandbox's own, as do /dev and /proc.
/// - Mount point in the template: a tmpfs or bind that is not in it and has no earlier entry at
///   or above its destination, so its mount point is in the root itself (the template's root
///   is read-only: nothing is created in it at launch). Deeper mount points are made at launch
///   where they always were, inside the entry above them.
/// - No template at all when nothing would be in it, or when an entry is at or above /dev or
///   /proc (whose mount points the template makes) or is the root itself.
public struct TemplateLayout: Equatable, Sendable {
    public enum Role: UInt8, Sendable {
        case perSandbox = 0, inTemplate, mountPointInTemplate
    }
    public var roles: [Role]

    public static func of(_ mounts: [LaunchPlan.Mount]) -> TemplateLayout? {
        var roles: [Role] = []
        roles.reserveCapacity(mounts.count)
        for (i, m) in mounts.enumerated() {
            let dest = m.destination
            if dest == "/" || covers(dest, "/dev") || covers(dest, "/proc") || covers("/dev", dest) || covers("/proc", dest) { return nil }
            var underPerSandbox = false
            var underAny = false
            for j in 0..<i where covers(mounts[j].destination, dest) {
                underAny = true
                if roles[j] != .inTemplate { underPerSandbox = true; break }
            }
            let shareable: Bool
            switch m.kind {
            case .bind(_, let readOnly, _, _, _, _): shareable = readOnly
            case .symlink: shareable = true
            case .tmpfs, .hide: shareable = false
            }
            if shareable && !underPerSandbox {
                roles.append(.inTemplate)
            } else if !underAny, case .bind = m.kind {
                roles.append(.mountPointInTemplate)
            } else if !underAny, case .tmpfs = m.kind {
                roles.append(.mountPointInTemplate)
            } else if !underAny {
                // A hide directly in the root: its missing parents would have to be made at
                // launch, in a root that is read-only by then. Such a plan builds its own.
                return nil
            } else {
                roles.append(.perSandbox)
            }
        }
        return roles.contains(.inTemplate) ? TemplateLayout(roles: roles) : nil
    }

    /// Whether `path` is `above` or lies beneath it (both absolute and normalised).
    static func covers(_ above: String, _ path: String) -> Bool {
        let a = above.utf8, p = path.utf8
        if a.elementsEqual(p) || a.elementsEqual("/".utf8) { return true }
        guard p.count > a.count, p.starts(with: a) else { return false }
        return p[p.index(p.startIndex, offsetBy: a.count)] == UInt8(ascii: "/")
    }

    /// Everything the template's content depends on: entries at the same index with the same
    /// role, kind, destination, source and (for binds) the st_dev/st_ino the plan checked, the
    /// root's size and owner. A source swapped since gives another key, so another template.
    func key(_ plan: LaunchPlan, rootSize: UInt64) -> [UInt8] { Array(text(plan, rootSize: rootSize).utf8) }

    /// The key as text. Compared as its UTF-8 bytes (`key`): Swift's `String` equality treats
    /// canonically equivalent texts as equal, and two paths that differ only so are two paths.
    func text(_ plan: LaunchPlan, rootSize: UInt64) -> String {
        var k = "v1 root \(rootSize) owner \(plan.identity.hostUID):\(plan.identity.hostGID)"
        for (m, role) in zip(plan.mounts, roles) where role != .perSandbox {
            k += "\n\(role.rawValue) \(m.destination.utf8.count):\(m.destination) "
            switch m.kind {
            case .bind(let source, let readOnly, let device, let inode, let isDirectory, let noSymlinks):
                k += role == .inTemplate
                    ? "bind \(readOnly) \(isDirectory) \(noSymlinks) \(device) \(inode) \(source.utf8.count):\(source)"
                    : "point \(isDirectory)"
            case .symlink(let target): k += "symlink \(target.utf8.count):\(target)"
            case .tmpfs: k += "point true"
            case .hide: k += "hide"
            }
        }
        return k
    }
}

/// A template root: a detached mount tree, open for as long as a sandbox may still clone it.
final class TemplateRoot: @unchecked Sendable {
    let fd: Int32
    let built: Double
    var lastUse: Double
    /// How many entries of the plan it holds (for -v).
    let entries: Int

    init(fd: Int32, entries: Int) {
        self.fd = fd
        built = monotonicNow()
        lastUse = built
        self.entries = entries
    }

    deinit { close(fd) }
}

extension SharedTrees {
    /// A template built this long ago is built again on its next use: its binds are clones of
    /// the host's mounts as they were then, and a mount made or removed on the host since (under
    /// /usr, say) reaches sandboxes no later than this.
    static let templateMaxAge = 30.0
    /// Templates kept at once (a supervisor runs a handful of policies).
    static let templateLimit = 8

    /// Forgets every template. Their inodes carry the time they were built, at the launch of
    /// the first sandbox that needed one, which an earlier sandbox's end decided: built while
    /// held-out sandboxes ran, a template would show later sandboxes when one of them ended. The
    /// supervisor calls this once the held-out sandboxes are gone (`HeldOutSettle.settle`).
    /// Returns how many there were.
    @discardableResult
    public func dropTemplates() -> Int {
        templates.withLock {
            defer { templates.value.removeAll() }
            return templates.value.count
        }
    }

    /// The template root for `plan`, built on first use (and after `templateMaxAge`); nil when
    /// the plan has none (`TemplateLayout.of`) or it cannot be built, and the sandbox then
    /// builds its whole root, as without shared trees. Flags `storage`'s mounts accordingly.
    /// The caller keeps the result until the launcher holds its descriptor.
    func template(for plan: LaunchPlan, in storage: CPlan) -> TemplateRoot? {
        guard let layout = TemplateLayout.of(plan.mounts) else { return nil }
        storage.flagMounts(layout.roles)
        let key = layout.key(plan, rootSize: storage.plan.root_size)
        let now = monotonicNow()
        let cache = templates
        return cache.withLock { () -> TemplateRoot? in
            if let t = cache.value[key], now - t.built < Self.templateMaxAge {
                t.lastUse = now
                return t
            }
            cache.value[key] = nil
            var fd: Int32 = -1
            let rc = LaunchCodeLock.shared.withLock { withUnsafePointer(to: &storage.plan) { ahl_build_template($0, &fd) } }
            guard rc == 0 else {
                templateFailures.withLock { templateFailures.value += 1 }
                return nil
            }
            if cache.value.count >= Self.templateLimit, let oldest = cache.value.min(by: { $0.value.lastUse < $1.value.lastUse }) {
                cache.value[oldest.key] = nil
            }
            let t = TemplateRoot(fd: fd, entries: layout.roles.filter { $0 == .inTemplate }.count)
            cache.value[key] = t
            templateBuilds.withLock { templateBuilds.value += 1 }
            return t
        }
    }
}
