"""HarnessAgent: the file the coding agent optimizes (autoharness, tau2-bench).

Contract. tau2 builds the agent as HarnessAgent(tools=..., domain_policy=..., llm=..., llm_args=...)
and calls get_init_state(message_history) once, then generate_next_message(message, state)
for every user message or tool result, expecting (AssistantMessage, state) back. This file runs
inside the benchmark-runner sandbox: the task files it could read there have no expected
actions, its writes vanish after the run, and the network is only the model API.
"""
import os

from tau2.agent.llm_agent import LLMAgent

AGENT_MODEL = os.environ.get("AGENT_MODEL", "gpt-5.4")


class HarnessAgent(LLMAgent):
    """The baseline: tau2's own LLM agent with the domain policy as its system prompt."""

    def __init__(self, tools, domain_policy, llm=None, llm_args=None):
        super().__init__(tools=tools, domain_policy=domain_policy, llm=llm or AGENT_MODEL, llm_args=llm_args or {})
