# Follows tau2-bench a2c0247 src/tau2/runner/build.py (_build_env_kwargs and
# _derive_read_log_allowlist): the environment's keyword arguments for a run's task, which
# runner/batch.py gives both to the live environment and to evaluate_simulation. The retrieval
# variant and the task only when the config names a variant; for banking_knowledge, the names of
# the discoverable tools the task's expected `call_discoverable_agent_tool` actions call (whose
# read calls its database then logs).


def _derive_read_log_allowlist(task):
    allowlist = set()
    criteria = task.evaluation_criteria
    if criteria is None:
        return allowlist
    for action in criteria.actions or []:
        if action.get("name") == "call_discoverable_agent_tool":
            name = (action.get("arguments") or {}).get("agent_tool_name")
            if name:
                allowlist.add(name)
    return allowlist


def _build_env_kwargs(config, task):
    env_kwargs = {}
    retrieval_config = getattr(config, "retrieval_config", None)
    if retrieval_config is not None:
        env_kwargs["retrieval_variant"] = retrieval_config
        env_kwargs["task"] = task
        rk = dict(getattr(config, "retrieval_config_kwargs", None) or {})
        if rk:
            env_kwargs["retrieval_kwargs"] = rk
    if getattr(config, "domain", None) == "banking_knowledge":
        env_kwargs["read_log_allowlist"] = _derive_read_log_allowlist(task)
    return env_kwargs
