"""Stand-in for BIRD-Interact-ADK/shared/db_utils.py (bird-bench/BIRD-Interact at
451fe2c3518ee1cf908d8139e2913483bd519381), the code paths the DB environment takes:
queries through a psycopg2 ThreadedConnectionPool per database (`_get_or_init_pool`, keyed by
database name, connecting as PG_USER with PG_PASSWORD to PG_HOST:PG_PORT), each with a 60 s
statement timeout and a commit; databases dropped and made again from a template with the
psql, dropdb and createdb programs (`_drop_and_create_db`, after closing that database's
pool); a task's database named <base>__<task id with - and . as _> (`create_task_db`); and
its comparison of a submission with the gold (`test_case_default`, `ex_base`), which runs both
on the same connection, the submission first."""
import datetime
import decimal
import os
import re
import subprocess
import threading

import psycopg2
from psycopg2.pool import ThreadedConnectionPool

_pools = {}
_pools_lock = threading.Lock()


def _settings():
    return {"host": os.environ.get("PG_HOST", "127.0.0.1"), "port": int(os.environ.get("PG_PORT", "5432")),
            "user": os.environ.get("PG_USER", "root"), "password": os.environ.get("PG_PASSWORD", "123123")}


def _get_or_init_pool(db_name):
    with _pools_lock:
        pool = _pools.get(db_name)
        if pool is None:
            pool = _pools[db_name] = ThreadedConnectionPool(1, 5, dbname=db_name, **_settings())
        return pool


def close_pool(db_name):
    with _pools_lock:
        pool = _pools.pop(db_name, None)
    if pool is not None:
        pool.closeall()


def execute_queries(queries, db_name, conn=None):
    """(rows of the last query or None, error text or None, timed out, cursor description)."""
    if isinstance(queries, str):
        queries = [queries]
    pool = _get_or_init_pool(db_name)
    own = conn is None
    if own:
        conn = pool.getconn()
    rows, desc = None, None
    try:
        for q in queries:
            if not q or not q.strip():
                continue
            cur = conn.cursor()
            try:
                cur.execute("SET statement_timeout = '60s';")
                cur.execute(q)
                conn.commit()
                rows = cur.fetchall() if cur.description is not None else None
                desc = cur.description
            except psycopg2.errors.QueryCanceled:
                conn.rollback()
                return None, None, True, None
            except psycopg2.Error as e:
                conn.rollback()
                return None, str(e).strip(), False, None
            finally:
                cur.close()
        return rows, None, False, desc
    finally:
        if own:
            pool.putconn(conn)


def _pg_args():
    s = _settings()
    env = dict(os.environ)
    env["PGPASSWORD"] = s["password"]
    return ["-h", s["host"], "-p", str(s["port"]), "-U", s["user"]], env


def drop_task_db(db_name):
    """Closes the database's pool, ends its other sessions and drops it."""
    args, env = _pg_args()
    close_pool(db_name)
    subprocess.run(["psql", *args, "-d", "postgres", "-X", "-q", "-c",
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s' AND pid <> pg_backend_pid();" % db_name],
                   env=env, check=True, capture_output=True, timeout=60)
    subprocess.run(["dropdb", "--if-exists", *args, db_name], env=env, check=True, capture_output=True, timeout=60)


def _drop_and_create_db(db_name, template_db):
    drop_task_db(db_name)
    args, env = _pg_args()
    subprocess.run(["createdb", *args, db_name, "--template", template_db], env=env, check=True, capture_output=True, timeout=60)


def create_task_db(base_db, task_id, template=None):
    task_db = "%s__%s" % (base_db, task_id.replace("-", "_").replace(".", "_"))
    _drop_and_create_db(task_db, template or base_db + "_template")
    return task_db


def reset_task_db(task_db, template_source):
    _drop_and_create_db(task_db, template_source)



# The comparison upstream's test_case_default makes (ex_base): both sides' SQL without
# comments, DISTINCT and ROUND(...); rows with dates as YYYY-MM-DD and numbers to 2 places;
# an empty side fails; sets unless conditions.order.

def remove_comments(sqls):
    out = []
    for q in sqls:
        q = re.sub(r"/\*.*?\*/", "", q, flags=re.DOTALL)
        q = re.sub(r"--[^\n]*", "", q)
        out.append(q.strip())
    return out


def remove_distinct(sqls):
    return [" ".join(w for w in q.split(" ") if w.lower() != "distinct") for q in sqls]


def remove_round(sqls):
    out = []
    for q in sqls:
        while True:
            m = re.search(r"ROUND\s*\(", q, re.IGNORECASE)
            if not m:
                break
            depth, i, comma = 0, m.end() - 1, None
            while i < len(q):
                if q[i] == "(":
                    depth += 1
                elif q[i] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                elif q[i] == "," and depth == 1 and comma is None:
                    comma = i
                i += 1
            if i >= len(q):
                break
            q = q[:m.start()] + q[m.end():comma if comma is not None else i].strip() + q[i + 1:]
        out.append(q)
    return out


def preprocess_results(rows):
    out = []
    for row in rows or []:
        cells = []
        for v in row:
            if isinstance(v, (datetime.date, datetime.datetime)):
                v = v.strftime("%Y-%m-%d")
            elif isinstance(v, (float, decimal.Decimal)):
                v = round(float(v), 2)
            cells.append(v)
        out.append(tuple(cells))
    return out


def ex_base(pred_sqls, sol_sqls, db_name, conn, conditions=None):
    pred, pred_err, pred_to, _ = execute_queries(pred_sqls, db_name, conn)
    gold, gold_err, gold_to, _ = execute_queries(sol_sqls, db_name, conn)
    if pred_err or pred_to or gold_err or gold_to:
        return 0
    pred, gold = preprocess_results(pred), preprocess_results(gold)
    if not pred or not gold:
        return 0
    if (conditions or {}).get("order"):
        return 1 if pred == gold else 0
    return 1 if set(pred) == set(gold) else 0


def test_case_default(pred_sqls, sol_sqls, db_name, conn, conditions=None):
    clean = lambda sqls: remove_round(remove_distinct(remove_comments(sqls)))
    assert ex_base(clean(pred_sqls), clean(sol_sqls), db_name, conn, conditions) == 1
