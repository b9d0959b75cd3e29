"""Reports token usage the way the real CLIs do on their output (see UsageMeter), so the
run's accounting and budget.max_cost_usd can be tested without them.
  spender.py claude   one Claude Code stream-json session costing $0.60, then a clean exit
                      after one `autoharness status` request (work done: not a crash)
  spender.py codex    Codex `exec --json` turns of 100k input (40k cached) and 10k output
                      tokens every 0.2 s, forever (no cost: priced by the config)"""
import json
import subprocess
import sys
import time


def emit(obj):
    print(json.dumps(obj), flush=True)


if sys.argv[1] == "claude":
    emit({"type": "system", "subtype": "init", "model": "claude-test-1"})
    for block in range(2):  # one line per content block, same message id
        emit({"type": "assistant", "message": {"id": "msg_1", "model": "claude-test-1",
              "usage": {"input_tokens": 3000, "output_tokens": 1 + block, "cache_read_input_tokens": 500,
                        "cache_creation_input_tokens": 0}}})
    subprocess.run(["autoharness", "status"], capture_output=True)
    emit({"type": "result", "subtype": "success", "total_cost_usd": 0.6,
          "usage": {"input_tokens": 3000, "output_tokens": 200},
          "modelUsage": {"claude-test-1": {"inputTokens": 3000, "outputTokens": 200, "cacheReadInputTokens": 500,
                                           "cacheCreationInputTokens": 0, "costUSD": 0.5},
                         "claude-side-1": {"inputTokens": 100, "outputTokens": 10, "cacheReadInputTokens": 0,
                                           "cacheCreationInputTokens": 0, "costUSD": 0.1}}})
else:
    emit({"type": "thread.started", "thread_id": "t"})
    while True:
        emit({"type": "turn.completed", "usage": {"input_tokens": 100000, "cached_input_tokens": 40000,
                                                   "output_tokens": 10000}})
        time.sleep(0.2)
