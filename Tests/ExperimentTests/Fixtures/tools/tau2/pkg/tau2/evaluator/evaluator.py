# Follows tau2-bench v1.0.1 src/tau2/evaluator/evaluator.py (evaluate_simulation) and its
# evaluator_env/evaluator_action: a premature termination scores 0; no evaluation_criteria
# scores 1.0; otherwise each component is computed (a component with nothing to check is
# 1.0) and the reward is the product of the components named in reward_basis; a basis that
# names NL_ASSERTION is only evaluated when asked (ALL_WITH_NL_ASSERTIONS) or required by
# the task.
# The database component follows src/tau2/evaluator/evaluator_env.py
# (EnvironmentEvaluator.calculate_reward, read at sierra-research/tau2-bench 3e33a64): the
# predicted environment replays every tool call of the trajectory (Environment.set_state with
# the full message history), the gold environment replays the task's expected actions
# (replay_golden_actions), and the component is 1.0 only when the two databases hash the same.
# So a call the task did not expect that changes the database fails it, however many expected
# calls are also there. The stand-in's database is the domain's db.json; its one mutating tool,
# refund_order, turns a delivered order into a refunded one with its reason; reads change nothing.
# The action component (evaluator_action) is that every expected assistant action (name and
# arguments) was called; extra calls do not count against it.
import copy
import json
from enum import Enum

from tau2.data_model.simulation import RewardInfo
from tau2.utils.utils import DATA_DIR


class EvaluationType(str, Enum):
    ENV = "env"
    COMMUNICATE = "communicate"
    ACTION = "action"
    ALL = "all"
    NL_ASSERTIONS = "nl_assertions"
    ALL_WITH_NL_ASSERTIONS = "all_with_nl_assertions"


def _called(simulation):
    return [(c.get("name"), c.get("arguments")) for m in simulation.messages if isinstance(m, dict) and m.get("role") == "assistant"
            for c in (m.get("tool_calls") or []) if isinstance(c, dict)]


def _calls(simulation, roles=("assistant", "user")):
    return [(c.get("name"), c.get("arguments")) for m in simulation.messages if isinstance(m, dict) and m.get("role") in roles
            for c in (m.get("tool_calls") or []) if isinstance(c, dict)]


def _replay(db, calls):
    """The database after `calls`, from `db` (Environment.make_tool_call, one call at a time)."""
    db = copy.deepcopy(db)
    orders = db.get("orders", {})
    for name, args in calls:
        if name != "refund_order" or not isinstance(args, dict):
            continue
        order = orders.get(args.get("order_id"))
        if isinstance(order, dict) and order.get("status") == "delivered":  # otherwise the tool raises: no change
            order["status"] = "refunded"
            order["reason"] = args.get("reason")
    return json.dumps(db, sort_keys=True)


def evaluate_simulation(simulation, task, evaluation_type, solo_mode, domain, mode=None, env_kwargs=None, strict_replay=True):
    if domain == "banking_knowledge":
        # EnvironmentEvaluator builds the predicted and the gold environment; each of
        # banking_knowledge's makes its own SandboxManager (srt's names on PATH, a workspace in
        # TMPDIR), though replaying runs no shell call (set_state skips read-only tools).
        from tau2.domains.banking_knowledge.environment import get_environment
        predicted = get_environment(solo_mode=solo_mode, **(env_kwargs or {}))
        get_environment(**(env_kwargs or {}))
        built = {"retrieval_variant": predicted.variant, "read_log_allowlist": sorted(predicted.read_log_allowlist),
                 "task_has_criteria": (env_kwargs or {}).get("task") is not None and (env_kwargs or {})["task"].evaluation_criteria is not None}
    if simulation.termination_reason not in ("agent_stop", "user_stop"):
        return RewardInfo(0.0, info={"note": "Simulation terminated prematurely. Termination reason: %s" % simulation.termination_reason})
    criteria = task.evaluation_criteria
    if criteria is None:
        return RewardInfo(1.0, info={"note": "No evaluation criteria"})
    called = _called(simulation)
    expected = [a for a in (criteria.actions or []) if a.get("requestor", "assistant") == "assistant"]
    checks = [{"action": a, "action_match": (a["name"], a["arguments"]) in called, "action_reward": 1.0} for a in expected]
    matched = 1.0 if all(c["action_match"] for c in checks) else 0.0
    if criteria.actions is None and criteria.env_assertions is None:
        env_reward = 1.0
    else:
        with open(DATA_DIR / "tau2" / "domains" / domain / "db.json") as f:  # banking_knowledge: no mutating tool here
            db = json.load(f)
        gold = _replay(db, [(a["name"], a["arguments"]) for a in (criteria.actions or [])])
        env_reward = 1.0 if _replay(db, _calls(simulation)) == gold else 0.0
    action_reward = 1.0 if criteria.actions is None else matched
    if evaluation_type == EvaluationType.ALL_WITH_NL_ASSERTIONS or "NL_ASSERTION" in criteria.reward_basis:
        # tau2 calls its LLM judge here (a network call with the judge's API key), even when
        # the task's basis does not count the result; the stand-in has no judge.
        raise RuntimeError("litellm.AuthenticationError: the NL-assertion judge needs an API key (stand-in)")
    reward = 1.0
    basis = set(criteria.reward_basis)
    if basis & {"DB", "ENV_ASSERTION"}:
        reward *= env_reward
    if "ACTION" in basis:
        reward *= action_reward
    # tau2's EnvironmentEvaluator reports the database comparison as db_check (DBCheck:
    # db_match, db_reward) whenever the task has actions or env assertions to replay.
    db_check = None if criteria.actions is None and criteria.env_assertions is None else {"db_match": env_reward == 1.0, "db_reward": env_reward}
    return RewardInfo(reward, reward_basis=criteria.reward_basis, action_checks=checks, db_check=db_check,
                      info={"environment": built} if domain == "banking_knowledge" else None)
