import Glibc
import Testing
import WireCoding

/// `Descriptor.writeAll`, the one write-all: files and pipes through write(2), sockets with
/// MSG_NOSIGNAL, every byte or the errno that stopped it.
struct WriteAllTests {
    @Test("a pipe (not a socket) gets every byte; a socket gets every byte; a socket whose peer is gone answers EPIPE, with no SIGPIPE")
    func everyByteOrTheError() throws {
        let bytes = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        var p: [Int32] = [-1, -1]
        try #require(pipe(&p) == 0)
        // Read on a thread: the pipe holds 64 KiB, the write is larger.
        final class Box: @unchecked Sendable { var got: [UInt8] = [] }
        let box = Box()
        let reader = p[0]
        var thread = pthread_t()
        let context = Unmanaged.passRetained(Context(fd: reader, box: { box.got += $0 })).toOpaque()
        try #require(pthread_create(&thread, nil, { raw in
            let c = Unmanaged<Context>.fromOpaque(raw!).takeRetainedValue()
            var buf = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = buf.withUnsafeMutableBytes { read(c.fd, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                c.box(Array(buf[0..<n]))
            }
            return nil
        }, context) == 0)
        #expect(Descriptor.writeAll(p[1], bytes) == nil)
        close(p[1])
        pthread_join(thread, nil)
        close(reader)
        #expect(box.got == bytes)

        var s: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &s) == 0)
        #expect(Descriptor.writeAll(s[0], Array("hello".utf8)) == nil)
        var five = [UInt8](repeating: 0, count: 5)
        #expect(read(s[1], &five, 5) == 5 && five == Array("hello".utf8))
        close(s[1])
        // SIGPIPE left at its default: a write(2) here would end the test process.
        let old = signal(SIGPIPE, SIG_DFL)
        defer { signal(SIGPIPE, old) }
        #expect(Descriptor.writeAll(s[0], bytes) == EPIPE)
        close(s[0])
    }
}

private final class Context {
    let fd: Int32
    let box: ([UInt8]) -> Void
    init(fd: Int32, box: @escaping ([UInt8]) -> Void) {
        self.fd = fd
        self.box = box
    }
}
