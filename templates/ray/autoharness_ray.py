"""autoharness's Ray driver: the supervisor's work requests to a Ray cluster and back.

Run by the supervisor (never in a sandbox), with the cluster's token in its environment
(RAY_AUTH_MODE=token and RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH). It moves bytes and places
requests; every decision (which node may work, whether an answer counts, what is sent again)
is the supervisor's. JSON lines:

  stdin   {"address": "HOST:PORT", "num_cpus": 1, "timeout": SECONDS, "max_in_flight": N,
           "check_policies": ["benchmark-task", "verifier"], "check_vm": "<VM settings JSON>" (optional),
           "check_paths": ["<a path the tool needs on the node>", ...] (optional),
           "check_digest": ["<a file of the tool's whose digest the node reports>", ...] (optional),
           "check_databases": "<the databases' check JSON, sent on the check's stdin>" (optional),
           "alone": true (optional: each request only on an idle node)}
  stdout  {"nodes": [{"node": ID, "address": IP, "report": "<worker --check JSON>"} or
                     {"node": ID, "address": IP, "error": "why"}, ...]}
          or {"fatal": "why"} (then it exits 1)
          (optional, when the supervisor names task images: "check_images": ["<archive sha256>", ...];
           with verifier tools: "check_verifier_tools": "<directory>")
  stdin   {"push": [{"path": "<encrypted archive>", "to": [{"node": ID, "offer": "<base64 signed offer>"}, ...]}, ...]}
                                             (optional) task images some nodes lack: each archive is put in
                                             Ray's object store once and taken by each node named
                                             (`worker --receive-image`), which is then checked again
  stdout  {"nodes": [...]}                   as above, after a push; a node whose push failed has
                                             "push_error": "why"
  stdin   {"use": [ID, ...]}                 the nodes the supervisor accepts
  stdout  {"ready": true, "nodes": N}
  stdin   {"id": N, "request": "<base64 signed work request>", "avoid": [ID, ...], "node": ID}
                                             ("node", optional: the only node it may run on;
                                             a held-out request is sealed to that node)
          {"exclude": ID}                    no request goes to that node any more
          {"settled": N}                     result N judged: its node may take another request
          {"end": true}                      once every answer the supervisor needs is in
  stdout  {"id": N, "node": ID, "exit": CODE, "answer": "<base64>", "oversized": BOOL, "stderr": "..."}
          or {"id": N, "node": ID, "error": "why"} (the node died, Ray lost the task, no node is left;
                                             "node_died": true when Ray has the node dead)

Every request is placed by this driver on one accepted node (the least loaded, then the one
given fewest requests so far; never one the request must avoid or one excluded; for a
held-out request, the node the supervisor sealed it to, once that node is idle), pinned there (a hard node
affinity), at most max_in_flight at a time: so the node named in a result is where the
request ran, whatever that node says of itself. The task runs the node's own `autoharness worker`
(AUTOHARNESS_WORKER_BIN, default `autoharness` on PATH) with the supervisor's public key the
node's operator installed (AUTOHARNESS_SUPERVISOR_KEY, a file) and its state directory
(AUTOHARNESS_WORKER_STATE, optional), the signed request on its stdin. Before any request,
each node with a CPU for one runs `autoharness worker --check`, whose report the supervisor
judges.

Before connecting, the cluster must refuse a client with a wrong token, in Ray's own words
(InvalidAuthToken): a cluster without token authentication lets anyone who reaches it run
code on every node, so it is refused, and one that cannot be checked is not used.

Known limit: Ray returns each task's result to this process by unpickling it, so a node
compromised as root could run code here; this driver runs outside autoharness's sandboxes
(docs/past-one-machine.md).
"""
import json
import os
import queue
import secrets
import subprocess
import sys
import threading
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


