# Follows tau2-bench v1.0.1 src/tau2/runner/batch.py (run_domain, _run_save_paths) and
# src/tau2/runner/helpers.py (get_tasks): tasks come from the domain's tasks.json filtered by
# split_tasks.json's split ("base") and then by task_ids (an id that is not there raises);
# every finished simulation is checkpointed to DATA_DIR/simulations/<save_to>/results.json;
# after the batch, compute_metrics runs over every task (and raises on a task whose
# evaluation_criteria is null). The "simulation" is one user turn: the user asks for what
# user_scenario.instructions.reason_for_call says, the agent answers once, and each tool call
# it makes gets a tool message. banking_knowledge (src/tau2/domains/banking_knowledge) has its
# own task loader (tasks/task_*.json, no split) and environment (tools answered by it, `shell`
# through srt; one environment, so one sandbox directory, per simulation).
import datetime
import json
import os
import uuid

from tau2.data_model.message import ToolMessage, UserMessage
from tau2.data_model.simulation import Results, SimulationRun
from tau2.data_model.tasks import Task
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.metrics.agent_metrics import compute_metrics
from tau2.registry import registry
from tau2.runner.build import _build_env_kwargs
from tau2.utils.utils import DATA_DIR


class Tool:
    def __init__(self, name):
        self.name = name


def get_tasks(domain, task_split_name="base", task_ids=None):
    domain_dir = DATA_DIR / "tau2" / "domains" / domain
    if domain == "banking_knowledge":
        from tau2.domains.banking_knowledge.environment import get_tasks as knowledge_tasks
        tasks = knowledge_tasks(task_split_name)
        task_split_name = None
    else:
        tasks = [Task.model_validate(t) for t in json.load(open(domain_dir / "tasks.json"))]
    if task_split_name is not None:
        split = json.load(open(domain_dir / "split_tasks.json"))
        if task_split_name not in split:
            raise ValueError("Invalid task split name: %s. Valid splits are: %s" % (task_split_name, list(split)))
        tasks = [t for t in tasks if t.id in split[task_split_name]]
    if task_ids is not None:
        tasks = [t for t in tasks if t.id in task_ids]
        if len(tasks) != len(task_ids):
            raise ValueError("Not all tasks were found for task set %s - %s: %s" % (domain, task_split_name, set(task_ids) - {t.id for t in tasks}))
    return tasks


def run_domain(config):
    mode = os.environ.get("FAKE_MODE", "")
    if mode == "crash":
        raise RuntimeError("litellm.APIConnectionError: simulated outage")
    domain_dir = DATA_DIR / "tau2" / "domains" / config.domain
    tasks = get_tasks(config.domain, config.task_split_name, config.task_ids)
    knowledge = config.domain == "banking_knowledge"
    if knowledge:
        # prepare_batch warms the knowledge base's embeddings cache for every variant; its
        # EmbeddingsCache makes data/.embeddings_cache below the working directory
        # (src/tau2/runner/batch.py prepare_batch, src/tau2/knowledge/embeddings_cache.py, a2c0247).
        os.makedirs(os.path.join("data", ".embeddings_cache"), exist_ok=True)
        from tau2.domains.banking_knowledge.environment import get_environment
        # get_info at the start builds one environment too, with the config's variant
        policy = get_environment(retrieval_variant=config.retrieval_config).policy
    else:
        policy = open(domain_dir / "policy.md").read()
    open(domain_dir / "db.json").read()
    open(DATA_DIR / "tau2" / "user_simulator" / "simulation_guidelines.md").read()
    factory = registry.get_agent_factory(config.agent)
    save_to = config.save_to or "stand-in-run"
    save_dir = DATA_DIR / "simulations" / save_to
    os.makedirs(save_dir, exist_ok=True)
    info = {"git_commit": "stand-in", "num_trials": 1, "max_steps": 200, "max_errors": 10,
            "user_info": {"implementation": "user_simulator", "llm": config.llm_user},
            "agent_info": {"implementation": config.agent, "llm": config.llm_agent},
            "environment_info": {"domain_name": config.domain, "policy": policy}, "seed": config.seed}
    results = Results(info, tasks, [])
    run = tasks[:-1] if mode == "omit" else tasks
    for k, task in enumerate(run):
        env_kwargs = _build_env_kwargs(config, task) or None
        env = get_environment(**env_kwargs) if knowledge else None
        tools = env.tools if knowledge else ["get_order_details", "refund_order"]
        agent = factory(tools=[Tool(t) for t in tools], domain_policy=policy, llm=config.llm_agent, llm_args={})
        start = datetime.datetime.now().isoformat()
        first = UserMessage(content=task.user_scenario["instructions"]["reason_for_call"], turn_idx=0)
        state = agent.get_init_state()
        reply, state = agent.generate_next_message(first, state)
        reply.turn_idx = 1
        messages = [first.model_dump(), reply.model_dump()]
        for step in range(10):
            answers = []
            for call in reply.tool_calls or []:
                content = env.call(call.name, call.arguments) if knowledge else "{\"status\": \"refunded\"}"
                answers.append(ToolMessage(id=call.id, content=content, requestor="assistant", error=False, turn_idx=len(messages)))
                messages.append(answers[-1].model_dump())
            # banking_knowledge: the orchestrator hands the tool's answer back to the agent until
            # it answers without a call (tau2's Orchestrator.step; one call at a time here).
            if not knowledge or len(answers) != 1:
                break
            reply, state = agent.generate_next_message(answers[0], state)
            reply.turn_idx = len(messages)
            messages.append(reply.model_dump())
        raw = {"id": str(uuid.uuid4()), "task_id": task.id, "start_time": start, "end_time": datetime.datetime.now().isoformat(),
               "duration": 0.1, "termination_reason": "max_steps" if (k == 0 and mode == "max_steps") else "agent_stop",
               "agent_cost": 0.0125, "user_cost": 0.0025, "reward_info": None, "messages": messages, "ticks": None,
               "trial": 0, "seed": 626729}
        reward = evaluate_simulation(SimulationRun(raw), task, EvaluationType.ALL, False, config.domain, env_kwargs=env_kwargs)
        raw["reward_info"] = reward.model_dump()
        results.simulations.append(raw)
        with open(save_dir / "results.json", "w") as f:
            f.write(results.model_dump_json(indent=2))
        if mode == "crash_after" and len(results.simulations) == 2:
            raise RuntimeError("litellm.RateLimitError: simulated, after 2 simulations")
    compute_metrics(results)
    return results
