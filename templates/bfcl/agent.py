"""HarnessAgent: the file the coding agent optimizes (autoharness, BFCL).

Contract. For each task the runner calls HarnessAgent().run(messages, functions):
  messages   the conversation so far, a list of {"role": ..., "content": ...} (BFCL's
             `question`: its first turn)
  functions  BFCL's function documents: {"name", "description", "parameters"} with
             parameters in BFCL's JSON-schema dialect ("type": "dict", "float", "tuple", "any")
and takes back the calls the model makes, a list of {"name": ..., "arguments": {...}} (an
empty list, or a string, when the right answer is to call nothing). BFCL's own checker grades
them, elsewhere: names with "." are compared with "_" in their place, as OpenAI-style tools
must name them. This file runs in the benchmark-runner sandbox: it sees only this run's
questions, its writes vanish after the run, and its network is only the model API.
"""
import json
import os
import urllib.request

AGENT_MODEL = os.environ.get("AGENT_MODEL", "gpt-5.4")
BASE_URL = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/")

# BFCL's parameter types, as JSON Schema names them.
SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


def schema(node):
    """A BFCL parameter schema with its types renamed for JSON Schema, recursively."""
    if isinstance(node, list):
        return [schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: schema(v) for k, v in node.items()}
    if isinstance(out.get("type"), str):
        out["type"] = SCHEMA_TYPES.get(out["type"], out["type"])
    return out


def tool(function):
    return {"type": "function", "function": {
        "name": function["name"].replace(".", "_"),
        "description": function.get("description", ""),
        "parameters": schema(function.get("parameters", {"type": "dict", "properties": {}})),
    }}


class HarnessAgent:
    """The baseline: one chat completion with the functions offered as tools."""

    def run(self, messages, functions):
        body = {"model": AGENT_MODEL, "messages": messages, "tools": [tool(f) for f in functions]}
        request = urllib.request.Request(
            BASE_URL + "/chat/completions", data=json.dumps(body).encode(),
            headers={"content-type": "application/json",
                     "authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")})
        with urllib.request.urlopen(request, timeout=120) as response:
            message = json.load(response)["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        if not calls:
            return message.get("content") or ""
        return [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"] or "{}")}
                for c in calls]