def typed(result, n, node):
    """What a node's task returned, as the supervisor reads it: these fields with these types
    only (a node's dict is the node's to fill); anything else is an empty answer."""
    ok = (isinstance(result, dict) and isinstance(result.get("exit"), int) and isinstance(result.get("answer"), str)
          and isinstance(result.get("stderr", ""), str) and isinstance(result.get("oversized", False), bool))
    if not ok:
        return {"id": n, "node": node, "exit": 0, "answer": "", "oversized": False, "stderr": ""}
    return {"id": n, "node": node, "exit": result["exit"], "answer": result["answer"],
            "oversized": result.get("oversized", False), "stderr": result.get("stderr", "")[-4000:]}


def result_line(get, n, node, sealed, task_error, node_gone=lambda: False):
    """The line for request n's result, which `get` fetches (raising as ray.get does). A task
    that raised on the node (`task_error`) is the node's doing: an empty answer, which the
    supervisor judges bad, never taken for a lost node. Any other exception is a loss; it is
    the node's death (`node_died`, which lets the supervisor run a held-out request once more
    elsewhere) only when Ray says so (NodeDiedError) and `node_gone()` confirms the node is no
    longer alive. A worker killed for memory (OutOfMemoryError) or crashed is a loss without
    it: agent.py could bring those about. A held-out run's stderr (sealed) stays on the node:
    it could name test tasks."""
    try:
        result = get()
    except task_error:
        result = None
    except Exception as e:  # noqa: BLE001 - a lost node or task is an answer too
        line = {"id": n, "node": node, "error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")}
        if type(e).__name__ == "NodeDiedError" and node_gone():
            line["node_died"] = True
        return line
    answer = typed(result, n, node)
    if sealed:
        answer["stderr"] = ""
    return answer


def worker_argv(o, extra):
    argv = [o.environ.get("AUTOHARNESS_WORKER_BIN", "autoharness"), "worker"] + extra
    if o.environ.get("AUTOHARNESS_WORKER_STATE"):
        argv += ["--state", o.environ["AUTOHARNESS_WORKER_STATE"]]
    return argv


def check_argv(o, first, policies, vm, paths, digest, images):
    """`autoharness worker --check`'s argv on a node, and its stdin: the databases' check,
    which holds a login (a password, maybe), goes there, never into an argv the node's other
    users can read in /proc."""
    databases = first.get("check_databases")
    argv = worker_argv(o, ["--check"] + [a for p in policies for a in ("--check-policy", p)] + (["--check-vm", vm] if vm else [])
                       + [a for p in paths for a in ("--check-path", p)] + [a for p in digest for a in ("--check-digest", p)]
                       + [a for p in images for a in ("--check-image", p)]
                       + (["--check-verifier-tools", first["check_verifier_tools"]] if first.get("check_verifier_tools") else [])
                       + (["--check-databases"] if databases else []))
    return argv, databases.encode() if databases else b""


def check_seconds(first):
    """How long a node's check may take, its report's way back included: 3 minutes, and 5 more
    per template database it fingerprints (each a full read, after up to 2 minutes' wait for
    the node's lock)."""
    databases = first.get("check_databases")
    return 180 + (120 + 300 * len(json.loads(databases).get("databases", [])) if databases else 0)


