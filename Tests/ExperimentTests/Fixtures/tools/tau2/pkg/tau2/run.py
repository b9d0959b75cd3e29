# tau2-bench v1.0.1 src/tau2/run.py re-exports run_domain from tau2.runner.
from tau2.runner.batch import run_domain  # noqa: F401
