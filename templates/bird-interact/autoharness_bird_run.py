"""autoharness: agent/agent.py as BIRD-Interact's system agent, and the orchestrator
(benchmark-runner sandbox).

    python autoharness_bird_run.py --adk ADK --mode M --data TASKS.jsonl --output OUT.json
                                   --concurrency N --sock-dir S --system-port P --user-port Q --db-port R

The DB environment and the user simulator run in another sandbox and are reachable only as
S/db.sock and S/user.sock; this script relays 127.0.0.1:R and :Q to them (the ADK's services
call http://localhost:<port>), serves agent.agent:app (uvicorn) on :P as the system agent,
and runs the ADK's orchestrator (orchestrator.runner, through autoharness_bird_orchestrate.py)
on TASKS.jsonl, a redacted task list (no gold SQL, test cases, clear query, ambiguity
resolutions or follow-up: the follow-up comes from the graders once phase 1 has passed). Whatever the orchestrator writes to OUT is
a trace, never a score: the score is the DB environment's own record, kept in the other sandbox.
"""
import argparse
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

p = argparse.ArgumentParser()
p.add_argument("--adk", required=True)
p.add_argument("--mode", default="a-interact")
p.add_argument("--data", required=True)
p.add_argument("--output", required=True)
p.add_argument("--concurrency", type=int, default=3)
p.add_argument("--sock-dir", required=True)
p.add_argument("--system-port", type=int, default=6100)
p.add_argument("--user-port", type=int, default=6101)
p.add_argument("--db-port", type=int, default=6102)
args = p.parse_args()


def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def relay(port, path):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)

    def serve():
        while True:
            client, _ = listener.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(path)
            except OSError:
                client.close()
                continue
            threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()


relay(args.db_port, os.path.join(args.sock_dir, "db.sock"))
relay(args.user_port, os.path.join(args.sock_dir, "user.sock"))

env = dict(os.environ)
env["PYTHONPATH"] = "/work" + os.pathsep + args.adk + os.pathsep + env.get("PYTHONPATH", "")
agent = subprocess.Popen([sys.executable, "-m", "uvicorn", "agent.agent:app", "--host", "127.0.0.1", "--port", str(args.system_port),
                          "--log-level", "warning"], cwd=args.adk, env=env)
deadline = time.time() + 60
while True:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % args.system_port, timeout=2) as r:
            if 200 <= r.status < 300:
                break
    except OSError:
        pass
    if time.time() > deadline or agent.poll() is not None:
        print("autoharness: the system agent (agent.agent:app) did not start", file=sys.stderr)
        agent.kill()
        sys.exit(3)
    time.sleep(0.3)

# The orchestrator, with each task's follow-up asked of the graders once phase 1 has passed
# (autoharness_bird_orchestrate.py): the task list here has none.
code = subprocess.call([sys.executable, os.path.join(HERE, "autoharness_bird_orchestrate.py"), "--db-port", str(args.db_port), "--",
                        "--mode", args.mode, "--data", args.data, "--output", args.output, "--concurrency", str(args.concurrency)],
                       cwd=args.adk, env=env)
agent.terminate()
try:
    agent.wait(timeout=10)
except subprocess.TimeoutExpired:
    agent.kill()
sys.exit(code)
