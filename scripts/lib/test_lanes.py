"""Runs the swift-testing suites of a test bundle in lanes: each suite in a process of its own,
LANES of them at once, the longest (by a table of seconds) first.

    python3 scripts/lib/test_lanes.py BUNDLE LANES EVENTS.jsonl SKIP [WEIGHTS]

Why: one test process runs its tests on Swift's cooperative pool, as wide as the machine has
cores (2 here), and most of these tests block a thread on a child process, a VM or a timer
while using little CPU; two processes side by side ran two suites in 37 s that one process ran
in 64 s. Each suite's output is printed whole when its process ends; every process's event
stream is appended to EVENTS.jsonl (scripts/lib/test_times.py reads it). Tests whose id
matches SKIP are left out (each process is given `--skip SKIP`). Exits non-zero when any
process failed, or when the processes ran another number of tests than the bundle lists (no
suite may be dropped on the way). WEIGHTS: lines `SECONDS SUITE` (a suite's tests' sum, run
alone); a suite it does not name counts as DEFAULT seconds.
"""

import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time

DEFAULT = 20


def suites_of(bundle: str, skip: str) -> tuple[list[str], int]:
    listed = subprocess.run([bundle, "--testing-library", "swift-testing", "--list-tests"], capture_output=True, text=True, check=True)
    ids = [line.strip() for line in listed.stdout.splitlines() if "/" in line and not re.search(skip, line)]
    suites = sorted({i.split("/")[0] for i in ids})
    return suites, len(ids)


def weights_of(path: str | None) -> dict[str, float]:
    out: dict[str, float] = {}
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    out[parts[1]] = float(parts[0])
    return out


def main() -> int:
    bundle, lanes, events, skip = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    weights = weights_of(sys.argv[5] if len(sys.argv) > 5 else None)
    suites, total = suites_of(bundle, skip)
    suites.sort(key=lambda s: -weights.get(s, DEFAULT))
    work: queue.Queue[str] = queue.Queue()
    for s in suites:
        work.put(s)
    printing = threading.Lock()
    state = {"failed": [], "ran": 0}
    streams = tempfile.mkdtemp(prefix="test-lanes-")
    env = dict(os.environ, NO_COLOR="1")

    def lane(n: int) -> None:
        while True:
            try:
                suite = work.get_nowait()
            except queue.Empty:
                return
            stream = os.path.join(streams, suite + ".jsonl")
            started = time.monotonic()
            p = subprocess.run([bundle, "--testing-library", "swift-testing", "--filter", "^" + re.escape(suite) + "/", "--skip", skip,
                                "--event-stream-output-path", stream, "--event-stream-version", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
            text = p.stdout.decode("utf-8", "replace")
            ran = sum(int(m) for m in re.findall(r"Test run with (\d+) tests?", text))
            with printing:
                sys.stdout.write(text)
                print("scripts/test: lane %d: %s took %d s (exit %d, %d test(s))" % (n, suite, time.monotonic() - started, p.returncode, ran), flush=True)
                state["ran"] += ran
                if p.returncode != 0:
                    state["failed"].append(suite)

    threads = [threading.Thread(target=lane, args=(n + 1,)) for n in range(max(1, lanes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(events, "w", encoding="utf-8") as out:
        for name in sorted(os.listdir(streams)):
            with open(os.path.join(streams, name), encoding="utf-8", errors="replace") as f:
                out.write(f.read())
            os.remove(os.path.join(streams, name))
    os.rmdir(streams)
    if state["ran"] != total:
        print("scripts/test: the lanes ran %d test(s); the bundle lists %d outside %r" % (state["ran"], total, skip), flush=True)
        return 1
    if state["failed"]:
        print("scripts/test: suites that failed: " + ", ".join(state["failed"]), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
