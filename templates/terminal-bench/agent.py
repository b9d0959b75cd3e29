"""HarnessAgent: the file the coding agent optimizes (autoharness, Terminal-Bench 2.0 via Harbor).

Contract. Harbor imports this module as `agent.agent` (read-only at /work/agent/agent.py in the
benchmark-runner sandbox) and runs HarnessAgent as an import-path agent: for each task
`await run(instruction, environment, context)`, where `environment.exec(command)` runs a shell
command in the task's container and returns its stdout, stderr and return code. The task's
tests run afterwards and write the reward. The model is self.model_name (harbor --model, also
$AGENT_MODEL). Files under self.logs_dir become agent-* files in train traces.
"""
import os

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext


class HarnessAgent(BaseAgent):
    @staticmethod
    def name() -> str:
        return "harness-agent"

    def version(self) -> str | None:
        return "0.1.0"

    async def setup(self, environment: BaseEnvironment) -> None:
        pass

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        # Baseline: look around and stop. The coding agent's job is to do better (e.g. an LLM
        # loop over environment.exec with self.model_name or os.environ["AGENT_MODEL"]).
        result = await environment.exec("pwd && ls -la")
        with open(os.path.join(self.logs_dir, "baseline.txt"), "w") as f:
            f.write("instruction:\n%s\n\nls:\n%s\n" % (instruction, result.stdout))
