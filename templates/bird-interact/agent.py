"""HarnessAgent for BIRD-Interact: the system agent service (autoharness).

Contract. This module must expose `app`, an ASGI application serving the system agent's
endpoints (POST /init_session, POST /run_session, GET /health), as the BIRD-Interact-ADK's
system_agent.server does. autoharness runs it with uvicorn (cwd: the ADK's code, with
orchestrator/, shared/ and system_agent/) inside the benchmark-runner sandbox; the DB
environment and the user simulator are reached at http://localhost:$DB_ENV_PORT and
:$USER_SIM_PORT as usual, but run in another sandbox, with the gold data this one never has.

The baseline is the ADK's stock system agent. Improve it by replacing `app` with your own
service (or by changing the stock agent's prompts and tools here).
"""
from system_agent.server import app  # noqa: F401
