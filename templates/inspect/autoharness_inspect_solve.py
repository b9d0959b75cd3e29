"""The solve phase of `benchmark: inspect`, in the benchmark-runner sandbox (autoharness).

  inspect eval autoharness_inspect_solve.py@autoharness_solve -T samples=SAMPLES.jsonl \
      -T agent=/work/agent/agent.py --model MODEL --no-score --log-format json --log-dir DIR

SAMPLES.jsonl holds only this run's samples, each {"id", "input"} (and "choices" where the
task has them): the supervisor wrote it from the experiment's frozen sample list, without the
targets and metadata. The solver is agent.py's `agent()`; nothing is scored here. What the
scorer takes from the log this writes is each sample's output and messages, nothing else: the
targets, metadata, input and scores it scores with are its own.
"""
import importlib.util
import os
import sys

from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset


def load_agent(path):
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location("agent", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent"] = module
    spec.loader.exec_module(module)
    make = getattr(module, "agent", None)
    if not callable(make):
        raise RuntimeError("%s defines no agent() returning an inspect_ai solver" % path)
    return make()


@task
def autoharness_solve(samples: str, agent: str):
    return Task(dataset=json_dataset(samples), solver=load_agent(agent), name="autoharness_solve")
