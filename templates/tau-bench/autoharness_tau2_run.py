"""autoharness: run tau2-bench simulations with agent/agent.py (inside the benchmark-runner sandbox).

Started by the supervisor as
    python autoharness_tau2_run.py --domain D --task-ids-file F --max-concurrency N --seed S
                                   --out /work/out/simulations.json [--agent-llm M] [--user-llm U]
with TAU2_DATA_DIR pointing at a copy of tau2's data in which no task has evaluation
criteria. The grades tau2 computes here are therefore meaningless and are never read: the
supervisor re-scores the saved trajectories in a separate sandbox without agent.py.
"""
import argparse
import os
import sys

# This script's directory (templates/tau-bench) also holds the agent template, agent.py: it
# must not be importable as `agent`.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

p = argparse.ArgumentParser()
p.add_argument("--domain", required=True)
p.add_argument("--task-ids-file", required=True)
p.add_argument("--max-concurrency", type=int, default=3)
p.add_argument("--seed", type=int, default=300)
p.add_argument("--out", required=True)
p.add_argument("--agent-llm")
p.add_argument("--user-llm")
p.add_argument("--retrieval-config")
args = p.parse_args()
ids = [line.strip() for line in open(args.task_ids_file, encoding="utf-8") if line.strip()]
# tau2 writes below its working directory (banking_knowledge: data/.embeddings_cache, made by
# every run, src/tau2/knowledge/embeddings_cache.py EmbeddingsCache): a directory of this
# sandbox's own output, never the read-only one it starts in.
os.makedirs(os.path.join(os.path.dirname(os.path.abspath(args.out)), "cwd"), exist_ok=True)
os.chdir(os.path.join(os.path.dirname(os.path.abspath(args.out)), "cwd"))

# tau2 reads TAU2_DATA_DIR when it is first imported; the supervisor set it.
from tau2 import registry  # noqa: E402
from tau2.data_model.simulation import TextRunConfig  # noqa: E402
from tau2.run import run_domain  # noqa: E402

sys.path.insert(0, "/work")
from agent.agent import HarnessAgent  # noqa: E402

AGENT_NAME = "autoharness_agent"
SAVE_TO = "autoharness"


def make_agent(tools, domain_policy, **kwargs):
    return HarnessAgent(tools=tools, domain_policy=domain_policy, llm=kwargs.get("llm"), llm_args=kwargs.get("llm_args"))


if registry.get_agent_factory(AGENT_NAME) is None:
    registry.register_agent_factory(make_agent, AGENT_NAME)

agent_llm = args.agent_llm or os.environ.get("AGENT_MODEL")
# Only given when the experiment names one: tau2 then applies its own default (banking_knowledge:
# alltools, src/tau2/data_model/simulation.py _default_banking_retrieval_config).
extra = {"retrieval_config": args.retrieval_config} if args.retrieval_config else {}
config = TextRunConfig(
    domain=args.domain,
    agent=AGENT_NAME,
    llm_agent=agent_llm,
    llm_user=args.user_llm or agent_llm,
    task_ids=ids,
    max_concurrency=args.max_concurrency,
    seed=args.seed,
    save_to=SAVE_TO,
    **extra,
)


def save(text):
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, args.out)


try:
    results = run_domain(config)
except BaseException as e:
    # run_domain checkpoints every finished simulation to DATA_DIR/simulations/<save_to>/
    # results.json (tau2 v1.0.1 src/tau2/runner/batch.py, _run_save_paths): when it fails
    # later (a model outage, the metrics at the end), those simulations are still scored.
    checkpoint = os.path.join(os.environ["TAU2_DATA_DIR"], "simulations", SAVE_TO, "results.json")
    if os.path.isfile(checkpoint):
        with open(checkpoint, encoding="utf-8") as f:
            save(f.read())
        print("autoharness: tau2 failed (%s: %s); the simulations it had saved are kept" % (type(e).__name__, e), file=sys.stderr)
    raise
save(results.model_dump_json(indent=2))
print("autoharness: %d simulation(s) saved" % len(results.simulations))
