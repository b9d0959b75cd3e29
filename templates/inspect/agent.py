"""The harness under improvement, for `benchmark: inspect` (autoharness).

`agent()` returns the inspect_ai solver each sample is solved with (inspect_ai.solver: a chain
of prompt steps and `generate()`, a ReAct agent, or a solver of your own). It runs in inspect's
solve phase, in the runner sandbox, on samples that hold their input (and choices) only: the
targets and the task's metadata are never in that sandbox. The model is the config's
`agent_model` (inspect's own name, such as `openai/gpt-5.4` or `mockllm/model`), reached through
autoharness's inference gate. Scoring happens afterwards, in another sandbox, by the task's own
scorers on what this solver answered (`state.output` and `state.messages`).
"""
from inspect_ai.solver import chain, generate, system_message

SYSTEM = "Read the story, then answer the question with the location it asks for, in one word."


def agent():
    return chain(system_message(SYSTEM), generate())
