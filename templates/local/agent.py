"""HarnessAgent: the file the coding agent optimizes (autoharness, local benchmark).

Contract. For every task, autoharness loads this file inside a sandbox and calls

    HarnessAgent().run(instruction, workdir)

with the task's instruction text and workdir="/app", the task's own working directory (seeded
with the task's environment files). Whatever the agent leaves in /app is checked afterwards by
the task's tests, in a separate sandbox this code never sees. Inside the sandbox there is no
network, /tmp is private and empty, and everything outside /app and /tmp is read-only. Print
what helps you debug: train-split stdout/stderr end up in workspace/traces/.
"""


class HarnessAgent:
    def run(self, instruction: str, workdir: str) -> None:
        # Baseline: read the task and do nothing. The coding agent's job is to do better.
        print("task instruction:", instruction.strip()[:500])
