@testable import Experiment
import Testing

// The broker's grammar lives in Experiment with the run loop that serves it: the coding
// agent's requests never go through the CLI target.
@Suite("The broker's grammar: what the coding agent's autoharness may ask")
struct BrokerGrammarTests {
    @Test("benchmark, gate and status parse to their verbs")
    func verbs() {
        #expect(BrokerGrammar.parse(["gate"]).verb == .gate(message: nil))
        #expect(BrokerGrammar.parse(["gate", "-m", "coerce numbers"]).verb == .gate(message: "coerce numbers"))
        #expect(BrokerGrammar.parse(["candidate"]).verb == .candidate(message: nil))
        #expect(BrokerGrammar.parse(["candidate", "-m", "half the batch"]).verb == .candidate(message: "half the batch"))
        #expect(BrokerGrammar.parse(["needs-human", "the test split's key expired"]).verb == .needsHuman(text: "the test split's key expired"))
        #expect(BrokerGrammar.parse(["status", "--json"]).verb == .status(json: true))
        #expect(BrokerGrammar.parse(["benchmark"]).verb == .benchmark(taskIDs: nil))
        #expect(BrokerGrammar.parse(["benchmark", "--task-ids", "a", "b"]).verb == .benchmark(taskIDs: ["a", "b"]))
        #expect(BrokerGrammar.parse(["failures"]).verb == .failures(cluster: nil, json: false))
        #expect(BrokerGrammar.parse(["failures", "--cluster", "c0123abcd", "--json"]).verb == .failures(cluster: "c0123abcd", json: true))
        #expect(BrokerGrammar.parse(["failures", "--cluster", "c1", "--label", "missing factor"]).verb
                == .proposeCluster(cluster: "c1", label: "missing factor", mergeWith: nil))
        #expect(BrokerGrammar.parse(["failures", "--cluster", "c1", "--merge-with", "c2"]).verb == .proposeCluster(cluster: "c1", label: nil, mergeWith: "c2"))
    }

    @Test("anything that records, commits, reads the test split or names another experiment is refused", arguments: [
        ["record"], ["prepare"], ["report"], ["run"], ["evidence", "export"], ["evidence", "key"], ["suite", "approve", "--reason", "x"], ["gate", "-C", "/exp"], ["status", "--operator"], ["benchmark", "--oracle"],
        ["status", "--verify"], ["gate", "extra"], ["candidate", "extra"], ["candidate", "-C", "/exp"], ["init", "x"], ["failures", "--label", "x"], ["failures", "--cluster", "c1", "--label", ""],
        ["failures", "-C", "/exp"],
    ])
    func refused(_ argv: [String]) {
        guard case .invalid = BrokerGrammar.parse(argv) else {
            Issue.record("\(argv) was not refused")
            return
        }
    }

    @Test("--help is answered, not refused")
    func help() {
        guard case .help(let text) = BrokerGrammar.parse(["--help"]) else {
            Issue.record("--help was not answered")
            return
        }
        #expect(text.contains("benchmark") && text.contains("gate") && text.contains("status"))
    }
}

extension BrokerParse {
    var verb: BrokerVerb? {
        if case .verb(let v) = self { return v }
        return nil
    }
}
