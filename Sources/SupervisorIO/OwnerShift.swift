import Glibc

extension FileSystem {
    /// Moves the owner and group of `path` and of everything below it from ids 0… to the
    /// same ids from `uid`/`gid` on (a task image's files into its sandboxes' host range); an
    /// id at or past `count` becomes the range's nobody (65534), as a rootless container shows
    /// an unmapped id. An inode already within the range (a second hard link to one done) is
    /// left. chown clears set-id bits; they are put back. Links are never followed.
    /// `fromUID`/`fromGID`: the ids are moved from that range instead of from 0 (a node taking
    /// an image archived in the supervisor's range into its own; the two must not overlap, or
    /// be the same, when an inode outside the range is all that moves, to nobody).
    public static func shiftOwners(of path: String, uid: UInt32, gid: UInt32, count: UInt32, fromUID: UInt32 = 0, fromGID: UInt32 = 0) throws(IOFailure) {
        let slash = path.lastIndex(of: "/")
        let parent = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let dir = openDirectory(parent)
        guard dir >= 0 else { throw IOFailure("cannot open", parent, errno: errno) }
        defer { close(dir) }
        let leaf = slash.map { String(path[path.index(after: $0)...]) } ?? path
        try shift(name(leaf), in: dir, path: path, uid: uid, gid: gid, count: count, from: (fromUID, fromGID))
    }

    private static func shift(_ entry: Name, in dir: Int32, path: String, uid: UInt32, gid: UInt32, count: UInt32,
                              from: (uid: UInt32, gid: UInt32)) throws(IOFailure) {
        guard let st = entryStatus(at: dir, entry) else { throw IOFailure("cannot stat", path, errno: errno) }
        func within(_ id: UInt32, _ base: UInt32) -> Bool { id >= base && UInt64(id) < UInt64(base) + UInt64(count) }
        if !(within(st.st_uid, uid) && within(st.st_gid, gid)) {
            let u = uid + (within(st.st_uid, from.uid) ? st.st_uid - from.uid : 65534)
            let g = gid + (within(st.st_gid, from.gid) ? st.st_gid - from.gid : 65534)
            guard fchownat(dir, entry, u, g, AT_SYMLINK_NOFOLLOW) == 0 else { throw IOFailure("cannot chown", path, errno: errno) }
            let kind = st.st_mode & S_IFMT
            if kind != S_IFLNK, kind != S_IFDIR, st.st_mode & (S_ISUID | S_ISGID) != 0, fchmodat(dir, entry, st.st_mode & 0o7777, 0) != 0 {
                throw IOFailure("cannot chmod", path, errno: errno)
            }
        }
        guard isDirectory(st) else { return }
        let sub = openDirectory(at: dir, entry)
        guard sub >= 0 else { throw IOFailure("cannot open", path, errno: errno) }
        defer { close(sub) }
        guard let names = entries(of: sub) else { throw IOFailure("cannot list", path, errno: errno) }
        for n in names {
            try shift(n, in: sub, path: path + "/" + display(n), uid: uid, gid: gid, count: count, from: from)
        }
    }
}
