"""autoharness: BIRD-Interact's graders outside the agent's sandbox (benchmark-scorer sandbox).

    python autoharness_bird_services.py --adk ADK --data GOLD.jsonl --task-ids-file IDS --sock-dir S --record R
                                        --db-port P --user-port Q --mode a-interact|c-interact

Starts the ADK's DB environment and user simulator (uvicorn, loopback of this sandbox) and
serves each on a Unix socket in S (db.sock, user.sock; S/ready once both answer /health),
which is the only way the agent's sandbox reaches them. Two things happen on the way:
  - every /init_task body's task record (`task_data`) is replaced by the gold record read
    here from GOLD.jsonl, by instance_id, with the run's --mode as `_interact_mode`: nothing
    the orchestrator (or agent.py) posts is what grades; only the ids in IDS are served at all;
  - every /submit verdict of the DB environment is appended to R as one JSON line
    {task_id, phase, passed, reward, message, ts}. R is in this sandbox's own directory:
    nothing in the agent's sandbox can write it. The supervisor scores from R.
The follow-up (phase 2) is revealed only once phase 1 passes, as upstream's DB environment
does (BIRD-Interact-ADK/db_environment/server.py, _submit_sql_sync, at 451fe2c3518ee1cf908d8139e2913483bd519381:
a passed phase-1 /submit answers has_follow_up and follow_up_query). The redacted task list
has no follow-up at all, so the orchestrator's c-interact pipeline, which reads the follow-up
from its task record after phase 1 (orchestrator/cinteract.py, same commit), asks here:
POST /autoharness/follow_up {task_id} on db.sock answers {revealed, query} from the verdicts
this script has relayed, and nothing before a passed phase 1. For the same reason the user
simulator's /phase_transition (which switches its reference SQL to the follow-up's) is
refused until then. The DB environment's /init_task is served once per task and run: a second
one (it resets the task's submission counters, and with them the first-try reward) is refused.
With PostgreSQL (PG_HOST a socket directory), the cluster's shared state is read before the
services start and after they stop: roles and their memberships, settings written to its
configuration files (ALTER SYSTEM), per-database and per-role settings, tablespaces. SQL that
agent.py submits runs in the DB environment, and state it left there would outlive the task:
a later task (a train one after a held-out one) could read it. Any difference is appended to R
as {"violation": KIND, "count": N} (the kind only: the names are agent.py's choice) and
undone where that is safe (new roles dropped, ALTER SYSTEM settings reset); the supervisor
then voids the run's scores. With PostgreSQL the DB environment starts through
autoharness_bird_roles.py (each task database's SQL as a role of its own), and every submission
the DB environment passes in a query task is graded again (regrade(): the submission and the
gold SQL each on a fresh copy, where upstream runs the gold on the copy the submission just
changed); a pass that does not hold there is recorded failed, with "regrade", and ends that
task's grading in the run. Runs until SIGTERM.
"""
import argparse
import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

p = argparse.ArgumentParser()
p.add_argument("--adk", required=True)
p.add_argument("--data", required=True)
p.add_argument("--task-ids-file", required=True)
p.add_argument("--sock-dir", required=True)
p.add_argument("--record", required=True)
p.add_argument("--db-port", type=int, default=6102)
p.add_argument("--user-port", type=int, default=6101)
p.add_argument("--mode", choices=["a-interact", "c-interact"], required=True)
args = p.parse_args()

# Only this run's tasks: agent.py can reach these services, and in a train run it must not
# be able to initialise, question or grade a held-out task.
with open(args.task_ids_file, encoding="utf-8") as f:
    wanted = {line.strip() for line in f if line.strip()}
gold = {}
with open(args.data, encoding="utf-8") as f:
    for line in f:
        if line.strip():
            t = json.loads(line)
            if str(t["instance_id"]) in wanted:
                gold[str(t["instance_id"])] = t

def pg_configured():
    host, port = os.environ.get("PG_HOST", ""), os.environ.get("PG_PORT", "5432")
    return host.startswith("/") and os.path.exists(os.path.join(host, ".s.PGSQL." + port))


