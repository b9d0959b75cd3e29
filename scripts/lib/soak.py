"""scripts/bench-soak: one long `autoharness run` with the looper coding agent; samples the
supervisor's RSS and open fds and the ledger's size, then checks for leftovers. See
scripts/bench-soak for usage."""
import argparse
import json
import os
import sqlite3
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402
import leaks  # noqa: E402


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def served(log):
    """Broker requests the looper had answered and not refused (exit 0, or 1 for a rejected
    gate)."""
    try:
        with open(log) as f:
            return sum(1 for line in f if line.startswith("DONE ") and line.split()[-1] in ("0", "1"))
    except FileNotFoundError:
        return 0


def ledger_size(db):
    """(rows, gates judged, bytes of the ledger's pages as a reader sees them, WAL included)."""
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        rows = c.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        gates = c.execute("SELECT COUNT(*) FROM records WHERE kind = 'gate_attempt'").fetchone()[0]
        pages = c.execute("PRAGMA page_count").fetchone()[0]
        size = c.execute("PRAGMA page_size").fetchone()[0]
        return rows, gates, pages * size
    finally:
        c.close()


def window(samples, lo, hi, key, how=statistics.median):
    """`how` (median) of `key` over samples whose request count lies in [lo, hi) of the total."""
    total = samples[-1]["requests"]
    vals = [s[key] for s in samples if lo * total <= s["requests"] < hi * total] or [samples[-1][key]]
    return how(vals)


def slope(part):
    """Ledger bytes per row over the samples of `part`: the least-squares line, which
    averages out the size's 4 KiB steps."""
    n = len(part)
    mx = sum(s["rows"] for s in part) / n
    my = sum(s["bytes"] for s in part) / n
    var = sum((s["rows"] - mx) ** 2 for s in part)
    return sum((s["rows"] - mx) * (s["bytes"] - my) for s in part) / var if var else 0.0


def main():
    ap = argparse.ArgumentParser(prog="scripts/bench-soak")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--gates", type=int, default=55)
    ap.add_argument("--benchmarks", type=int, default=2, help="benchmark requests per gate")
    ap.add_argument("--status", type=int, default=7, help="status requests per gate")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    c = chaos.Chaos(argparse.Namespace(bin=args.bin, seed=0))
    ok = False
    try:
        ok = soak(c, args)
    except chaos.Failure as e:
        print(f"bench-soak: FAILED: {e}", file=sys.stderr, flush=True)
    finally:
        ok = chaos.finish(c, "bench-soak", ok, args.keep)
    sys.exit(0 if ok else 1)


