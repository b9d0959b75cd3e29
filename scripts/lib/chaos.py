"""scripts/chaos: kills autoharness supervisors with SIGKILL at random points and checks what
the next start makes of it. See scripts/chaos for usage; the checks are in leaks.py (what is
left on the host) and ledgercheck.py (the record)."""
import argparse
import ctypes
import json
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import leaks  # noqa: E402
import ledgercheck  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = REPO + "/Tests/ExperimentTests/Fixtures/arith"
AGENTS = REPO + "/Tests/ExperimentTests/Fixtures/agents"
OPS = ["gate", "prepare", "benchmark request", "run loop", "view publish"]


class Failure(Exception):
    pass


@dataclass
class Kill:
    """Where one kill landed, and how to start again what it cut off."""
    delay: float
    phase: str
    restart: Callable[[], float]
    experiment: Optional[str] = None  # when not the main experiment
    detail: str = ""


def say(*a):
    print("chaos:", *a, flush=True)


# -- inotify (a view publish lasts milliseconds: the kill follows its first file) ----------

IN_CREATE, IN_MOVED_TO = 0x100, 0x80
_libc = ctypes.CDLL(None, use_errno=True)


class Watch:
    def __init__(self, *dirs):
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.dirs = {}
        for d in dirs:
            wd = _libc.inotify_add_watch(self.fd, d.encode(), IN_CREATE | IN_MOVED_TO)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {d}")
            self.dirs[wd] = d

    def events(self, timeout):
        """(time, directory, name, mask) of the events within `timeout` seconds."""
        if not select.select([self.fd], [], [], max(0, timeout))[0]:
            return []
        now = time.monotonic()
        data, out, i = os.read(self.fd, 65536), [], 0
        while i < len(data):
            wd, mask, _, n = struct.unpack_from("iIII", data, i)
            name = data[i + 16:i + 16 + n].rstrip(b"\0").decode()
            out.append((now, self.dirs.get(wd), name, mask))
            i += 16 + n
        return out

    def close(self):
        os.close(self.fd)


def is_view_temporary(name):
    return name.startswith(".") and ".tmp-" in name


# -- experiments ---------------------------------------------------------------------------

