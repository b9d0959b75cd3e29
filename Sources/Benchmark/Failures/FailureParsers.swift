// Failure evidence from each benchmark's own structured results. Every parser takes bytes a
// sandbox wrote (read capped, O_NOFOLLOW, by the caller) and returns nil when they are not the
// format it reads: the caller then falls back to the task's status class. Nothing here throws
// or trusts a shape: one malformed report costs that task its detail, never its score.

import FoundationEssentials
import Glibc
import SupervisorIO

public enum FailureParsers {
    /// Largest report read for evidence (a CTRF report with long tracebacks, tau2's reward
    /// breakdown).
    public static let reportLimit = 4 << 20

    /// A report file below `dir`: each directory of `path` opened O_NOFOLLOW, the file read
    /// capped (`reportLimit`); nil if anything on the way is missing or not what it should be.
    static func report(at dir: Int32, _ path: [String], _ name: String) -> [UInt8]? {
        var fd = dup(dir)
        guard fd >= 0 else { return nil }
        for part in path {
            let next = FileSystem.openDirectory(at: fd, FileSystem.name(part))
            close(fd)
            guard next >= 0 else { return nil }
            fd = next
        }
        defer { close(fd) }
        guard case .success(let bytes) = FileSystem.readSmallFile(at: fd, name, limit: reportLimit) else { return nil }
        return bytes
    }

    // MARK: CTRF (Harbor's verifier/ctrf.json, a local verifier's logs/ctrf.json)

    /// The failed tests of a Common Test Report Format report, in report order. The shape
    /// read is the one pytest-json-ctrf 0.3.5 writes, which Harbor's task template and
    /// terminal-bench's tests run (`pytest --ctrf /logs/verifier/ctrf.json`):
    /// infopulse/pytest-common-test-report-json, ctrf/TestObject.py, `TestObject.serialize`:
    /// `results.tests[]` with `name` (pytest's node id without parameters), `status` (passed,
    /// failed, skipped, pending, other), `message` ("The test failed in the call phase due to
    /// an assertion error") and `trace` (pytest's longreprtext). Other CTRF writers use the
    /// same keys (ctrf.io schema). nil: not such a report.
    public static func ctrf(_ bytes: [UInt8]) -> [FailureEvidence]? {
        guard let tests = JSONValue.parse(bytes)?.path("results", "tests")?.array else { return nil }
        var out: [FailureEvidence] = []
        for t in tests {
            guard let status = t["status"]?.string, status == "failed" || status == "other" else { continue }
            let name = t["name"]?.string ?? "unnamed test"
            let message = t["message"]?.string ?? ""
            let trace = t["trace"]?.string ?? ""
            let errorLines = pytestErrorLines(trace)
            let excerpt = errorLines.isEmpty ? (message.isEmpty ? lastLines(trace, 3) : message) : errorLines.prefix(4).joined(separator: "\n")
            out.append(FailureEvidence(check: name, errorClass: exceptionType(trace: trace, message: message) ?? (status == "other" ? "test_error" : "test_failed"),
                                       excerpt: excerpt))
        }
        return FailureEvidence.bounded(out)
    }

    /// pytest's `E   ` lines of a long representation (the assertion and its explanation),
    /// without the marker.
    static func pytestErrorLines(_ trace: String) -> [String] {
        trace.split(separator: "\n", omittingEmptySubsequences: true).compactMap { line in
            guard line.hasPrefix("E ") else { return nil }
            let text = line.dropFirst(2).drop { $0 == " " }
            return text.isEmpty ? nil : String(text)
        }
    }

