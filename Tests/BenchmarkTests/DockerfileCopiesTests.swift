import Foundation
import Testing

@testable import Benchmark

/// What of environment/ reaches /app without the task's image: only what its Dockerfile copies.
@Suite("environment/ files the Dockerfile does not copy never reach /app")
struct DockerfileCopiesTests {
    static func included(_ dockerfile: String, ignore: String = "", _ paths: [String]) -> [String] {
        guard let patterns = DockerfileCopies.sources(dockerfile) else { return paths }
        let ignored = DockerfileCopies.ignored(ignore)
        return paths.filter { DockerfileCopies.includes($0, patterns: patterns, ignored: ignored) }
    }

    static let context = ["main.rs", "data", "data/input.txt", "src", "src/a.py", "src/b.py", "src/notes.txt", "shadow_test",
                          "shadow_test/t1.scm", "tests", "tests/test_outputs.py", "cfg.json", "a b.txt"]

    @Test("COPY and ADD sources are read in shell and JSON form, with flags, globs and continuation lines; what no instruction names is left out")
    func sources() {
        let file = """
            FROM debian:12
            # COPY main.rs /app/   (a comment names nothing)
            WORKDIR /app
            COPY --chown=1000:1000 data/ /app/data/
            COPY src/*.py \\
                 cfg.json /app/
            ADD ["a b.txt", "/app/"]
            ADD https://example.com/x.tar.gz /opt/
            COPY --from=builder /out/bin /usr/local/bin/
            COPY $EXTRA /app/
            RUN cat /app/cfg.json

            """
        #expect(Self.included(file, Self.context) == ["data", "data/input.txt", "src", "src/a.py", "src/b.py", "cfg.json", "a b.txt"])
    }

    @Test("COPY . copies the whole context; a .dockerignore pattern removes what it matches")
    func wholeContext() {
        #expect(DockerfileCopies.sources("FROM x\nCOPY . /app\n") == nil)
        #expect(DockerfileCopies.sources("FROM x\nCOPY ./ /app\n") == nil)
        let file = "FROM x\nCOPY * /app/\n"
        #expect(Self.included(file, ignore: "# answers\nshadow_test\ntests/*.py\n!tests/keep.py\n", Self.context)
                == ["main.rs", "data", "data/input.txt", "src", "src/a.py", "src/b.py", "src/notes.txt", "tests", "cfg.json", "a b.txt"])
    }

    @Test("a task without its image gets in /app only what its Dockerfile copies: the reference solution beside the sources stays out")
    func seededWithoutImage() throws {
        try requireRoot()
        let bench = try TempDir()
        let t = "tasks/write-compressor"
        try bench.file(t + "/instruction.md", "Write the compressor.\n")
        try bench.file(t + "/environment/Dockerfile", "FROM debian:12\nWORKDIR /app\nCOPY decomp.c data.txt /app/\n")
        try bench.file(t + "/environment/decomp.c", "int main(void) { return 0; }\n")
        try bench.file(t + "/environment/data.txt", "input\n")
        try bench.file(t + "/environment/main.rs", "// ANSWER-KEY: the reference solution\n")
        try bench.file(t + "/tests/test.sh", "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
        try bench.file(t + "/solution/solve.sh", "#!/bin/bash\nls -A /app > /tmp/listing.txt && mv /tmp/listing.txt /app/\n")
        let task = try #require(try LocalBenchmark(directory: bench.path).task("write-compressor"))
        let box = ListingBox()
        let h = try Harness(agent: nil, oracle: true, observer: { _, scratch in box.read(scratch + "/app/listing.txt") })
        let o = h.run(task)
        #expect(o.status == .passed, "\(o)")
        #expect(box.text == "data.txt\ndecomp.c\n", "\(box.text)")
    }
}

private final class ListingBox: @unchecked Sendable {
    var text = ""
    func read(_ path: String) { text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? "(none)" }
}