class Chaos:
    def __init__(self, args):
        self.args = args
        self.bin = args.bin
        self.rng = random.Random(args.seed)
        self.tmp = tempfile.mkdtemp(prefix="ah-chaos-")
        self.scratch = f"/dev/shm/ah-chaos-{os.getpid()}"
        self.scope = leaks.Scope(f"ah-chaos-{os.getpid()}", self.scratch, [])
        self.trackers = {}
        self.estimate = {}
        self.kills = {op: 0 for op in OPS}
        self.landed = {op: {} for op in OPS}
        self.swept = {}
        self.prepared_experiments = 0
        # Prepared experiments no gate has been accepted on: a gate there with a solver is
        # accepted, so its kill can land in promotion, commit or publication.
        self.fresh = []
        self.logs = self.tmp + "/logs"
        os.mkdir(self.logs)
        self.serial = 0
        self.compared = 0

    # running autoharness

    def start(self, exp, *args):
        """`autoharness ARGS -C exp` (exp None: no -C), output in the log directory."""
        self.serial += 1
        name = f"{self.logs}/{self.serial:04d}-{args[0]}"
        out, err = open(name + ".out", "w"), open(name + ".err", "w")
        argv = [self.bin, *args] + (["-C", exp] if exp else [])
        p = self.scope.launch(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        out.close()
        err.close()
        p.log = name
        return p

    def finish(self, p, allowed, what, timeout=600):
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            raise Failure(f"{what}: no answer in {timeout} s (killed); see {p.log}.err")
        if p.returncode not in allowed:
            raise Failure(f"{what}: exit {p.returncode} (expected {sorted(allowed)}); stderr {p.log}.err:\n{tail(p.log + '.err')}")
        return p.returncode

    def run(self, exp, *args, allowed=(0,)):
        t0 = time.monotonic()
        self.finish(self.start(exp, *args), set(allowed), f"autoharness {' '.join(args)}" + (f" -C {exp}" if exp else ""))
        return time.monotonic() - t0

    def new_experiment(self, name):
        exp = f"{self.tmp}/{name}"
        self.run(None, "init", exp, "--benchmark", "local", "--dataset", FIXTURE)
        configure(exp, {
            "scratch": self.scratch,
            "command": json.dumps(["python3", AGENTS + "/looper.py", "1", "1"]),
            "binds": json.dumps([AGENTS]),
            "budget": "2",                # gates per run: a run ends after two
            "min_improvement": "0",
            "max_non_improving": "0",
            "restart_backoff": "0.2",
        })
        self.scope.experiments.append(exp)
        self.trackers[exp] = ledgercheck.Tracker(exp + "/.autoharness/ledger.sqlite")
        return exp

    def set_agent(self, exp, n):
        ops = [{}, {"add": "a + b"}, {"add": "a + b", "multiply": "a * b"}][n % 3]
        cases = "".join(f"        if op == {op!r}: result = {e}\n" for op, e in sorted(ops.items()))
        with open(exp + "/agent/agent.py", "w") as f:
            f.write(f"import os\n# chaos {os.getpid()} {n}\nclass HarnessAgent:\n    def run(self, instruction, workdir):\n"
                    f"        _, op, a, b = instruction.splitlines()[0].split()\n        a, b = int(a), int(b)\n        result = None\n"
                    f"{cases}        if result is not None:\n            open(os.path.join(workdir, 'answer.txt'), 'w').write(str(result))\n")

    def train_id(self, exp):
        with open(exp + "/.autoharness/split.json") as f:
            return self.rng.choice(json.load(f)["train"])

    # the checks

    def verify(self, exp, when, repaired):
        """`status --verify` exits 0; once a locked command has run, no view is behind."""
        p = self.start(exp, "status", "--verify", "--json", "--operator")
        code = self.finish(p, {0, 1}, f"status --verify ({when})")
        with open(p.log + ".out") as f:
            report = json.load(f).get("verify", {})
        if code != 0 or not report.get("ok"):
            raise Failure(f"status --verify {when}: exit {code}: {json.dumps(report)}")
        if repaired and report.get("unpublished_commits"):
            raise Failure(f"status --verify {when}: an accepted commit is still not on the branch after the next start: {report['unpublished_commits']}")
        if repaired and report.get("behind_views"):
            raise Failure(f"status --verify {when}: views still behind after the next start: {report['behind_views']}")
        return report

    def check_ledgers(self, when, killed=None):
        """Checks every ledger (the one of `killed` not yet quiescent: a gate may be open);
        returns the rows of `killed`'s (or of all)."""
        rows = 0
        for exp, tracker in self.trackers.items():
            if not os.path.exists(tracker.path):
                continue
            problems, n = tracker.check(quiescent=exp != killed)
            if problems:
                raise Failure(f"ledger {exp} {when}: " + "; ".join(problems[:10]))
            self.compared += n
            rows += n if killed in (None, exp) else 0
        return rows

    # one kill

    def sleep_tracking(self, p, seconds):
        """Waits `seconds` (or until p exits), recording the processes p starts."""
        end = time.monotonic() + seconds
        while p.poll() is None:
            self.scope.track_tree(p.pid)
            left = end - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, 0.02))
        return False

    def kill(self, p):
        """SIGKILL now; then what the dead supervisor's tree still runs (re-parented to this
        script, its subreaper) is tracked too. False if p had ended by itself just before."""
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        self.scope.tracked.update(leaks.descendants(os.getpid()))
        return p.returncode == -signal.SIGKILL

    def delay(self, op):
        return self.rng.uniform(0, self.estimate[op])

    def kill_within(self, op, start, allowed):
        """Starts the operation (`start()` -> process), kills it after a delay drawn from its
        estimated duration; one that ends first is started again (up to five times) and
        sets the estimate to what it took: an operation can be much shorter than measured (a
        gate whose suite fails ends before the held-out phase), and halving the distance
        to it each time still left about one plan in fifty without a kill in five tries."""
        took = []
        for _ in range(5):
            t0 = time.monotonic()
            p = start()
            d = self.delay(op)
            if self.sleep_tracking(p, d) and self.kill(p):
                return d
            self.finish(p, allowed, op)
            took.append(time.monotonic() - t0)
            self.estimate[op] = took[-1]
        raise Failure(f"five {op}s in a row ended before the kill (they took " + ", ".join(f"{t:.3f}" for t in took) + " s)")

    def op_gate(self, exp, n):
        op = "gate"
        if self.fresh and self.rng.random() < 0.5:
            exp, op = self.fresh.pop(0), "accepted gate"

        def start():
            # On a fresh experiment the solver of both operations (variant 2) is accepted.
            self.set_agent(exp, 3 * self.rng.randrange(1 << 30) + (2 if op == "accepted gate" else 0))
            return self.start(exp, "gate")
        d = self.kill_within(op, start, {0, 1})
        kinds = [r[1] for r in ledgercheck.rows(exp + "/.autoharness/ledger.sqlite")]
        opened = kinds.count("gate_started") > kinds.count("gate_attempt")
        phase = "gate open in the ledger" if opened else "before its start row" if kinds[-1] != "gate_attempt" else "outcome recorded"
        if op == "accepted gate":
            phase = "accepting: " + phase
        return Kill(d, phase, lambda: self.run(exp, "gate", allowed=(0, 1)), exp)

    def op_prepare(self, exp, n):
        made = []

        def start():
            self.prepared_experiments += 1
            made.append(self.new_experiment(f"prep-{self.prepared_experiments}"))
            return self.start(made[-1], "prepare")
        d = self.kill_within("prepare", start, {0})
        exp = made[-1]
        prepared = "split" in [r[1] for r in ledgercheck.rows(exp + "/.autoharness/ledger.sqlite")]
        phase = "after its record" if prepared else "before its record"

        def restart():
            took = self.run(exp, "benchmark", "--task-ids", self.train_id(exp)) if prepared else self.run(exp, "prepare")
            self.fresh.append(exp)
            return took
        return Kill(d, phase, restart, exp)

    def agent_log(self, exp):
        try:
            with open(exp + "/.autoharness/run/agent.log") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def op_benchmark_request(self, exp, n):
        deadline = time.monotonic() + 300
        while True:
            seen = len(self.agent_log(exp))
            p = self.start(exp, "run")
            req = None
            while req is None and p.poll() is None:
                for line in self.agent_log(exp)[seen:].splitlines():
                    if line.startswith("REQ ") and line.endswith(" benchmark"):
                        req = line.split()[1]
                        break
                self.scope.track_tree(p.pid)
                time.sleep(0.005)
            if req is not None:
                d = self.delay("benchmark request")
                if self.sleep_tracking(p, d) and self.kill(p):
                    break
            # The run ended (its gate budget spent) before a request or the kill: again.
            self.finish(p, {0, 3}, "run")
            if time.monotonic() > deadline:
                raise Failure("no benchmark request of the coding agent could be killed in 300 s")
        answered = any(line.startswith(f"DONE {req} benchmark 0") for line in self.agent_log(exp)[seen:].splitlines())
        return Kill(d, "answered before the kill" if answered else "unanswered", lambda: self.run(exp, "run", allowed=(0, 3)))

    def op_run_loop(self, exp, n):
        seen = []

        def start():
            seen.append(len(self.agent_log(exp)))
            return self.start(exp, "run")
        d = self.kill_within("run loop", start, {0, 3})
        lines = [x for x in self.agent_log(exp)[seen[-1]:].splitlines() if x.startswith(("REQ ", "DONE ", "looper started"))]
        last = lines[-1] if lines else ""
        phase = ("agent not started" if not last else "agent starting" if last.startswith("looper") else
                 f"in a {last.split()[2]} request" if last.startswith("REQ") else "agent between requests")
        return Kill(d, phase, lambda: self.run(exp, "run", allowed=(0, 3)))

    # A publish: results.tsv, suite.json, train_results.json, then views-head, each written
    # to a temporary file, fsynced and renamed: eight directory events in a few milliseconds.
    PUBLISH_EVENTS = 8

    def op_view_publish(self, exp, n):
        # Too short for a timer: the kill follows the k-th of its directory events (k drawn
        # from 1..7; the 8th, views-head's rename, ends it), seen through inotify.
        k = self.rng.randint(1, self.PUBLISH_EVENTS - 1)
        watch = Watch(exp + "/workspace", exp + "/.autoharness")
        try:
            p = self.start(exp, "benchmark", "--task-ids", self.train_id(exp))
            t0, seen = time.monotonic(), 0
            while seen < k and p.poll() is None:
                for _, _, name, _ in watch.events(0.5):
                    if is_view_temporary(name) or name in ("results.tsv", "suite.json", "train_results.json", "views-head"):
                        seen += 1
                        if seen == k:
                            break
            if p.poll() is not None or not self.kill(p):
                raise Failure(f"the benchmark ended before its publish's event {k}; see {p.log}.err")
            d = time.monotonic() - t0
        finally:
            watch.close()
        with open(exp + "/.autoharness/views-head") as f:
            head = json.load(f)["seq"]
        last = ledgercheck.rows(exp + "/.autoharness/ledger.sqlite")[-1][0]
        return Kill(d, "views behind the ledger" if head < last else "views published",
                    lambda: self.run(exp, "benchmark", "--task-ids", self.train_id(exp)), detail=f"after event {k} of {self.PUBLISH_EVENTS}, ")

    # measurements before the kills

    def measure(self, exp):
        """One uninterrupted run of each operation: the kill delays are drawn from these."""
        prep = self.new_experiment("measure-prepare")
        self.estimate["prepare"] = self.run(prep, "prepare")
        self.set_agent(prep, 2)
        self.estimate["accepted gate"] = self.run(prep, "gate")
        self.set_agent(exp, 1)
        self.estimate["gate"] = self.run(exp, "gate", allowed=(0, 1))
        publishes = [self.publish_duration(exp) for _ in range(3)]
        self.estimate["view publish"] = sorted(publishes)[1]
        seen = len(self.agent_log(exp))
        t0 = time.monotonic()
        p = self.start(exp, "run")
        times, reqs = {}, []
        while p.poll() is None:
            now = time.monotonic()
            for line in self.agent_log(exp)[seen:].splitlines():
                if line not in times:
                    times[line] = now
            time.sleep(0.01)
        self.finish(p, {0, 3}, "run")
        self.estimate["run loop"] = time.monotonic() - t0
        for line, at in times.items():
            if line.startswith("REQ ") and line.endswith(" benchmark"):
                done = [t for l, t in times.items() if l.startswith(f"DONE {line.split()[1]} benchmark")]
                if done:
                    reqs.append(done[0] - at)
        if not reqs:
            raise Failure(f"the run made no benchmark request; see {exp}/.autoharness/run/agent.log")
        self.estimate["benchmark request"] = max(reqs)
        for e in (exp, prep):
            self.verify(e, "after the measurements", True)
        self.check_ledgers("after the measurements")
        found = leaks.wait_clean(self.scope)
        if found:
            raise Failure(f"leftovers before any kill: {found[:10]}")
        say("uninterrupted: " + ", ".join(f"{k} {v:.3f} s" for k, v in self.estimate.items()))

    def publish_duration(self, exp):
        """From a benchmark's first temporary view file to views-head's rename."""
        watch = Watch(exp + "/workspace", exp + "/.autoharness")
        p = self.start(exp, "benchmark", "--task-ids", self.train_id(exp))
        first = last = None
        while p.poll() is None or last is None:
            evs = watch.events(0.5)
            for at, _, name, mask in evs:
                if is_view_temporary(name) and first is None:
                    first = at
                if name == "views-head" and mask & IN_MOVED_TO:
                    last = at
            if p.poll() is not None and not evs:
                break
        watch.close()
        self.finish(p, {0}, "benchmark")
        if first is None or last is None:
            raise Failure("the benchmark published no views (no temporary view file, or views-head never renamed)")
        return max(last - first, 0.0005)

    def main(self):
        t_start = time.monotonic()
        main = self.new_experiment("main")
        self.run(main, "prepare")
        say(f"experiment {main}, scratch {self.scratch}, cgroups " + " ".join(d for _, d in self.scope.cgroups))
        self.measure(main)
        plan = []
        while len(plan) < self.args.kills:
            block = OPS[:]
            self.rng.shuffle(block)
            plan += block
        plan = plan[:self.args.kills]
        handlers = {"gate": self.op_gate, "prepare": self.op_prepare, "benchmark request": self.op_benchmark_request,
                    "run loop": self.op_run_loop, "view publish": self.op_view_publish}
        for i, op in enumerate(plan, start=1):
            k = handlers[op](main, i)
            exp = k.experiment or main
            self.kills[op] += 1
            self.landed[op][k.phase] = self.landed[op].get(k.phase, 0) + 1
            # Before the next start: the record is whole (views may be behind).
            self.verify(exp, f"after kill {i} ({op})", False)
            self.check_ledgers(f"after kill {i} ({op})", killed=exp)
            left = self.scope.find()
            for kind, _ in left:
                self.swept[kind] = self.swept.get(kind, 0) + 1
            # The next start, to the end of what was cut off; then nothing may be left.
            took = k.restart()
            if op == "gate" and exp == main:  # gates grow longer as the suite grows
                self.estimate[op] = 0.5 * self.estimate[op] + 0.5 * took
            self.verify(exp, f"after the start following kill {i} ({op})", True)
            self.check_ledgers(f"after the start following kill {i} ({op})")
            rows = len(self.trackers[exp].seen)
            found = leaks.wait_clean(self.scope)
            if found:
                raise Failure(f"after the start following kill {i} ({op}), left over: " + "; ".join(f"{k}: {w}" for k, w in found[:20]))
            say(f"kill {i}/{len(plan)}: {op} after {k.delay:.3f} s ({k.detail}{k.phase}); left by the kill: {leaks.summarize(left)}; "
                f"after the next start: verify ok, {rows} rows intact, leaks 0")
        total = sum(len(t.seen) for t in self.trackers.values())
        by_op = ", ".join(f"{op} {self.kills[op]}" for op in OPS)
        for op in OPS:
            if self.landed[op]:
                say(f"  {op}: " + ", ".join(f"{k} {v}" for k, v in sorted(self.landed[op].items())))
        say(f"  swept by the next starts: {leaks.summarize([(k, None) for k, n in self.swept.items() for _ in range(n)])}; "
            f"{time.monotonic() - t_start:.0f} s")
        say(f"  {self.compared} row comparisons in {len(self.trackers)} ledgers")
        say(f"{self.args.kills} kills ({by_op}), {total} rows checked, leaks found: 0")