def push_images(pushes, nodes, reports, check, receive_image, pinned):
    """The task images the supervisor offers (each archive, encrypted, put once into Ray's
    object store; each named node takes its offer), then the nodes pushed to checked again:
    the reports as before, theirs replaced, with "push_error" where a push failed."""
    import ray

    failed = {}
    for push in pushes:
        # In pieces of 32 MiB: no object the size of a whole image in any node's store.
        pieces = []
        with open(push["path"], "rb") as f:
            while True:
                piece = f.read(32 << 20)
                if not piece:
                    break
                pieces.append(ray.put(piece))
        limit = float(push.get("timeout", 3600))
        refs = {receive_image.options(scheduling_strategy=pinned(t["node"])).remote(t["offer"], pieces, limit): t["node"] for t in push["to"]}
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=limit + 120)
        for ref, node in refs.items():
            if ref not in done:
                ray.cancel(ref, force=True)
                result = {"error": "no answer in %d s" % (limit + 120)}
            else:
                try:
                    result = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - a node lost while receiving is reported, not used
                    result = {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")}
            if not isinstance(result, dict):
                result = {"error": "the node's receive returned no answer"}
            if result.get("error"):
                # A held-out batch's reasons stay on the node: tar's words could name the image's files.
                failed.setdefault(node, "it could not take the image (held-out batch: its reason stays on the node)" if push.get("quiet")
                                  else str(result["error"])[-600:])
        del pieces
    pushed = {t["node"] for push in pushes for t in push["to"]}
    again = {r["node"]: r for r in check([n for n in nodes if n["NodeID"] in pushed])}
    out = []
    for r in reports:
        entry = again.get(r["node"], r)
        if r["node"] in failed:
            entry["push_error"] = failed[r["node"]]
        out.append(entry)
    return out


def placement(waiting, usable, excluded, live, load, given, node_gone, alone=False):
    """The next waiting request that can be settled now, in order: (k, line, None) when request
    k can run nowhere (`line` says why), (k, None, node) when it goes to `node`, None when every
    waiting request must wait. A request runs on an accepted node it need not avoid, not
    excluded and alive, and only on its bound node when it has one (a held-out request is
    sealed to that node); the least loaded, then the one given fewest so far, so that idle
    nodes take turns. A held-out request waits until its node is idle: sent earlier, it would
    only queue on the node's exclusive lock while its time ran; others go past it. A bound
    request whose node is gone is that node's loss ("node_died" when Ray has the node dead:
    the supervisor may seal it to another); an unbound one with no node left has none. With
    `alone` (a batch whose runs take the node's lock exclusively: bird-interact's share the
    node's PostgreSQL), every request waits for an idle node, for the same reason."""
    for k, (n, _, avoid, bound) in enumerate(waiting):
        able = [x for x in usable if x not in excluded and x not in avoid and x in live and (bound is None or x == bound)]
        if not able:
            line = {"id": n, "node": bound or "", "error": "no accepted node is left to run it (excluded, avoided or dead)" if bound is None
                    else "the node it is sealed to is no longer accepted or alive"}
            if bound is not None and node_gone(bound):
                line["node_died"] = True
            return k, line, None
        free = [x for x in able if (bound is None and not alone) or load[x] == 0]
        if free:
            return k, None, min(free, key=lambda x: (load[x], given[x]))
    return None


def main():
    first = json.loads(sys.stdin.readline())
    address = first["address"]
    why = token_configured()
    if why:
        emit({"fatal": "refused: the cluster's token is not configured for the driver (%s)" % why})
        return 1
    timeout = float(first.get("timeout", 3600))
    num_cpus = float(first.get("num_cpus", 1))
    max_in_flight = max(1, int(first.get("max_in_flight", 1)))
    verdict = probe_wrong_token(address, 60)
    if verdict == "accepted":
        emit({"fatal": "refused: the Ray cluster at %s accepted a client with a wrong token: it runs without token "
                       "authentication (start it with RAY_AUTH_MODE=token)" % address})
        return 1
    if verdict != "refused":
        emit({"fatal": "could not connect to the Ray cluster at %s to check that it refuses a wrong token" % address})
        return 1

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except Exception as e:  # noqa: BLE001 - every failure to connect is reported the same way
        emit({"fatal": "could not connect to the Ray cluster at %s: %s" % (address, str(e).splitlines()[-1] if str(e) else type(e).__name__)})
        return 1

    @ray.remote(num_cpus=num_cpus, max_retries=0)
    def check_node(policies, vm, paths, digest, images):
        import os as o
        import subprocess as sp

        argv, stdin = check_argv(o, first, policies, vm, paths, digest, images)
        # In a session of its own, ended whole on a timeout: the databases' check runs psql and
        # pg_dump, which would otherwise stay connected to the templates.
        try:
            p = sp.Popen(argv, stdin=sp.PIPE, stdout=sp.PIPE, stderr=sp.PIPE, start_new_session=True)
        except OSError as e:
            return {"error": str(e)}
        limit = check_seconds(first) - 60
        try:
            out, err = p.communicate(stdin, timeout=limit)
        except sp.TimeoutExpired:
            o.killpg(p.pid, 9)
            p.communicate()
            return {"error": "`autoharness worker --check` gave no report in %d s" % limit}
        if p.returncode != 0 or len(out) > 65536:
            return {"error": "`autoharness worker --check` exited %d: %s" % (p.returncode, err[-600:].decode("utf-8", "replace"))}
        return {"report": out.decode("utf-8", "replace")}

    @ray.remote(num_cpus=num_cpus, max_retries=0)
    def run_on_node(request_b64, sealed):
        import base64 as b64
        import os as o
        import subprocess as sp

        key = o.environ.get("AUTOHARNESS_SUPERVISOR_KEY")
        if not key:
            return {"exit": 2, "answer": "", "stderr": "AUTOHARNESS_SUPERVISOR_KEY is not set on this node"}
        try:
            p = sp.run(worker_argv(o, ["--supervisor-key", key]), input=b64.b64decode(request_b64),
                       capture_output=True, timeout=timeout)
        except (OSError, sp.TimeoutExpired) as e:
            return {"exit": 1, "answer": "", "stderr": str(e)}
        oversized = len(p.stdout) > MAX_ANSWER
        # A held-out run's own output stays on its node: it never crosses Ray in the clear.
        return {"exit": p.returncode, "answer": "" if oversized else b64.b64encode(p.stdout).decode(), "oversized": oversized,
                "stderr": "" if sealed else p.stderr[-4000:].decode("utf-8", "replace")}

    @ray.remote(num_cpus=num_cpus, max_retries=0)
    def receive_image(offer, pieces, limit):
        import os as o
        import subprocess as sp
        import tempfile

        key = o.environ.get("AUTOHARNESS_SUPERVISOR_KEY")
        if not key:
            return {"error": "AUTOHARNESS_SUPERVISOR_KEY is not set on this node"}
        # The pieces one at a time into the worker's stdin (an image is gigabytes; no piece
        # is held longer than its write), its stderr into a file (no pipe to fill meanwhile).
        with tempfile.TemporaryFile() as err:
            try:
                p = sp.Popen(worker_argv(o, ["--supervisor-key", key, "--receive-image", offer]), stdin=sp.PIPE, stdout=sp.DEVNULL, stderr=err)
            except OSError as e:
                return {"error": str(e)}
            try:
                for piece in pieces:
                    p.stdin.write(ray.get(piece))
                p.stdin.close()
            except BrokenPipeError:
                pass  # the worker stopped reading (a refusal, or the image is held): its stderr says which
            except OSError as e:
                p.kill()
                p.wait()
                return {"error": "taking the image: %s" % e}
            try:
                code = p.wait(timeout=limit)
            except sp.TimeoutExpired:
                p.kill()
                p.wait()
                return {"error": "taking the image took over %d s" % limit}
            err.seek(0)
            tail = err.read()[-600:].decode("utf-8", "replace")
        if code != 0:
            return {"error": "`autoharness worker --receive-image` exited %d: %s" % (code, tail)}
        return {}

    def pinned(node):
        return NodeAffinitySchedulingStrategy(node_id=node, soft=False)

    # Every live node with a CPU for a request checks itself first; the supervisor judges.
    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= num_cpus]
    if not nodes:
        cpus = ray.cluster_resources().get("CPU", 0)
        emit({"fatal": "the Ray cluster at %s has %s CPU(s) in all and no node with %s: no node can run a request (start worker nodes)" % (address, cpus, num_cpus)})
        return 1
    def check(among):
        checks = {check_node.options(scheduling_strategy=pinned(n["NodeID"])).remote(first.get("check_policies", []), first.get("check_vm"), first.get("check_paths", []),
                                                                                          first.get("check_digest", []), first.get("check_images", [])): n for n in among}
        wait = check_seconds(first)
        done, _ = ray.wait(list(checks), num_returns=len(checks), timeout=wait)
        found = []
        for ref, n in checks.items():
            entry = {"node": n["NodeID"], "address": n.get("NodeManagerAddress", "?")}
            if ref in done:
                try:
                    entry.update(ray.get(ref))
                except Exception as e:  # noqa: BLE001 - a node lost while checking is reported, not used
                    entry["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            else:
                entry["error"] = "no answer to the check in %d s" % wait
                ray.cancel(ref, force=True)
            found.append(entry)
        return found

    reports = check(nodes)
    emit({"nodes": reports})

    inbox = queue.Queue()

    def read_stdin():
        for line in sys.stdin:
            inbox.put(json.loads(line))
        inbox.put({"end": True})

    threading.Thread(target=read_stdin, daemon=True).start()
    use = inbox.get()
    if "push" in use:
        reports = push_images(use["push"], nodes, reports, check, receive_image, pinned)
        emit({"nodes": reports})
        use = inbox.get()
    usable = [n for n in use.get("use", []) if any(r["node"] == n for r in reports)]
    emit({"ready": True, "nodes": len(usable)})
    load = {n: 0 for n in usable}
    given = {n: 0 for n in usable}
    excluded = set()
    waiting = []      # (id, request, avoid)
    in_flight = {}    # ref -> (id, node, sealed to it)
    unsettled = {}    # id -> node, answered but not yet judged by the supervisor
    ended = False

    def take(msg):
        nonlocal ended
        if msg.get("end"):
            ended = True
        elif "exclude" in msg:
            excluded.add(msg["exclude"])
        elif "settled" in msg:
            # A node's slot is free once the supervisor has judged its last answer (and
            # excluded the node if it answered badly): never before.
            node = unsettled.pop(msg["settled"], None)
            if node in load:
                load[node] -= 1
        elif "id" in msg:
            waiting.append((msg["id"], msg["request"], set(msg.get("avoid", [])), msg.get("node")))

    def alive():
        return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}

    def node_gone(node):
        """Whether Ray's control store has `node` dead (asked for up to 60 s: its death is
        noticed by health checks, seconds after a request's loss is reported)."""
        for _ in range(60):
            if node not in alive():
                return True
            time.sleep(1)
        return False

    live = alive()
    while not ended or waiting or in_flight:
        while True:
            try:
                take(inbox.get_nowait())
            except queue.Empty:
                break
        while waiting and len(in_flight) + len(unsettled) < max_in_flight:
            step = placement(waiting, usable, excluded, live, load, given, node_gone, first.get("alone", False))
            if step is None:
                break
            k, line, node = step
            n, request, _, bound = waiting.pop(k)
            if line is not None:
                emit(line)
                continue
            load[node] += 1
            given[node] += 1
            in_flight[run_on_node.options(scheduling_strategy=pinned(node)).remote(request, bound is not None)] = (n, node, bound is not None)
        if not in_flight:
            if ended and not waiting:
                break
            try:
                take(inbox.get(timeout=0.5))
            except queue.Empty:
                pass
            continue
        done, _ = ray.wait(list(in_flight), num_returns=1, timeout=0.5)
        for ref in done:
            n, node, sealed = in_flight.pop(ref)
            unsettled[n] = node
            line = result_line(lambda: ray.get(ref), n, node, sealed, ray.exceptions.RayTaskError, lambda: node_gone(node))
            if "error" in line:
                live = alive()
            emit(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
