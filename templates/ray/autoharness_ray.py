"""autoharness's Ray driver: the supervisor's work requests to a Ray cluster and back.

Run by the supervisor (never in a sandbox), with the cluster's token in its environment
(RAY_AUTH_MODE=token and RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH). It speaks JSON lines:

  stdin, first line   {"address": "HOST:PORT", "num_cpus": 1, "timeout": SECONDS}
  stdout              {"ready": true, "nodes": N}  or  {"fatal": "why"} (then it exits 1)
  stdin, then         {"id": N, "request": "<base64 signed work request>", "retries": R} ... and {"end": true}
  stdout, then        {"id": N, "node": "<node id>", "exit": CODE, "answer": "<base64>", "stderr": "..."}
                      or {"id": N, "error": "why"} (the node died, Ray lost the task, R more times)

Each request runs as one Ray task on some node: that task runs the node's own
`autoharness worker` (AUTOHARNESS_WORKER_BIN, default `autoharness` on PATH) with the
supervisor's public key the node's operator installed (AUTOHARNESS_SUPERVISOR_KEY, a file)
and its state directory (AUTOHARNESS_WORKER_STATE, optional), the signed request on its stdin. Ray moves bytes; the node's autoharness checks and runs.

Before connecting, the cluster must refuse a client with a wrong token, in Ray's own words
(InvalidAuthToken): a cluster without token authentication lets anyone who reaches it run
code on every node, so it is refused, and one that cannot be checked is not used.

Known limit: Ray returns each task's result to this process by unpickling it, so a node
compromised as root could run code here; this driver runs outside autoharness's sandboxes
(docs/past-one-machine.md).
"""
import base64
import json
import os
import secrets
import subprocess
import sys
import time

MAX_ANSWER = 64 << 20


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def token_configured():
    if os.environ.get("RAY_AUTH_MODE") != "token":
        return "RAY_AUTH_MODE is not 'token'"
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        return "neither RAY_AUTH_TOKEN nor RAY_AUTH_TOKEN_PATH is set"
    return None


def probe_wrong_token(address, timeout):
    """How the cluster treats a client with a random token: "refused" only when Ray itself
    says the token is invalid, "accepted" when the client connects, "unknown" otherwise (an
    unreachable or slow cluster proves nothing, and is not taken as a refusal)."""
    env = dict(os.environ)
    env["RAY_AUTH_MODE"] = "token"
    env["RAY_AUTH_TOKEN"] = secrets.token_hex(16)
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    probe = "import ray; ray.init(address=%r, log_to_driver=False); print('CONNECTED', flush=True)" % address
    p = subprocess.Popen([sys.executable, "-c", probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    verdict = "unknown"
    try:
        for line in p.stdout:
            if "InvalidAuthToken" in line or "Unauthenticated" in line:
                verdict = "refused"
                break
            if line.startswith("CONNECTED"):
                verdict = "accepted"
                break
            if time.monotonic() > deadline:
                break
    finally:
        p.kill()
        p.wait()
    return verdict


def main():
    first = json.loads(sys.stdin.readline())
    address = first["address"]
    why = token_configured()
    if why:
        emit({"fatal": "refused: the cluster's token is not configured for the driver (%s)" % why})
        return 1
    timeout = float(first.get("timeout", 3600))
    verdict = probe_wrong_token(address, 60)
    if verdict == "accepted":
        emit({"fatal": "refused: the Ray cluster at %s accepted a client with a wrong token: it runs without token "
                       "authentication (start it with RAY_AUTH_MODE=token)" % address})
        return 1
    if verdict != "refused":
        emit({"fatal": "could not connect to the Ray cluster at %s to check that it refuses a wrong token" % address})
        return 1

    import ray

    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except Exception as e:  # noqa: BLE001 - every failure to connect is reported the same way
        emit({"fatal": "could not connect to the Ray cluster at %s: %s" % (address, str(e).splitlines()[-1] if str(e) else type(e).__name__)})
        return 1

    @ray.remote(num_cpus=float(first.get("num_cpus", 1)), max_retries=0)
    def run_on_node(request_b64):
        import base64 as b64
        import os as o
        import subprocess as sp

        import ray as r

        node = r.get_runtime_context().get_node_id()
        binary = o.environ.get("AUTOHARNESS_WORKER_BIN", "autoharness")
        key = o.environ.get("AUTOHARNESS_SUPERVISOR_KEY")
        if not key:
            return {"node": node, "exit": 2, "answer": "", "stderr": "AUTOHARNESS_SUPERVISOR_KEY is not set on this node"}
        argv = [binary, "worker", "--supervisor-key", key]
        if o.environ.get("AUTOHARNESS_WORKER_STATE"):
            argv += ["--state", o.environ["AUTOHARNESS_WORKER_STATE"]]
        try:
            p = sp.run(argv, input=b64.b64decode(request_b64),
                       capture_output=True, timeout=timeout)
        except (OSError, sp.TimeoutExpired) as e:
            return {"node": node, "exit": 1, "answer": "", "stderr": str(e)}
        out = p.stdout if len(p.stdout) <= MAX_ANSWER else b""
        return {"node": node, "exit": p.returncode, "answer": b64.b64encode(out).decode(),
                "stderr": p.stderr[-4000:].decode("utf-8", "replace")}

    # A task no node can take would wait forever: a cluster without a CPU for one is refused.
    cpus = ray.cluster_resources().get("CPU", 0)
    if cpus < float(first.get("num_cpus", 1)):
        emit({"fatal": "the Ray cluster at %s has %s CPU(s) in all: no node can run a request (start worker nodes)" % (address, cpus)})
        return 1
    emit({"ready": True, "nodes": len([n for n in ray.nodes() if n.get("Alive")])})
    pending = {}
    ended = False
    while not ended or pending:
        if not ended:
            line = sys.stdin.readline()
            if not line:
                ended = True
                continue
            msg = json.loads(line)
            if msg.get("end"):
                ended = True
                continue
            pending[run_on_node.remote(msg["request"])] = (msg["id"], msg["request"], int(msg.get("retries", 0)))
            continue
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            n, request, retries = pending.pop(ref)
            try:
                result = ray.get(ref)
                result["id"] = n
                emit(result)
            except Exception as e:  # noqa: BLE001 - a lost node or task is an answer too
                why = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
                if retries > 0:
                    # Lost, not answered: the same signed request again, wherever Ray puts it
                    # (a node that had claimed its nonce refuses it as a replay).
                    sys.stderr.write("request %s lost (%s); sent again\n" % (n, why))
                    pending[run_on_node.remote(request)] = (n, request, retries - 1)
                    continue
                emit({"id": n, "error": why})
    return 0


if __name__ == "__main__":
    sys.exit(main())
