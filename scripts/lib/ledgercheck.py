"""Checks an autoharness ledger from the outside, across supervisor kills: every row seen
before is still there byte for byte, the hash chain holds (recomputed here, independently of
`status --verify`), and nothing is recorded twice (gate attempts, iterations, the split, a
run's end). See Sources/Ledger/LedgerRecord.swift for the row hash."""
import hashlib
import json
import sqlite3

GENESIS = "0" * 64


def rows(path):
    """(seq, kind, time, payload, prev_hash, hash) of every row, in order."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return c.execute("SELECT seq, kind, time, payload, prev_hash, hash FROM records ORDER BY seq").fetchall()
    finally:
        c.close()


def row_hash(prev, seq, kind, time, payload):
    return hashlib.sha256(f"{prev}\n{seq}\n{kind}\n{time}\n{payload}".encode()).hexdigest()


class Tracker:
    """A running copy of one ledger's rows (seq -> whole row)."""

    def __init__(self, path):
        self.path = path
        self.seen = {}

    def check(self, quiescent):
        """Problems with the ledger now (empty: none), and how many rows were compared.
        `quiescent`: no supervisor runs and one has started since the last kill, so every
        gate that started has its outcome."""
        current = rows(self.path)
        problems = []
        by_seq = {r[0]: r for r in current}
        for seq, old in sorted(self.seen.items()):
            now = by_seq.get(seq)
            if now is None:
                problems.append(f"row {seq} ({old[1]}) was lost")
            elif now != old:
                diff = next((i for i, (a, b) in enumerate(zip(old, now)) if a != b), 0)
                field = ["seq", "kind", "time", "payload", "prev_hash", "hash"][diff]
                problems.append(f"row {seq} ({old[1]}) changed its {field}: {str(old[diff])[-60:]!r} -> {str(now[diff])[-60:]!r}")
        prev = GENESIS
        for i, (seq, kind, time, payload, prev_hash, h) in enumerate(current, start=1):
            if seq != i:
                problems.append(f"row {i} missing (next is {seq})")
                break
            if prev_hash != prev or h != row_hash(prev_hash, seq, kind, time, payload):
                problems.append(f"row {seq} ({kind}) breaks the hash chain")
            prev = h
        problems += duplicates(current, quiescent)
        for r in current:
            self.seen[r[0]] = r
        return problems, len(current)


def duplicates(current, quiescent):
    """Rows recorded twice, gate attempt numbers that are not 1, 2, 3, ... each started once
    and ended once, iterations that are not 0, 1, 2, ..."""
    problems = []
    hashes = [r[5] for r in current]
    if len(set(hashes)) != len(hashes):
        problems.append("two rows carry the same hash")
    started, ended, iterations, once = [], {}, [], {}
    runs_started, runs_ended = set(), {}
    for seq, kind, _, payload, _, _ in current:
        p = json.loads(payload)
        if kind == "gate_started":
            started.append((p["attempt"], p.get("agentSHA256")))
        elif kind == "gate_attempt":
            a = p["attempt"]
            if a in ended:
                problems.append(f"gate attempt {a} has two outcomes (rows {ended[a]} and {seq})")
            ended[a] = seq
            if a not in {s for s, _ in started}:
                problems.append(f"gate attempt {a} (row {seq}) has an outcome but never started")
            elif (a, p.get("agentSHA256")) not in started:
                problems.append(f"gate attempt {a} (row {seq}) ended for another agent.py than it started with")
        elif kind == "iteration":
            iterations.append(p["iteration"])
        elif kind in ("split", "baseline", "experiment_created"):
            if kind in once:
                problems.append(f"{kind} recorded twice (rows {once[kind]} and {seq})")
            once[kind] = seq
        elif kind == "run_started":
            if not p.get("resumed") and p["runID"] in runs_started:
                problems.append(f"run {p['runID']} started twice as new (row {seq})")
            runs_started.add(p["runID"])
        elif kind == "run_ended":
            if p["runID"] in runs_ended:
                problems.append(f"run {p['runID']} ended twice (rows {runs_ended[p['runID']]} and {seq})")
            runs_ended[p["runID"]] = seq
    numbers = [a for a, _ in started]
    if numbers != list(range(1, len(numbers) + 1)):
        problems.append(f"gate attempt numbers are not 1..{len(numbers)} in order: {numbers}")
    if quiescent:
        open_gates = sorted({a for a, _ in started} - set(ended))
        if open_gates:
            problems.append(f"gate attempts {open_gates} started and never ended")
    if iterations != list(range(len(iterations))):
        problems.append(f"iterations are not 0..{len(iterations) - 1} in order: {iterations}")
    return problems
