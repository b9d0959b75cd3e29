import Glibc
import Testing
@testable import SupervisorIO

@Suite("readdir records are read in place")
struct DirectoryEntryTests {
    @Test("a record that ends at an unmapped page is read to its name's NUL and no further (copying dirent's 256-byte d_name crashed the supervisor's page-cache walk)")
    func recordAtPageEnd() throws {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let base = try #require(mmap(nil, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))
        try #require(base != MAP_FAILED)
        defer { munmap(base, 2 * page) }
        #expect(mprotect(base + page, page, PROT_NONE) == 0)
        // A 24-byte record as getdents64 lays it out (ino, off, reclen, type, "ab\0"), whose
        // last byte is the last byte of the readable page.
        let length = DirectoryEntry.nameOffset + 3
        let record = base + page - length
        memset(record, 0, length)
        record.storeBytes(of: UInt16(length), toByteOffset: MemoryLayout<dirent>.offset(of: \dirent.d_reclen)!, as: UInt16.self)
        record.storeBytes(of: UInt8(DT_REG), toByteOffset: DirectoryEntry.typeOffset, as: UInt8.self)
        for (i, c) in "ab".utf8.enumerated() { record.storeBytes(of: c, toByteOffset: DirectoryEntry.nameOffset + i, as: UInt8.self) }
        let e = record.assumingMemoryBound(to: dirent.self)
        #expect(DirectoryEntry.name(e) == "ab")
        #expect(DirectoryEntry.cName(e) == [97, 98, 0])
        #expect(DirectoryEntry.type(e) == UInt8(DT_REG))
    }
}
