import Glibc

// Reading another process's /proc/PID/maps for the sysinfo emulation (Session.writeSysinfo).

/// Whether [from, from+count) lies entirely in mappings whose permissions include `w`
/// (`/proc/PID/maps` lines: `start-end perms ...`, sorted by address).
func mappingsWritable(maps: String, from: UInt64, count: UInt64) -> Bool {
    mappingsWritable(maps: Array(maps.utf8), from: from, count: count)
}

/// The same over the file's bytes. Python asks sysinfo at start-up, so this runs for nearly
/// every sandbox; splitting a few hundred lines into Strings cost more than the rest of the
/// answer. Lines that do not parse are skipped.
func mappingsWritable(maps: [UInt8], from: UInt64, count: UInt64) -> Bool {
    guard count > 0, from <= UInt64.max - count else { return false }
    var next = from
    let end = from + count
    var i = 0
    func hex(_ stop: UInt8) -> UInt64? {
        var v: UInt64 = 0
        var digits = 0
        while i < maps.count, maps[i] != stop {
            let c = maps[i]
            let d: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = c - UInt8(ascii: "A") + 10
            default: return nil
            }
            digits += 1
            guard digits <= 16 else { return nil }
            v = v << 4 | UInt64(d)
            i += 1
        }
        guard i < maps.count, digits > 0 else { return nil }
        i += 1  // the separator
        return v
    }
    while i < maps.count {
        if let lo = hex(UInt8(ascii: "-")), let hi = hex(UInt8(ascii: " ")), i + 1 < maps.count, lo <= next && next < hi {
            guard maps[i + 1] == UInt8(ascii: "w") else { return false }
            next = hi
            if next >= end { return true }
        }
        while i < maps.count, maps[i] != UInt8(ascii: "\n") { i += 1 }
        i += 1
    }
    return false
}

/// All of `fd` from its current offset.
func readAllBytes(_ fd: Int32) -> [UInt8] {
    var data = [UInt8]()
    var buf = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = read(fd, &buf, buf.count)
        if n <= 0 { break }
        data.append(contentsOf: buf[0..<n])
    }
    return data
}
