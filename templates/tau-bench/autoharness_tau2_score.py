"""autoharness: re-score tau2-bench trajectories without agent.py (benchmark-scorer sandbox).

    python autoharness_tau2_score.py --domain D --task-ids-file F --simulations S --out R --traces T
                                     [--retrieval-config C]

Reads the simulations the runner saved (untrusted data: written by the process that hosted
agent.py), evaluates each with tau2's own evaluate_simulation against the full task
definitions from TAU2_DATA_DIR (the real data, which the runner never saw), and writes
{task id: reward or null} to R and {task id: dollars} (tau2's agent and user costs) to
costs.json beside it. Per task, T/<encoded id>/ gets simulation.json, task.json
and reward_info.json; the supervisor copies them into train traces only.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile

# This script's directory (templates/tau-bench) also holds the agent template, agent.py: it
# must not be importable as `agent`.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

p = argparse.ArgumentParser()
p.add_argument("--domain", required=True)
p.add_argument("--task-ids-file", required=True)
p.add_argument("--simulations", required=True)
p.add_argument("--out", required=True)
p.add_argument("--traces", required=True)
p.add_argument("--retrieval-config")
args = p.parse_args()
wanted = [line.strip() for line in open(args.task_ids_file, encoding="utf-8") if line.strip()]
# tau2 writes below its working directory (banking_knowledge: data/.embeddings_cache, made by
# every run, src/tau2/knowledge/embeddings_cache.py EmbeddingsCache): a directory of this
# sandbox's own output, never the read-only one it starts in.
args.simulations, args.out, args.traces = (os.path.abspath(p) for p in (args.simulations, args.out, args.traces))
os.makedirs(os.path.join(os.path.dirname(os.path.abspath(args.out)), "cwd"), exist_ok=True)
os.chdir(os.path.join(os.path.dirname(os.path.abspath(args.out)), "cwd"))

from tau2.data_model.simulation import SimulationRun, TextRunConfig  # noqa: E402
from tau2.data_model.tasks import Task  # noqa: E402
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation  # noqa: E402

SAFE = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def encode(task_id):
    """The supervisor's TraceName.encode: bytes outside [A-Za-z0-9._-] (and a leading '.') as %XX."""
    out = []
    for i, b in enumerate(task_id.encode("utf-8")):
        out.append(chr(b) if b in SAFE or (b == 0x2E and i > 0) else "%%%02X" % b)
    return "".join(out)


data = os.environ["TAU2_DATA_DIR"]
domain_dir = os.path.join(data, "tau2", "domains", args.domain)
if args.domain == "banking_knowledge":
    # Its loader reads tasks/task_*.json, one task a file; its tasks.json is a stale aggregate
    # (tau2-bench 1.0.1 src/tau2/domains/banking_knowledge/environment.py, get_tasks).
    tasks = {}
    for name in sorted(os.listdir(os.path.join(domain_dir, "tasks"))):
        if name.startswith("task_") and name.endswith(".json"):
            with open(os.path.join(domain_dir, "tasks", name), encoding="utf-8") as f:
                task = json.load(f)
            tasks[str(task["id"])] = task
else:
    with open(os.path.join(domain_dir, "tasks.json"), encoding="utf-8") as f:
        tasks = {str(t["id"]): t for t in json.load(f)}

try:
    with open(args.simulations, encoding="utf-8") as f:
        saved = json.load(f)
    simulations = saved.get("simulations", []) if isinstance(saved, dict) else []
except (OSError, ValueError) as e:
    print("autoharness: no usable simulations file: %s" % e)
    simulations = []

# The environments are built as tau2's runner builds them for the live run's evaluation
# (src/tau2/runner/batch.py: evaluate with env_kwargs = runner/build.py _build_env_kwargs(config,
# task)): banking_knowledge's retrieval variant (its tools and policy) and the reads its database
# logs come from the run's config and the full task. Without tau2's helper (an older tau2, whose
# domains take none), no keyword arguments, as that tau2's own evaluation passed.
try:
    from tau2.runner.build import _build_env_kwargs  # noqa: E402
except ImportError:
    _build_env_kwargs = None
    if args.retrieval_config:
        sys.exit("autoharness: this tau2 has no tau2.runner.build._build_env_kwargs, so no retrieval config")
run_config = TextRunConfig(domain=args.domain, agent="llm_agent",
                           **({"retrieval_config": args.retrieval_config} if args.retrieval_config else {}))

scores = {tid: [] for tid in wanted}
costs = {}
for raw in simulations:
    tid = str(raw.get("task_id")) if isinstance(raw, dict) else None
    if tid not in scores:
        continue
    # The model spend tau2 recorded for the simulation (SimulationRun.agent_cost and
    # user_cost, src/tau2/data_model/simulation.py), as the runner's process reported it.
    for key in ("agent_cost", "user_cost"):
        value = raw.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
            costs[tid] = costs.get(tid, 0.0) + float(value)
    trace = os.path.join(args.traces, encode(tid))
    os.makedirs(trace, exist_ok=True)
    with open(os.path.join(trace, "simulation.json"), "w", encoding="utf-8") as f:
        json.dump(raw, f, indent=2)
    with open(os.path.join(trace, "task.json"), "w", encoding="utf-8") as f:
        json.dump(tasks[tid], f, indent=2)
    # Each environment tau2 builds for banking_knowledge exports the knowledge base into a
    # workspace of its own under tempfile.gettempdir() and never removes it
    # (src/tau2/knowledge/sandbox_manager.py SandboxManager): two a task, ~3 MB each, which fill
    # this sandbox's tmpfs after a few dozen tasks. So each task's go in a directory of its own,
    # removed when it is scored.
    workspace = tempfile.mkdtemp(prefix="task-", dir=os.getcwd())
    tempfile.tempdir = workspace
    try:
        task = Task.model_validate(tasks[tid])
        info = evaluate_simulation(
            simulation=SimulationRun.model_validate(raw),
            task=task,
            # what tau2's own runs use (runner/batch.py): the NL-assertion judge runs only for
            # tasks whose reward_basis counts it
            evaluation_type=EvaluationType.ALL,
            solo_mode=False,
            domain=args.domain,
            **({"env_kwargs": _build_env_kwargs(run_config, task) or None} if _build_env_kwargs else {}),
        )
        scores[tid].append(float(info.reward))
        with open(os.path.join(trace, "reward_info.json"), "w", encoding="utf-8") as f:
            f.write(info.model_dump_json(indent=2))
    except Exception as e:  # a trajectory that does not parse or replay scores 0
        print("autoharness: %s: %s: %s" % (tid, type(e).__name__, e))
        scores[tid].append(0.0)
    finally:
        tempfile.tempdir = None
        shutil.rmtree(workspace, ignore_errors=True)

rewards = {tid: (sum(v) / len(v) if v else None) for tid, v in scores.items()}
with open(args.out, "w", encoding="utf-8") as f:
    json.dump(rewards, f, indent=2)
with open(os.path.join(os.path.dirname(args.out), "costs.json"), "w", encoding="utf-8") as f:
    json.dump(costs, f, indent=2)
print("autoharness: scored %d of %d task(s)" % (sum(v is not None for v in rewards.values()), len(wanted)))