def configure(exp, values):
    """Sets `key: value` lines of experiment_config.yaml (an indented key first: `budget` is
    gate.budget, not the top-level section)."""
    path = exp + "/experiment_config.yaml"
    lines = open(path).read().split("\n")
    for k, v in values.items():
        match = [i for i, l in enumerate(lines) if l.strip().startswith(k + ":")]
        nested = [i for i in match if lines[i].startswith(" ")]
        if not match:
            raise Failure(f"no key {k} in {path}")
        i = (nested or match)[0]
        indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
        lines[i] = f"{indent}{k}: {v}"
    open(path, "w").write("\n".join(lines))


def tail(path, n=20):
    try:
        return "".join(open(path).readlines()[-n:])
    except OSError:
        return ""


def main():
    ap = argparse.ArgumentParser(prog="scripts/chaos")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--time-limit", type=int, default=0, help="fail after this many seconds (0: none)")
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()

    def stop(signum, _):
        raise Failure(f"time limit of {args.time_limit} s reached" if signum == signal.SIGALRM else f"stopped by signal {signum}")
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGALRM, stop)
    if args.time_limit:
        signal.alarm(args.time_limit)
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")
    say(f"seed {args.seed} (rerun with --seed {args.seed}), binary {args.bin}")
    c = Chaos(args)
    ok = False
    try:
        if args.self_test:
            exp = c.new_experiment("self-test")
            failures = leaks.self_test(c.scope, exp) + ledger_self_test(c, exp)
            if failures:
                raise Failure("self-test: " + "; ".join(failures))
            say("self-test: every planted leftover and ledger fault was found")
        else:
            c.main()
        ok = True
    except Failure as e:
        print(f"chaos: FAILED: {e}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("chaos: interrupted", file=sys.stderr, flush=True)
    finally:
        signal.alarm(0)
        ok = finish(c, "chaos", ok, args.keep)
    sys.exit(0 if ok else 1)


def finish(c, name, ok, keep):
    """Removes what the run left (its cgroups, processes, mounts) and its directory, unless it
    failed or `keep`; returns whether everything went well."""
    problems = leaks.cleanup(c.scope)
    if problems:
        print(f"{name}: could not remove: " + "; ".join(problems), file=sys.stderr)
        ok = False
    if keep or not ok:
        print(f"{name}: kept {c.tmp} (logs in {c.logs})", flush=True)
    else:
        shutil.rmtree(c.tmp, ignore_errors=True)
    return ok


def ledger_self_test(c, exp):
    """The ledger checks catch a lost row, a changed row and a gate attempt recorded twice
    (in copies of a real ledger)."""
    failures = []
    c.run(exp, "prepare")
    db = exp + "/.autoharness/ledger.sqlite"
    tracker = ledgercheck.Tracker(db)
    problems, n = tracker.check(True)
    if problems or n < 3:
        return [f"a fresh ledger: {problems}, {n} rows"]
    import sqlite3

    def tampered(sql, expect, name):
        copy = c.tmp + "/tampered.sqlite"
        shutil.copy(db, copy)
        for ext in ("-wal", "-shm"):
            if os.path.exists(db + ext):
                shutil.copy(db + ext, copy + ext)
            elif os.path.exists(copy + ext):
                os.unlink(copy + ext)
        con = sqlite3.connect(copy)
        con.executescript("DROP TRIGGER records_no_update; DROP TRIGGER records_no_delete; DROP TRIGGER records_append_at_head;" + sql)
        con.commit()
        con.close()
        t = ledgercheck.Tracker(copy)
        t.seen = dict(tracker.seen)
        found = t.check(True)[0]
        if not any(expect in f for f in found):
            failures.append(f"{name} was not found (found: {found})")
        else:
            say(f"self-test: {name} is found ({found[0]})")
    last = max(tracker.seen)
    tampered(f"DELETE FROM records WHERE seq = {last};", "was lost", "a lost last row")
    tampered("UPDATE records SET payload = replace(payload, '}', ',\"x\":1}') WHERE seq = 2;", "changed", "a changed row")
    prev = tracker.seen[last][5]
    rows = []
    for seq, payload in ((last + 1, '{"agentSHA256":"a","attempt":1}'), (last + 2, '{"agentSHA256":"a","attempt":1}')):
        h = ledgercheck.row_hash(prev, seq, "gate_started", "2026-01-01T00:00:00.000Z", payload)
        rows.append(f"INSERT INTO records VALUES ({seq}, 'gate_started', '2026-01-01T00:00:00.000Z', '{payload}', '{prev}', '{h}');")
        prev = h
    tampered("".join(rows), "gate attempt numbers", "a gate attempt started twice")
    return failures


if __name__ == "__main__":
    main()
