class Task:
    """The task as a plain object: the parts the stand-in reads."""

    def __init__(self, raw):
        self.raw = raw
        self.id = str(raw["id"])
        self.user_scenario = raw.get("user_scenario") or {}
        self.evaluation_criteria = raw.get("evaluation_criteria")

    @classmethod
    def model_validate(cls, raw):
        if not isinstance(raw, dict) or "id" not in raw:
            raise ValueError("not a task")
        return cls(raw)

    def model_dump(self):
        return self.raw
