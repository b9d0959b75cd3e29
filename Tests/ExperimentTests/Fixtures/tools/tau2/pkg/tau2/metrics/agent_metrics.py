# Follows tau2-bench v1.0.1 src/tau2/metrics/agent_metrics.py: compute_metrics builds a frame
# with every task's metrics (Results._task_metrics) and the simulations' rewards.
from tau2.data_model.simulation import Results


def compute_metrics(results):
    rows = [Results._task_metrics(task) for task in results.tasks]
    rewards = [s["reward_info"]["reward"] for s in results.simulations if s.get("reward_info")]
    return {"avg_reward": sum(rewards) / len(rewards) if rewards else 0.0, "tasks": rows}
