class _Model:
    FIELDS = ()

    def __init__(self, **kw):
        for f in self.FIELDS:
            setattr(self, f, kw.get(f))

    def model_dump(self):
        out = {}
        for f in self.FIELDS:
            v = getattr(self, f)
            out[f] = [x.model_dump() if hasattr(x, "model_dump") else x for x in v] if isinstance(v, list) else v
        return out


class ToolCall(_Model):
    FIELDS = ("id", "name", "arguments", "requestor")


class UserMessage(_Model):
    FIELDS = ("role", "content", "tool_calls", "turn_idx", "timestamp", "cost", "usage", "raw_data")

    def __init__(self, **kw):
        kw.setdefault("role", "user")
        super().__init__(**kw)


class AssistantMessage(_Model):
    FIELDS = ("role", "content", "tool_calls", "turn_idx", "timestamp", "cost", "usage", "raw_data")

    def __init__(self, **kw):
        kw.setdefault("role", "assistant")
        super().__init__(**kw)


class ToolMessage(_Model):
    FIELDS = ("id", "role", "content", "requestor", "error", "turn_idx", "timestamp")

    def __init__(self, **kw):
        kw.setdefault("role", "tool")
        super().__init__(**kw)
