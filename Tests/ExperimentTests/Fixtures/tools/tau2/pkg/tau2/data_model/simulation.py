import datetime
import json


class TextRunConfig:
    def __init__(self, domain, agent, llm_agent=None, llm_user=None, task_split_name="base", task_ids=None,
                 max_concurrency=3, seed=300, num_trials=1, save_to=None, retrieval_config=None, retrieval_config_kwargs=None):
        self.domain, self.agent, self.llm_agent, self.llm_user = domain, agent, llm_agent, llm_user
        self.task_split_name, self.task_ids, self.max_concurrency, self.seed = task_split_name, task_ids, max_concurrency, seed
        self.num_trials, self.save_to = num_trials, save_to
        self.retrieval_config, self.retrieval_config_kwargs = retrieval_config, retrieval_config_kwargs
        # BaseRunConfig._default_banking_retrieval_config (tau2-bench a2c0247
        # src/tau2/data_model/simulation.py): banking_knowledge defaults to alltools.
        if domain == "banking_knowledge" and retrieval_config is None:
            self.retrieval_config = "alltools"


class RewardInfo:
    def __init__(self, reward, reward_basis=None, info=None, action_checks=None, db_check=None):
        self.reward, self.reward_basis, self.info, self.action_checks = reward, reward_basis, info, action_checks
        self.db_check = db_check

    def model_dump(self):
        return {"reward": self.reward, "db_check": self.db_check, "env_assertions": None, "action_checks": self.action_checks,
                "nl_assertions": None, "communicate_checks": None, "reward_basis": self.reward_basis,
                "reward_breakdown": None, "info": self.info}

    def model_dump_json(self, indent=None):
        return json.dumps(self.model_dump(), indent=indent)


class SimulationRun:
    REQUIRED = ("id", "task_id", "termination_reason", "messages")

    def __init__(self, raw):
        self.raw = raw
        self.task_id = str(raw["task_id"])
        self.termination_reason = raw["termination_reason"]
        self.messages = raw["messages"]
        self.reward_info = raw.get("reward_info")

    @classmethod
    def model_validate(cls, raw):
        import os
        if os.environ.get("FAKE_MODE") == "scorer_probe":
            # Only autoharness's scorer validates saved simulations: a denied call made there
            # is the tool's, not agent.py's (pivot_root, syscall 155 on x86_64).
            import ctypes
            ctypes.CDLL(None, use_errno=True).syscall(155, b"/", b"/")
        if not isinstance(raw, dict) or any(k not in raw for k in cls.REQUIRED) or not isinstance(raw["messages"], list):
            raise ValueError("1 validation error for SimulationRun")
        if raw["termination_reason"] not in ("agent_stop", "user_stop", "max_steps", "too_many_errors", "agent_error",
                                             "user_error", "infrastructure_error"):
            raise ValueError("termination_reason: input should be a valid TerminationReason")
        return cls(raw)


class Results:
    def __init__(self, info, tasks, simulations):
        self.timestamp = datetime.datetime.now().isoformat()
        self.info, self.tasks, self.simulations = info, tasks, simulations

    # tau2-bench v1.0.1 src/tau2/data_model/simulation.py, Results._task_metrics: a task
    # whose evaluation_criteria is null gives {} and the lookups below raise KeyError
    # ('num_agent_actions'); compute_metrics calls this for every task at the end of run_domain.
    @staticmethod
    def _task_metrics(task):
        eval_metrics = task.evaluation_criteria.info() if task.evaluation_criteria is not None else {}
        num_actions = eval_metrics["num_agent_actions"] + eval_metrics["num_user_actions"]
        return {
            "task_num_agent_actions": eval_metrics["num_agent_actions"],
            "task_num_user_actions": eval_metrics["num_user_actions"],
            "task_num_actions": num_actions,
            "task_num_env_assertions": eval_metrics["num_env_assertions"],
            "task_num_nl_assertions": eval_metrics["num_nl_assertions"],
        }

    def model_dump_json(self, indent=None):
        import os
        if os.environ.get("FAKE_MODE") == "garbage":
            return "{\"timestamp\": \"2026-"
        return json.dumps({"timestamp": self.timestamp, "info": self.info, "tasks": [t.model_dump() for t in self.tasks],
                           "simulations": self.simulations}, indent=indent)
