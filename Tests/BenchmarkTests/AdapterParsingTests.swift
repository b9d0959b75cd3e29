@testable import Benchmark
import Testing

@Suite("Adapter parsing of untrusted tool output")
struct AdapterParsingTests {
    @Test("nesting deeper than the limit is refused before the recursive decoder sees it; normal JSON parses")
    func depth() {
        let deep = [UInt8](repeating: UInt8(ascii: "["), count: 1_000_000) + [UInt8](repeating: UInt8(ascii: "]"), count: 1_000_000)
        #expect(JSONValue.parse(deep) == nil)
        let ok = Array("{\"a\": [1, {\"b\": \"[[[[\"}], \"c\": null}".utf8)
        #expect(JSONValue.parse(ok)?["a"]?.array?.count == 2)
        #expect(JSONValue.depth(Array("\"[[[[\\\"[[\"".utf8)) == 0)
    }

    @Test("trace names: safe ids unchanged, anything else percent-encoded, never a path")
    func traceNames() {
        #expect(TraceName.encode("task-1.a_b") == "task-1.a_b")
        #expect(TraceName.encode("../etc") == "%2E.%2Fetc")
        #expect(TraceName.encode("[x]|y z") == "%5Bx%5D%7Cy%20z")
        #expect(!TraceName.encode("a/b").contains("/"))
        #expect(TraceName.isAcceptableID("[mobile]airplane|x") && !TraceName.isAcceptableID("a\nb") && !TraceName.isAcceptableID(""))
    }

    @Test("secrets are redacted wherever they occur verbatim")
    func redaction() {
        let out = ToolRun.redact(Array("k=sk-123456789 and sk-123456789!".utf8), [("KEY", Array("sk-123456789".utf8))])
        #expect(String(decoding: out, as: UTF8.self) == "k=[KEY] and [KEY]!")
    }
}
