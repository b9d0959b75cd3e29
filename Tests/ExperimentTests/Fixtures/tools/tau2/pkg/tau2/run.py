import datetime
import json
import os
import uuid

from tau2.data_model.message import ToolMessage, UserMessage
from tau2.data_model.simulation import Results, SimulationRun
from tau2.data_model.tasks import Task
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.registry import registry

DATA_DIR = os.environ.get("TAU2_DATA_DIR", "data")


class Tool:
    def __init__(self, name):
        self.name = name


def run_domain(config):
    mode = os.environ.get("FAKE_MODE", "")
    if mode == "crash":
        raise RuntimeError("litellm.APIConnectionError: simulated outage")
    domain_dir = os.path.join(DATA_DIR, "tau2", "domains", config.domain)
    tasks = {str(t["id"]): t for t in json.load(open(os.path.join(domain_dir, "tasks.json")))}
    policy = open(os.path.join(domain_dir, "policy.md")).read()
    factory = registry.get_agent_factory(config.agent)
    ids = list(config.task_ids)
    if mode == "omit":
        ids = ids[:-1]
    sims = []
    for k, tid in enumerate(ids):
        task = Task(tasks[tid])
        agent = factory(tools=[Tool("get_order_details"), Tool("refund_order")], domain_policy=policy, llm=config.llm_agent, llm_args={})
        start = datetime.datetime.now().isoformat()
        first = UserMessage(content=task.user_scenario["instructions"]["reason_for_call"], turn_idx=0)
        state = agent.get_init_state()
        reply, state = agent.generate_next_message(first, state)
        reply.turn_idx = 1
        messages = [first.model_dump(), reply.model_dump()]
        for call in reply.tool_calls or []:
            messages.append(ToolMessage(id=call.id, content="{\"status\": \"refunded\"}", requestor="assistant", error=False,
                                        turn_idx=len(messages)).model_dump())
        raw = {"id": str(uuid.uuid4()), "task_id": tid, "start_time": start, "end_time": datetime.datetime.now().isoformat(),
               "duration": 0.1, "termination_reason": "max_steps" if (k == 0 and mode == "max_steps") else "agent_stop",
               "agent_cost": 0.0, "user_cost": 0.0, "reward_info": None, "messages": messages, "ticks": None,
               "trial": 0, "seed": 626729}
        info = evaluate_simulation(SimulationRun(raw), task, EvaluationType.ALL_WITH_NL_ASSERTIONS, False, config.domain)
        raw["reward_info"] = info.model_dump()
        sims.append(raw)
    info = {"git_commit": "stand-in", "num_trials": 1, "max_steps": 200, "max_errors": 10,
            "user_info": {"implementation": "user_simulator", "llm": config.llm_user},
            "agent_info": {"implementation": config.agent, "llm": config.llm_agent},
            "environment_info": {"domain_name": config.domain, "policy": policy}, "seed": config.seed}
    return Results(info, [tasks[t] for t in ids], sims)
