import Foundation
@testable import Sandbox
import Testing
import TestSupport

@Suite("A payload's empty stdin")
struct PayloadInputTests {
    @Test("each empty stdin is /dev/null on a read-only mount (futimens: EROFS) with an open file description of its own")
    func readOnlyAndNotShared() throws {
        try requireRoot()
        let a = PayloadInput.empty(), b = PayloadInput.empty()
        try #require(a >= 0 && b >= 0, "\(String(cString: strerror(errno)))")
        defer { close(a); close(b) }
        var st = stat()
        #expect(fstat(a, &st) == 0 && (st.st_mode & S_IFMT) == S_IFCHR)
        // Setting the times to now needs only write permission: on the host's mount it works.
        #expect(futimens(a, nil) == -1 && errno == EROFS, "errno \(errno)")
        // A flag one sandbox sets must not show on another's descriptor.
        #expect(fcntl(a, F_SETFL, fcntl(a, F_GETFL) | O_NONBLOCK) == 0)
        #expect(fcntl(b, F_GETFL) & O_NONBLOCK == 0)
        var buf = [UInt8](repeating: 0, count: 8)
        #expect(read(b, &buf, 8) == 0)
    }
}
