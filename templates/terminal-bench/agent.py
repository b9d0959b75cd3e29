"""HarnessAgent: the file the coding agent optimizes (autoharness, Terminal-Bench 2.0 via Harbor).

Contract. Harbor imports this module as `agent.agent` (read-only at /work/agent/agent.py in the
benchmark-runner sandbox) and runs HarnessAgent as an import-path agent: for each task
`await run(instruction, environment, context)`, where `environment.exec(command)` runs a shell
command in the task's container and returns its stdout, stderr and return code. The task's
tests run afterwards and write the reward. The model is self.model_name (harbor --model, also
$AGENT_MODEL). Files under self.logs_dir become agent-* files in train traces.

Baseline. A minimal tool loop: the model gets the instruction and one tool, `bash`, whose
commands run through environment.exec; it stops when the model answers without a tool call or
after MAX_TURNS. The model is reached over plain HTTPS (the standard library; the sandbox's
HTTPS_PROXY carries it to the allowlisted API): Anthropic Messages for `claude*` /
`anthropic/...` models, OpenAI Responses otherwise. The API key (ANTHROPIC_API_KEY or
OPENAI_API_KEY, listed in runner.env_pass) is read only when the model is first called.
ANTHROPIC_BASE_URL / OPENAI_BASE_URL point elsewhere (a proxy, a test server).
"""
import json
import os
import ssl
import urllib.error
import urllib.request

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

MAX_TURNS = 30
MAX_OUTPUT = 8000  # characters of a command's output shown to the model
COMMAND_TIMEOUT = 600  # seconds one command may take

SYSTEM = ("You are solving a task in a Linux terminal. Run shell commands with the bash tool, one at a "
          "time, and look at their output. When the task is done, answer with a short summary and no tool call.")
BASH = {
    "name": "bash",
    "description": "Run a bash command in the task's environment and return its exit code, stdout and stderr.",
    "schema": {"type": "object", "properties": {"command": {"type": "string", "description": "the command"}},
               "required": ["command"]},
}


class ModelError(RuntimeError):
    pass


class ModelClient:
    """One chat with tools, over the vendor's HTTP API."""

    def __init__(self, model: str | None):
        if not model:
            raise ModelError("no model: set agent_model in experiment_config.yaml (harbor --model)")
        provider, _, name = model.rpartition("/")
        self.model = name
        self.anthropic = provider == "anthropic" or (not provider and name.startswith("claude"))
        self.messages: list = []

    def _post(self, url: str, headers: dict, body: dict) -> dict:
        request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                         headers={"content-type": "application/json", **headers})
        try:
            with urllib.request.urlopen(request, timeout=600, context=ssl.create_default_context()) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise ModelError(f"{url}: HTTP {e.code}: {e.read()[:500].decode(errors='replace')}") from None

    @staticmethod
    def _key(name: str) -> str:
        key = os.environ.get(name)
        if not key:
            raise ModelError(f"no API key: {name} is not set (export it and list it in runner.env_pass)")
        return key

    def start(self, instruction: str) -> None:
        self.messages = ([{"role": "user", "content": instruction}] if self.anthropic
                         else [{"role": "user", "content": [{"type": "input_text", "text": instruction}]}])

    def step(self) -> tuple[str, list[tuple[str, dict]], dict]:
        """Asks the model; returns its text, its tool calls [(call id, input)] and token usage."""
        if self.anthropic:
            base = os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com").rstrip("/")
            reply = self._post(base + "/v1/messages",
                               {"x-api-key": self._key("ANTHROPIC_API_KEY"), "anthropic-version": "2023-06-01"},
                               {"model": self.model, "max_tokens": 4096, "system": SYSTEM, "messages": self.messages,
                                "tools": [{"name": BASH["name"], "description": BASH["description"],
                                           "input_schema": BASH["schema"]}]})
            content = reply.get("content") or []
            self.messages.append({"role": "assistant", "content": content})
            text = "".join(b.get("text", "") for b in content if b.get("type") == "text")
            calls = [(b["id"], b.get("input") or {}) for b in content if b.get("type") == "tool_use"]
            usage = reply.get("usage") or {}
            return text, calls, {"in": usage.get("input_tokens", 0), "out": usage.get("output_tokens", 0)}
        base = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        reply = self._post(base + "/responses", {"authorization": "Bearer " + self._key("OPENAI_API_KEY")},
                           {"model": self.model, "instructions": SYSTEM, "input": self.messages,
                            "tools": [{"type": "function", "name": BASH["name"], "description": BASH["description"],
                                       "parameters": BASH["schema"]}]})
        output = reply.get("output") or []
        self.messages += output
        text = "".join(c.get("text", "") for it in output if it.get("type") == "message"
                       for c in it.get("content") or [] if c.get("type") == "output_text")
        calls = []
        for it in output:
            if it.get("type") == "function_call":
                try:
                    arguments = json.loads(it.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                calls.append((it["call_id"], arguments))
        usage = reply.get("usage") or {}
        return text, calls, {"in": usage.get("input_tokens", 0), "out": usage.get("output_tokens", 0)}

    def answer(self, results: list[tuple[str, str]]) -> None:
        """Sends the tool results [(call id, output)] back."""
        if self.anthropic:
            self.messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": i, "content": out} for i, out in results]})
        else:
            self.messages += [{"type": "function_call_output", "call_id": i, "output": out} for i, out in results]


class HarnessAgent(BaseAgent):
    @staticmethod
    def name() -> str:
        return "harness-agent"

    def version(self) -> str | None:
        return "0.2.0"

    async def setup(self, environment: BaseEnvironment) -> None:
        pass

    def _log(self, entry: dict) -> None:
        with open(os.path.join(self.logs_dir, "trajectory.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        client = ModelClient(self.model_name or os.environ.get("AGENT_MODEL"))
        client.start(instruction)
        tokens_in = tokens_out = 0
        try:
            for turn in range(MAX_TURNS):
                text, calls, usage = client.step()
                tokens_in += usage["in"]
                tokens_out += usage["out"]
                self._log({"turn": turn, "text": text, "calls": [c for _, c in calls]})
                if not calls:
                    break
                results = []
                for call_id, arguments in calls:
                    command = str(arguments.get("command", ""))
                    try:
                        r = await environment.exec(command, timeout_sec=COMMAND_TIMEOUT)
                        out = f"exit code {r.return_code}\nstdout:\n{r.stdout or ''}\nstderr:\n{r.stderr or ''}"
                    except Exception as e:  # a timed-out command is the model's to handle
                        out = f"error: {e}"
                    results.append((call_id, out[-MAX_OUTPUT:]))
                    self._log({"turn": turn, "command": command, "result": out[-MAX_OUTPUT:]})
                client.answer(results)
        finally:
            context.n_input_tokens = tokens_in
            context.n_output_tokens = tokens_out
