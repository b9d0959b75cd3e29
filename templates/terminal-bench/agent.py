"""HarnessAgent: the file the coding agent optimizes (autoharness, `command` benchmark).

Contract. The operator's benchmark command imports this file as `agent.agent` (it is at
/work/agent/agent.py inside the sandbox, read-only, with /work on PYTHONPATH) and calls
HarnessAgent however its README says. Everything the command writes lives on a tmpfs that is
removed after each run; the network is only what the operator allowlisted. Print what helps
you debug: train-split output ends up in workspace/traces/.
"""


class HarnessAgent:
    def run(self, instruction: str) -> str:
        # Baseline: answer nothing useful. The coding agent's job is to do better.
        print("task instruction:", instruction.strip()[:500])
        return ""