def soak(c, args):
    exp = c.new_experiment("soak")
    chaos.configure(exp, {
        "command": json.dumps(["python3", chaos.AGENTS + "/looper.py", str(args.benchmarks), str(args.status)]),
        "budget": str(args.gates),        # the run ends with the answer to its last gate
    })
    c.run(exp, "prepare")
    # One train task in train_results.json: the looper benchmarks one task per request.
    c.run(exp, "benchmark", "--task-ids", c.train_id(exp))
    db = exp + "/.autoharness/ledger.sqlite"
    log = exp + "/.autoharness/run/agent.log"
    per_round = args.benchmarks + args.status + 1
    print(f"bench-soak: autoharness run, looper agent: {args.gates} gates x ({args.benchmarks} benchmark + "
          f"{args.status} status + 1 gate) = {args.gates * per_round} broker requests; binary {args.bin}", flush=True)
    t0 = time.monotonic()
    p = c.start(exp, "run")
    samples = []
    while p.poll() is None:
        try:
            rss = status_kib(p.pid, "VmRSS")
            fds = len(os.listdir(f"/proc/{p.pid}/fd"))
            threads = status_kib(p.pid, "Threads")
        except (FileNotFoundError, ProcessLookupError):
            break
        requests = served(log)
        rows, gates, size = ledger_size(db)
        samples.append({"t": time.monotonic() - t0, "requests": requests, "rows": rows, "gates": gates, "bytes": size,
                        "rss": rss, "fds": fds, "threads": threads})
        if len(samples) % 60 == 0:
            s = samples[-1]
            print(f"bench-soak: {s['t']:.0f} s, {requests} requests, {rows} rows, RSS {rss / 1024:.1f} MiB, {fds} fds", flush=True)
        time.sleep(args.interval)
    c.finish(p, {0, 3}, "run")
    seconds = time.monotonic() - t0
    requests = served(log)
    rows, gates, size = ledger_size(db)
    # The ledger once the run has ended (its RSS and fds: the last sample's).
    samples.append({**samples[-1], "requests": requests, "rows": rows, "gates": gates, "bytes": size, "t": seconds})

    c.verify(exp, "after the run", True)
    c.check_ledgers("after the run")
    found = leaks.wait_clean(c.scope)

    # The table: the first sample past each tenth of the requests.
    print()
    print(f"{'s':>5} {'requests':>8} {'gates':>5} {'rows':>5} {'RSS MiB':>8} {'fds':>4} {'threads':>7} {'ledger KiB':>10} {'bytes/row':>9}")
    shown = set()
    for s in samples:
        tenth = min(10, int(10 * s["requests"] / max(1, requests)))
        if tenth not in shown:
            shown.add(tenth)
            print(f"{s['t']:>5.0f} {s['requests']:>8} {s['gates']:>5} {s['rows']:>5} {s['rss'] / 1024:>8.1f} {s['fds']:>4} {s['threads']:>7} "
                  f"{s['bytes'] / 1024:>10.0f} {s['bytes'] / max(1, s['rows']):>9.0f}")
    print()
    # After warm-up (the first 10% of requests): the tenth just after it against the last.
    # RSS by median; fds by the minimum, the count between requests (a request in flight
    # holds sockets, pipes and cgroup files for a moment).
    # The end is the last tenth before the last answer (then the run stops: the agent's
    # sandbox and the broker go, with their fds).
    rss0, rss1 = window(samples, 0.1, 0.2, "rss"), window(samples, 0.9, 1.0, "rss")
    fd0, fd1 = window(samples, 0.1, 0.2, "fds", min), window(samples, 0.9, 1.0, "fds", min)
    after = [s for s in samples if s["requests"] >= 0.1 * requests]
    peak = max(s["rss"] for s in after)
    rss_growth = (rss1 - rss0) / rss0
    fd_growth = (fd1 - fd0) / fd0 if fd0 else 0.0
    # Ledger bytes per row in the first and second half after warm-up.
    half = len(after) // 2
    first, second, overall = slope(after[:half + 1]), slope(after[half:]), slope(after)
    spread = abs(second - first) / overall if overall > 0 else 1.0
    verdict = lambda ok: "MET" if ok else "NOT MET"  # noqa: E731
    print(f"run: {seconds:.0f} s, {requests} broker requests answered, {gates} gates judged, {rows} ledger rows, "
          f"ledger {size / 1024:.0f} KiB; supervisor pid {p.pid}, binary {args.bin}")
    print(f"supervisor RSS (median) after warm-up {rss0 / 1024:.1f} MiB, at the end {rss1 / 1024:.1f} MiB ({100 * rss_growth:+.1f}%), "
          f"peak {peak / 1024:.1f} MiB: growth < 10%: {verdict(rss_growth < 0.10)}")
    print(f"supervisor open fds (between requests) after warm-up {fd0}, at the end {fd1} ({100 * fd_growth:+.1f}%), "
          f"at most {max(s['fds'] for s in after)}: growth < 10%: {verdict(fd_growth < 0.10)}")
    print(f"ledger bytes per row: {overall:.0f} after warm-up; first half {first:.0f}, second half {second:.0f} "
          f"({100 * spread:.0f}% apart): linear (within 25%): {verdict(spread <= 0.25)}")
    print(f"leftovers after the run: {len(found)}" + (" (" + "; ".join(f"{k}: {w}" for k, w in found[:10]) + ")" if found else "")
          + f": leaks 0: {verdict(not found)}")
    if requests < 500 or gates < 50:
        print(f"(short run: {requests} requests and {gates} gates; the full soak is >= 500 and >= 50)")
    return not found


if __name__ == "__main__":
    main()