def psql(sql, db="postgres"):
    """Lines psql prints for `sql` on `db` (the maintenance database), as the configured user."""
    env = dict(os.environ)
    env["PGPASSWORD"] = os.environ.get("PG_PASSWORD", "")
    r = subprocess.run(["psql", "-h", os.environ["PG_HOST"], "-p", os.environ.get("PG_PORT", "5432"), "-U", os.environ.get("PG_USER", "root"),
                        "-d", db, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql],
                       env=env, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or "psql exited %d" % r.returncode)
    return [line for line in r.stdout.splitlines() if line]


# What of the cluster outlives a database: each query's rows, compared as sets.
SHARED_STATE = {
    "roles": "SELECT format('%s super=%s createdb=%s createrole=%s login=%s replication=%s bypassrls=%s', rolname, rolsuper, rolcreatedb,"
             " rolcreaterole, rolcanlogin, rolreplication, rolbypassrls) FROM pg_roles",
    "role_memberships": "SELECT format('%s>%s', roleid::regrole, member::regrole) FROM pg_auth_members",
    "configuration_files": "SELECT format('%s:%s=%s', sourcefile, name, setting) FROM pg_file_settings",
    "database_role_settings": "SELECT format('%s/%s:%s', coalesce(d.datname, '*'), coalesce(r.rolname, '*'), array_to_string(s.setconfig, ','))"
                              " FROM pg_db_role_setting s LEFT JOIN pg_database d ON d.oid = s.setdatabase LEFT JOIN pg_roles r ON r.oid = s.setrole",
    "tablespaces": "SELECT spcname FROM pg_tablespace",
}


def shared_state():
    return {k: set(psql(q)) for k, q in SHARED_STATE.items()}


def settle_shared_state(before):
    """Records what changed since `before` in R, and undoes new roles and ALTER SYSTEM settings."""
    try:
        after = shared_state()
    except Exception as e:
        after = None
        changes = {"unreadable": 1}
        print("autoharness: the cluster's shared state could not be read after the run: %s" % e, file=sys.stderr)
    if after is not None:
        changes = {k: len(after[k] ^ before[k]) for k in before if after[k] != before[k]}
        old_roles = {line.split(" ", 1)[0] for line in before["roles"]}
        for line in after["roles"] - before["roles"]:
            name = line.split(" ", 1)[0]
            if name not in old_roles:
                try:
                    psql('DROP ROLE "%s"' % name.replace('"', '""'))
                except Exception as e:
                    print("autoharness: a role the run made could not be dropped: %s" % e, file=sys.stderr)
        auto = [line for line in after["configuration_files"] - before["configuration_files"] if line.split(":", 1)[0].endswith("postgresql.auto.conf")]
        for line in auto:
            name = line.split(":", 1)[1].split("=", 1)[0]
            if name.replace("_", "").replace(".", "").isalnum():
                try:
                    psql("ALTER SYSTEM RESET %s" % name)
                except Exception as e:
                    print("autoharness: an ALTER SYSTEM setting could not be reset: %s" % e, file=sys.stderr)
        if auto:
            psql("SELECT pg_reload_conf()")
    if changes:
        with record_lock, open(args.record, "a", encoding="utf-8") as f:
            for kind, count in sorted(changes.items()):
                f.write(json.dumps({"violation": kind, "count": count}) + "\n")
            f.flush()
            os.fsync(f.fileno())


record_lock = threading.Lock()
state_before = shared_state() if pg_configured() else None

