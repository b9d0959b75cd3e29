# Follows tau2-bench v1.0.1 src/tau2/data_model/tasks.py (EvaluationCriteria, Task): a task's
# evaluation_criteria is an object whose parts may each be null; info() counts them.


class EvaluationCriteria:
    def __init__(self, raw):
        self.raw = raw
        self.actions = raw.get("actions")
        self.env_assertions = raw.get("env_assertions")
        self.communicate_info = raw.get("communicate_info")
        self.nl_assertions = raw.get("nl_assertions")
        # tau2's default basis when the field is absent: [DB, COMMUNICATE]
        self.reward_basis = raw["reward_basis"] if "reward_basis" in raw else ["DB", "COMMUNICATE"]

    def info(self):
        actions = self.actions
        return {
            "num_agent_actions": len([a for a in actions if a.get("requestor", "assistant") == "assistant"]) if actions is not None else 0,
            "num_user_actions": len([a for a in actions if a.get("requestor") == "user"]) if actions is not None else 0,
            "num_env_assertions": len(self.env_assertions) if self.env_assertions is not None else 0,
            "num_nl_assertions": len(self.nl_assertions) if self.nl_assertions is not None else 0,
        }


class Task:
    """The task as a plain object: the parts the stand-in reads."""

    def __init__(self, raw):
        self.raw = raw
        self.id = str(raw["id"])
        self.user_scenario = raw["user_scenario"]
        criteria = raw.get("evaluation_criteria")
        self.evaluation_criteria = EvaluationCriteria(criteria) if isinstance(criteria, dict) else None

    @classmethod
    def model_validate(cls, raw):
        if not isinstance(raw, dict) or "id" not in raw or not isinstance(raw.get("user_scenario"), dict):
            raise ValueError("1 validation error for Task")
        return cls(raw)

    def model_dump(self):
        return self.raw
