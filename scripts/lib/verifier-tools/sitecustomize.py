# The verifier's Python (autoharness verifier tools: lib/python3.13, ahead of anything of the
# root's). PYTHONSAFEPATH kept the working directory off this interpreter's sys.path at its
# start (pytest, and uv's tools, run from the image's WORKDIR, where agent.py's modules are);
# the programs a test starts from here on get the environment without it, as under Harbor, so
# a script of the task imports the modules beside it (`python test.py` in /app: `from run
# import ...`).
import os

os.environ.pop("PYTHONSAFEPATH", None)