env = dict(os.environ)
env["PYTHONPATH"] = args.adk + os.pathsep + env.get("PYTHONPATH", "")
# With PostgreSQL the DB environment starts through autoharness_bird_roles.py: its SQL runs as
# a role per task database (no superuser), named in ROLES as they are made.
ROLES = os.path.join(os.path.dirname(os.path.abspath(args.record)), "task_roles.txt")
children = []
for module, port in (("db_environment.server", args.db_port), ("user_simulator.server", args.user_port)):
    serve = [module + ":app", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    if module.startswith("db_") and state_before is not None:
        argv = [sys.executable, os.path.join(HERE, "autoharness_bird_roles.py"), "--roles-file", ROLES, "--"] + serve
    else:
        argv = [sys.executable, "-m", "uvicorn"] + serve
    children.append(subprocess.Popen(argv, cwd=args.adk, env=env))


def load_roles_module():
    """autoharness_bird_roles.py as a library (its task roles, for the re-grading), or None
    without PostgreSQL."""
    if state_before is None:
        return None
    import importlib.util
    spec = importlib.util.spec_from_file_location("autoharness_bird_roles", os.path.join(HERE, "autoharness_bird_roles.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.ROLES_FILE = ROLES
    return module


roles_module = load_roles_module()
regrade_lock = threading.Lock()


def regrade(tid, phase, submitted):
    """Upstream's DB environment grades a query task by running the submission and then the
    gold SQL on the same connection and copy of the database (_submit_sql_sync,
    test_case_default), so a submission that changes what the gold reads (deletes rows, sets
    search_path to tables of its own) can make the gold's result equal its own. A submission
    it passed is run again here, the submission and the gold each on a fresh copy of the same
    source, each as a task role of its own, and compared as upstream compares them (the ADK's
    own remove_comments/remove_distinct/remove_round and preprocess_results). None if they
    agree (or the task is not a query task: its test cases read the state the submission
    made, by design); otherwise why not."""
    task = gold[tid]
    gold_task = task if phase == 1 else (task.get("follow_up") or {})
    if (gold_task.get("category") or task.get("category") or "Query") != "Query" and gold_task.get("test_cases"):
        return None
    sols = gold_task.get("sol_sql") or []
    sols = [sols] if isinstance(sols, str) else list(sols)
    base = task["selected_database"]
    task_db = "%s__%s" % (base, tid.replace("-", "_").replace(".", "_"))
    source = base + "_template" if phase == 1 else task_db + "__p1snap"
    if args.adk not in sys.path:
        sys.path.insert(0, args.adk)
    from shared import db_utils as u  # the ADK's own
    clean = lambda sqls: u.remove_round(u.remove_distinct(u.remove_comments(sqls)))
    results = []
    for sqls in (clean([submitted]), clean(sols)):
        name, role = "ah_regrade_" + roles_module.secrets.token_hex(6), None
        psql('CREATE DATABASE "%s" TEMPLATE "%s"' % (name, source.replace('"', '""')))
        try:
            role, password = roles_module.role_for(name)
            c = roles_module.real_connect(dbname=name, user=role, password=password, host=roles_module.ADMIN["host"], port=roles_module.ADMIN["port"])
            try:
                rows = None
                with c.cursor() as cur:
                    cur.execute("SET statement_timeout = '60s'")
                    for q in sqls:
                        if q and q.strip():
                            cur.execute(q)
                            rows = cur.fetchall() if cur.description is not None else None
                c.commit()
            except roles_module.psycopg2.Error as e:
                return "on a fresh copy it fails: %s" % str(e).strip()[:300]
            finally:
                c.close()
            results.append(u.preprocess_results(rows))
        finally:
            psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s'" % name)
            psql('DROP DATABASE IF EXISTS "%s"' % name)
            if role is not None:
                psql('DROP ROLE IF EXISTS "%s"' % role)
                roles_module.roles.pop(name, None)
    pred, want = results
    if not pred or not want:
        return "on fresh copies one side has no rows"
    ordered = (gold_task.get("conditions") or task.get("conditions") or {}).get("order")
    if (pred == want) if ordered else (set(pred) == set(want)):
        return None
    return "on fresh copies its result is not the gold SQL's"


RESET_ROLE_SETTINGS = r"""DO $$ DECLARE r record; BEGIN
FOR r IN SELECT ro.rolname, d.datname FROM pg_catalog.pg_db_role_setting s JOIN pg_catalog.pg_roles ro ON ro.oid = s.setrole
         LEFT JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase WHERE ro.rolname LIKE 'ah\_task\_%' LOOP
  IF r.datname IS NULL THEN EXECUTE pg_catalog.format('ALTER ROLE %I RESET ALL', r.rolname);
  ELSE EXECUTE pg_catalog.format('ALTER ROLE %I IN DATABASE %I RESET ALL', r.rolname, r.datname); END IF;
END LOOP; END $$"""


def reset_role_settings():
    """Every task role's settings, in every database, reset: SQL that ran in the gold's
    session can write its text into one (ALTER ROLE CURRENT_USER IN DATABASE postgres SET
    application_name = ...), a shared catalog any role reads. Done after every request to the
    DB environment, before its answer reaches agent.py, whatever connections it keeps."""
    psql(RESET_ROLE_SETTINGS)


# Tasks whose passed submission failed the re-grading: the DB environment has moved on (phase 2,
# a snapshot), so nothing more of theirs is graded in this run.
overturned = set()


def drop_task_roles():
    """Drops the task roles of the run, and the databases they still own (a task's copy
    that the DB environment did not drop, e.g. after a crash); before the shared state is
    compared, so a role that stays is reported there."""
    try:
        with open(ROLES, encoding="utf-8") as f:
            names = [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return
    for role in names:
        ident = '"%s"' % role.replace('"', '""')
        try:
            if not psql("SELECT 1 FROM pg_roles WHERE rolname = '%s'" % role.replace("'", "''")):
                continue
            # A transaction the role prepared (PREPARE TRANSACTION, where the server allows
            # them) outlives its session and blocks dropping its database and the role.
            for gid, db in (line.split("\x1f", 1) for line in psql("SELECT gid || chr(31) || database FROM pg_prepared_xacts WHERE owner = '%s'" % role.replace("'", "''"))):
                psql("ROLLBACK PREPARED '%s'" % gid.replace("'", "''"), db=db)
            for db in psql("SELECT datname FROM pg_database WHERE datdba = '%s'::regrole" % role.replace("'", "''")):
                psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s'" % db.replace("'", "''"))
                psql('DROP DATABASE IF EXISTS "%s"' % db.replace('"', '""'))
            psql("DROP ROLE IF EXISTS %s" % ident)
        except RuntimeError as e:
            print("autoharness: a task role could not be dropped: %s" % e, file=sys.stderr)


def stop(*_):
    for c in children:
        c.terminate()
    for c in children:
        try:
            c.wait(timeout=10)
        except subprocess.TimeoutExpired:
            c.kill()
    if state_before is not None:
        drop_task_roles()
        settle_shared_state(state_before)
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)

# task id -> the follow-up question, set when the DB environment passes phase 1 of a task
# that has one (never from the gold record directly: only what the DB environment revealed).
revealed = {}
revealed_lock = threading.Lock()
# Tasks the DB environment has been initialised for in this run. Its /init_task resets the
# task's submission counters (db_environment/server.py `init_task`, same commit), so a second
# one would let agent.py turn a failed phase-1 try into a "first try" again (c-interact pays
# 0.7 for a first try, 0.5 after it). The orchestrator initialises each task once.
initialised = set()
# task id -> the lock its requests to the DB environment take (one at a time per task)
task_locks = {}


def read_request(rfile):
    line = rfile.readline(65536)
    if not line:
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    headers = {}
    while True:
        h = rfile.readline(65536)
        if h in (b"\r\n", b"\n", b""):
            break
        k, v = h.decode("latin-1").split(":", 1)
        headers[k.strip().lower()] = v.strip()
    body = rfile.read(int(headers.get("content-length", "0") or 0))
    return method, path, headers, body


def make_handler(port, grades):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            while True:
                req = read_request(self.rfile)
                if req is None:
                    return
                method, path, headers, body = req
                route = path.split("?", 1)[0]
                payload = None
                if method == "POST" and body:
                    try:
                        payload = json.loads(body)
                    except ValueError:
                        payload = None
                if grades and route == "/autoharness/follow_up":
                    tid = str((payload or {}).get("task_id") or "")
                    with revealed_lock:
                        query = revealed.get(tid)
                    self.reply(200, {"revealed": query is not None, "query": query})
                    continue
                if not grades and route == "/phase_transition":
                    tid = str((payload or {}).get("task_id") or "")
                    with revealed_lock:
                        allowed = tid in revealed
                    if not allowed:
                        self.reply(403, {"detail": "phase 1 has not passed"})
                        continue
                # One request per task at a time: a second session of the task's role beside
                # the gold SQL's would see its text in pg_stat_activity.
                task_lock = None
                if grades and isinstance(payload, dict) and str(payload.get("task_id")) in gold:
                    with revealed_lock:
                        task_lock = task_locks.setdefault(str(payload.get("task_id")), threading.Lock())
                    task_lock.acquire()
                try:
                    self.relay(method, path, route, headers, body, payload, port, grades)
                finally:
                    if task_lock is not None:
                        task_lock.release()

        def relay(self, method, path, route, headers, body, payload, port, grades):
            if grades and route == "/submit":
                tid = str((payload or {}).get("task_id") or "")
                with revealed_lock:
                    ended = tid in overturned
                if ended:
                    self.reply(409, {"detail": "this task's grading ended: a passed submission failed autoharness's re-grading"})
                    return
            if route == "/init_task" and isinstance(payload, dict):
                posted = payload.get("task_data")
                tid = str((posted or {}).get("instance_id") or payload.get("task_id") or "")
                if tid not in gold:
                    self.reply(404, {"detail": "unknown task"})
                    return
                if grades:
                    with revealed_lock:
                        again = tid in initialised
                        initialised.add(tid)
                    if again:
                        self.reply(409, {"detail": "task already initialised in this run"})
                        return
                # Nothing posted is kept: the DB environment's `_` keys are its own state and
                # rules (`_interact_mode` decides first-try vs debug rewards), and agent.py can
                # post here before the orchestrator does. The mode is the run's.
                merged = dict(gold[tid])
                merged["_interact_mode"] = args.mode
                payload["task_data"] = merged
                body = json.dumps(payload).encode()
            req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body if method != "GET" else None,
                                         method=method, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=600) as r:
                    status, data = r.status, r.read()
            except urllib.error.HTTPError as e:
                status, data = e.code, e.read()
            if grades and roles_module is not None:
                try:
                    reset_role_settings()
                except RuntimeError as e:
                    print("autoharness: the task roles' settings could not be reset: %s" % e, file=sys.stderr)
                    status, data = 503, json.dumps({"detail": "autoharness: the graders could not reset the task roles' settings"}).encode()
            if grades and route == "/submit" and isinstance(payload, dict) and status == 200:
                try:
                    v = json.loads(data)
                    entry = {"task_id": str(payload.get("task_id")), "phase": v.get("phase_completed"), "passed": bool(v.get("passed")),
                             "reward": float(v.get("reward") or 0.0), "message": str(v.get("message", ""))[:500], "ts": time.time()}
                except (ValueError, TypeError, AttributeError) as e:
                    entry = {"task_id": str(payload.get("task_id")), "passed": False, "reward": 0.0, "message": "unreadable verdict: %s" % e}
                if entry.get("passed") and roles_module is not None and entry["task_id"] in gold:
                    try:
                        with regrade_lock:
                            why = regrade(entry["task_id"], entry.get("phase") or 1, str(payload.get("sql") or ""))
                    except Exception as e:  # noqa: BLE001 -- a re-grading that cannot run does not pass
                        why = "the re-grading could not run: %s" % e
                    if why is not None:
                        entry.update(passed=False, reward=0.0, regrade=why[:500])
                        with revealed_lock:
                            overturned.add(entry["task_id"])
                        data = json.dumps({"passed": False, "message": "SQL failed Phase %s. Your SQL is not correct." % (entry.get("phase") or 1),
                                           "reward": 0.0, "phase_completed": None, "has_follow_up": False, "follow_up_query": None}).encode()
                        v = {}
                if entry.get("passed") and entry.get("phase") == 1 and v.get("has_follow_up"):
                    with revealed_lock:
                        revealed[entry["task_id"]] = str(v.get("follow_up_query") or "")
                with record_lock, open(args.record, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
            self.wfile.write(b"HTTP/1.1 %d OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (status, len(data)) + data)

        def reply(self, status, obj):
            data = json.dumps(obj).encode()
            self.wfile.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (status, len(data)) + data)
    return Handler


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def healthy(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as r:
            return 200 <= r.status < 300
    except OSError:
        return False


deadline = time.time() + 90
while not all(healthy(p) for p in (args.db_port, args.user_port)):
    if time.time() > deadline or any(c.poll() is not None for c in children):
        print("autoharness: BIRD services did not start", file=sys.stderr)
        stop()
    time.sleep(0.3)

os.makedirs(args.sock_dir, exist_ok=True)
os.chmod(args.sock_dir, 0o755)
for name, port, grades in (("db.sock", args.db_port, True), ("user.sock", args.user_port, False)):
    path = os.path.join(args.sock_dir, name)
    server = Server(path, make_handler(port, grades))
    os.chmod(path, 0o666)  # the agent's sandbox runs as another uid
    threading.Thread(target=server.serve_forever, daemon=True).start()
open(os.path.join(args.sock_dir, "ready"), "w").close()
print("autoharness: BIRD services ready", flush=True)
while True:
    time.sleep(3600)
