"""The tests that took longest, from swift-testing's event stream (ABI version 0).

    python3 scripts/lib/test_times.py EVENTS.jsonl [N]

Each test's time is from its `testStarted` to its `testEnded` event: wall time while the other
tests ran beside it, so a sum over tests is more than the phase took. Where CI's minutes go,
printed after the test phase; nothing fails on it.
"""

import json
import sys


def main() -> int:
    path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    started: dict[str, float] = {}
    took: list[tuple[float, str]] = []
    names: dict[str, str] = {}
    with open(path, encoding="utf-8", errors="replace") as events:
        for line in events:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            payload = record.get("payload", {})
            if record.get("kind") == "test" and payload.get("kind") == "function":
                names[payload["id"]] = payload.get("name", payload["id"])
                continue
            if record.get("kind") != "event":
                continue
            test = payload.get("testID")
            at = payload.get("instant", {}).get("absolute")
            if test is None or at is None or test not in names:
                continue
            if payload.get("kind") == "testStarted":
                started.setdefault(test, at)
            elif payload.get("kind") == "testEnded" and test in started:
                took.append((at - started.pop(test), test))
    took.sort(reverse=True)
    for seconds, test in took[:count]:
        suite = test.split("/")[0].split(".")[-1]
        print(f"{seconds:8.1f} s  {suite}.{names[test]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
