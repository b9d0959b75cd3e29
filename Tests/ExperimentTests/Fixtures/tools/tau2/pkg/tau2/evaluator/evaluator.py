from enum import Enum

from tau2.data_model.simulation import RewardInfo


class EvaluationType(str, Enum):
    ENV = "env"
    COMMUNICATE = "communicate"
    ACTION = "action"
    ALL = "all"
    NL_ASSERTIONS = "nl_assertions"
    ALL_WITH_NL_ASSERTIONS = "all_with_nl_assertions"


def evaluate_simulation(simulation, task, evaluation_type, solo_mode, domain, mode=None, env_kwargs=None):
    if simulation.termination_reason not in ("agent_stop", "user_stop"):
        return RewardInfo(0.0, info={"note": "Simulation terminated prematurely. Termination reason: %s" % simulation.termination_reason})
    criteria = task.evaluation_criteria
    if criteria is None:
        return RewardInfo(1.0, info={"note": "No evaluation criteria"})
    called = [(c.get("name"), c.get("arguments")) for m in simulation.messages if isinstance(m, dict) and m.get("role") == "assistant"
              for c in (m.get("tool_calls") or []) if isinstance(c, dict)]
    checks = []
    for a in criteria.get("actions") or []:
        checks.append({"action": a, "action_match": (a["name"], a["arguments"]) in called, "action_reward": 1.0})
    reward = 1.0 if all(c["action_match"] for c in checks) else 0.0
    return RewardInfo(reward, reward_basis=criteria.get("reward_basis"), action_checks=checks)
