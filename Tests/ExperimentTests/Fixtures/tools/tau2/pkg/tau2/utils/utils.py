# Follows tau2-bench v1.0.1 src/tau2/utils/utils.py: DATA_DIR is read from TAU2_DATA_DIR once,
# when tau2 is first imported.
import os
from pathlib import Path

DATA_DIR = Path(os.environ.get("TAU2_DATA_DIR", "data"))
