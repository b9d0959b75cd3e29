class _Registry:
    def __init__(self):
        self._agents = {}

    def register_agent_factory(self, factory, name, task_filter=None, metadata=None):
        if name in self._agents:
            raise ValueError("agent %s already registered" % name)
        self._agents[name] = factory

    def get_agent_factory(self, name):
        return self._agents.get(name)


registry = _Registry()
register_agent_factory = registry.register_agent_factory
get_agent_factory = registry.get_agent_factory