    /// The exception a pytest long representation ends with (`tests/test_x.py:12: AssertionError`),
    /// else one an `E   Name: message` line names, else what pytest-json-ctrf's message says
    /// (an assertion error, an exception).
    static func exceptionType(trace: String, message: String) -> String? {
        let lines = trace.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
        for line in lines.reversed() {
            // `path:line: Name`
            let parts = line.split(separator: ":", omittingEmptySubsequences: false)
            if parts.count >= 3, Int(parts[parts.count - 2]) != nil {
                let name = String(parts[parts.count - 1].drop { $0 == " " })
                if isExceptionName(name) { return name }
            }
        }
        for line in pytestErrorLines(trace) {
            let head = line.split(separator: ":", maxSplits: 1).first.map(String.init) ?? line
            if isExceptionName(head), head.hasSuffix("Error") || head.hasSuffix("Exception") || head.hasSuffix("Exit") { return head }
        }
        if message.contains("assertion error") { return "AssertionError" }
        if message.contains("due to an exception") { return "Exception" }
        return nil
    }

    /// A Python exception's (possibly dotted) name: identifier characters and dots, starting
    /// with a letter.
    static func isExceptionName(_ s: String) -> Bool {
        guard let first = s.unicodeScalars.first, first.properties.isAlphabetic, s.count <= 120 else { return false }
        return s.unicodeScalars.allSatisfy { ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) || $0 == "_" || $0 == "." }
    }

    static func lastLines(_ s: String, _ n: Int) -> String {
        s.split(separator: "\n", omittingEmptySubsequences: true).suffix(n).joined(separator: "\n")
    }

    // MARK: Harbor (a trial's result.json)

    /// The exception Harbor recorded for a trial: harbor 0.25.0, harbor/models/trial/result.py,
    /// `ExceptionInfo` (`exception_type`, `exception_message`, `exception_traceback`,
    /// `occurred_at`), the `exception_info` of `TrialResult`. nil: none recorded.
    static func harborException(_ result: JSONValue) -> FailureEvidence? {
        guard let e = result["exception_info"], !e.isNull else { return nil }
        let type = e["exception_type"]?.string ?? "exception"
        let message = e["exception_message"]?.string ?? ""
        return FailureEvidence(check: "trial", errorClass: type,
                               excerpt: message.isEmpty ? lastLines(e["exception_traceback"]?.string ?? "", 2) : message)
    }

    // MARK: BFCL (the checker's verdict.json)

    /// The verdict BFCL's checker gave one task, as autoharness_bfcl_score.py writes it from
    /// bfcl-eval 2026.3.23 eval_checker/eval_runner.py (`_evaluate_single_ast_entry`,
    /// `_evaluate_single_relevance_entry`): `valid`, `error_type` (`type_error:simple`,
    /// `simple_function_checker:missing_required`, `irrelevance_error:decoder_success`, ...)
    /// and `error`, its list of messages. nil: not a verdict, or a passing one.
    public static func bfcl(_ bytes: [UInt8]) -> [FailureEvidence]? {
        guard let v = JSONValue.parse(bytes), v["valid"] == .bool(false) else { return nil }
        let type = v["error_type"]?.string ?? "invalid"
        // Each message is a string, or (parallel and multiple checks) an object per model call
        // tried, whose `sub_error` says why that call did not match.
        let messages = (v["error"]?.array ?? v["error"].map { [$0] } ?? []).flatMap { item -> [String] in
            if let s = item.string { return [s] }
            return (item.object ?? [:]).sorted { $0.key < $1.key }.flatMap { $0.value["sub_error"]?.array?.compactMap(\.string) ?? [] }
        }
        // The checker's own kinds are `<check>:<error>`: the check is the part before the colon.
        let check = type.split(separator: ":", maxSplits: 1).first.map(String.init) ?? "checker"
        return [FailureEvidence(check: check, errorClass: type, excerpt: messages.joined(separator: " "))]
    }

    // MARK: inspect (the scorer's verdict.json)

    /// The verdict the task's scorer gave one sample, as autoharness_inspect_score.py writes
    /// it from inspect_ai 0.3.285's `Score` (inspect_ai/scorer/_metric.py: value, answer,
    /// explanation): `scorer` (its registry name), `value`, `reward`, `answer`, `explanation`,
    /// `target`; or `error` when the sample was not scored (the solver raised, no log). nil:
    /// not a verdict.
    public static func inspect(_ bytes: [UInt8]) -> [FailureEvidence]? {
        guard let v = JSONValue.parse(bytes), v.object != nil else { return nil }
        if let error = v["error"]?.string {
            return [FailureEvidence(check: "solve", errorClass: "not_scored", excerpt: error)]
        }
        guard let scorer = v["scorer"]?.string else { return nil }
        let value = v["value"].map { $0.string ?? $0.brief } ?? "?"
        let target = v["target"].map { $0.string ?? $0.brief } ?? "?"
        let answer = v["answer"]?.string.map { "answered \(Reward.quote(String($0.prefix(200)))), " } ?? ""
        let explanation = v["explanation"]?.string.map { "; \(lastLines($0, 3))" } ?? ""
        return [FailureEvidence(check: scorer, errorClass: "value \(value)", excerpt: "\(answer)target \(Reward.quote(String(target.prefix(200))))\(explanation)")]
    }

    // MARK: tau2 (the scorer's reward_info.json)

    /// The failed checks of tau2's reward breakdown, as its scorer wrote it
    /// (`RewardInfo.model_dump_json`): tau2-bench src/tau2/data_model/simulation.py,
    /// `RewardInfo` with `db_check` (`DBCheck`: db_match, db_reward), `env_assertions`
    /// (`EnvAssertionCheck`: env_assertion {env_type, func_name, arguments, message}, met),
    /// `action_checks` (`ActionCheck`: action {name, arguments, requestor}, action_match),
    /// `nl_assertions` (`NLAssertionCheck`: nl_assertion, met, justification),
    /// `communicate_checks` (`CommunicateCheck`: info, met, justification), `reward_basis`
    /// (RewardType names: DB, ENV_ASSERTION, ACTION, COMMUNICATE, NL_ASSERTION) and `info`.
    /// Only components the task's `reward_basis` counts are evidence (the others did not make
    /// it fail); a breakdown with no failed check counted (a premature termination scores 0
    /// before any check) gives `info.note`. nil: not a reward breakdown.
    public static func tau2(_ bytes: [UInt8]) -> [FailureEvidence]? {
        guard let info = JSONValue.parse(bytes), info["reward"]?.number != nil else { return nil }
        let basis = info["reward_basis"]?.array.map { Set($0.compactMap(\.string)) }
        func counts(_ component: String) -> Bool { basis.map { $0.contains(component) } ?? true }
        var out: [FailureEvidence] = []
        if counts("DB"), let db = info["db_check"], db["db_match"] == .bool(false) {
            out.append(FailureEvidence(check: "db", errorClass: "db_mismatch",
                                       excerpt: "the database after the conversation differs from the expected one (db_reward \(db["db_reward"]?.number ?? 0))"))
        }
        if counts("ENV_ASSERTION") {
            for c in info["env_assertions"]?.array ?? [] where c["met"] == .bool(false) {
                let a = c["env_assertion"]
                let function = a?["func_name"]?.string ?? "assertion"
                let message = a?["message"]?.string
                out.append(FailureEvidence(check: "env_assertion \(function)", errorClass: "env_assertion_not_met",
                                           excerpt: message ?? "\(function)(\(compact(a?["arguments"]))) expected \(compact(a?["assert_value"] ?? .bool(true)))"))
            }
        }
        if counts("ACTION") {
            for c in info["action_checks"]?.array ?? [] where c["action_match"] == .bool(false) {
                let a = c["action"]
                let name = a?["name"]?.string ?? "action"
                out.append(FailureEvidence(check: "action \(name)", errorClass: "action_not_matched",
                                           excerpt: "expected \(a?["requestor"]?.string ?? "assistant") call \(name)(\(compact(a?["arguments"])))"))
            }
        }
        if counts("COMMUNICATE") {
            for c in info["communicate_checks"]?.array ?? [] where c["met"] == .bool(false) {
                out.append(FailureEvidence(check: "communicate", errorClass: "info_not_communicated",
                                           excerpt: "expected the agent to tell the user: \(c["info"]?.string ?? "?")"))
            }
        }
        if counts("NL_ASSERTION") {
            for c in info["nl_assertions"]?.array ?? [] where c["met"] == .bool(false) {
                let j = c["justification"]?.string.map { " (judge: \($0))" } ?? ""
                out.append(FailureEvidence(check: "nl_assertion", errorClass: "nl_assertion_not_met",
                                           excerpt: (c["nl_assertion"]?.string ?? "?") + j))
            }
        }
        if out.isEmpty, (info["reward"]?.number ?? 0) < TaskOutcome.passThreshold {
            let note = info["info"]?["note"]?.string ?? ""
            let premature = note.hasPrefix("Simulation terminated prematurely")
            out.append(FailureEvidence(check: premature ? "simulation" : "reward", errorClass: premature ? "premature_termination" : "reward_below_threshold",
                                       excerpt: note.isEmpty ? "reward \(info["reward"]?.number ?? 0)" : note))
        }
        return FailureEvidence.bounded(out)
    }

    /// A JSON value on one line, keys sorted (arguments of an expected call).
    static func compact(_ v: JSONValue?) -> String {
        guard let v else { return "" }
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var s = (try? e.encode(v)).map { String(decoding: $0, as: UTF8.self) } ?? ""
        if case .object = v, s.hasPrefix("{"), s.hasSuffix("}") { s = String(s.dropFirst().dropLast()) }
        return s
    }

    // MARK: BIRD-Interact (the DB environment's submission record)

    /// Why a BIRD task failed, from the DB environment's own grading of its submissions
    /// (templates/bird-interact/autoharness_bird_services.py records each verdict of
    /// bird-interact-agents' /submit as {task_id, phase, passed, reward, message}): phase 1
    /// never passed, or phase 1 passed and the follow-up (phase 2) did not.
    static func bird(_ submissions: [JSONValue]) -> [FailureEvidence] {
        let phase1 = submissions.contains { $0["passed"] == .bool(true) && ($0["phase"]?.number ?? 1) != 2 }
        let failed = submissions.filter { $0["passed"] != .bool(true) }
        let last = failed.last?["message"]?.string ?? ""
        let tries = "\(submissions.count) submission(s), \(failed.count) not accepted"
        if !phase1 {
            return [FailureEvidence(check: "phase 1", errorClass: "phase1_not_passed", excerpt: last.isEmpty ? tries : "\(tries); last: \(last)")]
        }
        return [FailureEvidence(check: "phase 2", errorClass: "phase2_not_passed", excerpt: last.isEmpty ? tries : "\(tries); last: \(last)")]
    }

    // MARK: command (a documented JSON file)

    /// `failures.json` of the `command` adapter, beside rewards.json:
    /// `{"<task id>": [{"check": "...", "error_class": "...", "message": "..."}, ...]}`.
    /// Ids not requested and malformed entries are ignored. The command's own word, like its
    /// rewards (docs/loop.md).
    static func command(_ bytes: [UInt8], ids: Set<String>) -> [String: [FailureEvidence]] {
        guard let object = JSONValue.parse(bytes)?.object else { return [:] }
        var out: [String: [FailureEvidence]] = [:]
        for (id, value) in object where ids.contains(id) {
            let items = (value.array ?? []).compactMap { item -> FailureEvidence? in
                guard let check = item["check"]?.string else { return nil }
                return FailureEvidence(check: check, errorClass: item["error_class"]?.string ?? "failed", excerpt: item["message"]?.string ?? "")
            }
            if !items.isEmpty { out[id] = FailureEvidence.bounded(items) }
        }
        return out
    }
}
