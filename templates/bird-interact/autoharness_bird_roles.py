"""autoharness: the DB environment's SQL runs as an unprivileged role per task database.

    python autoharness_bird_roles.py --roles-file F -- MODULE:APP --host H --port P ...

Started by autoharness_bird_services.py in the graders' sandbox in place of
`python -m uvicorn MODULE:APP ...` for the DB environment, when PostgreSQL is configured.
Upstream's DB environment runs every statement (agent.py's submissions and /execute, the gold
SQL, the task's test cases) through psycopg2 connection pools, one per database, as the
configured user (PG_USER, `root` in upstream's container: a superuser). Here psycopg2's
`connect` is wrapped before the application is imported:
  - a connection to a database made after this process started (a task's copy of its
    template, `<db>__<task>`, made by createdb as upstream does) is made as a role of that
    database's own: LOGIN with a random password, nothing else (no superuser, CREATEDB,
    CREATEROLE, REPLICATION, BYPASSRLS, no membership, so no pg_read_server_files,
    pg_write_server_files or pg_execute_server_program). Before each such connection the role is given
    CONNECT, CREATE and TEMPORARY on the database (not its ownership) and made the owner of
    every object in it outside the system schemas and extensions (createdb made them the
    configured user's), so the task's own DDL works; its settings in every database, and its
    password, are set again;
  - a connection to any database that existed before (the maintenance database, templates,
    other data) is refused: upstream's DB environment never opens one, and SQL run there would
    run as the configured user.
The roles made are appended to F (one name per line) as they are made; the services script
drops them (rolling back what they left prepared), when the run ends, before it compares the cluster's
shared state with the one before the run. Copies, drops and the admin work itself still run as
the configured user (psql, createdb, dropdb, and this file's own connections), on the
maintenance database or with a search_path of pg_catalog only: nothing agent.py's SQL created
is looked up by name there.
"""
import argparse
import os
import runpy
import secrets
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import psycopg2
    from psycopg2 import sql
except ImportError as e:
    # Without psycopg2 nothing here can hand the task's SQL to a role of its own; the DB
    # environment must not start with the configured user's rights instead.
    print("autoharness: the BIRD graders' Python has no psycopg2 (%s): install the ADK's requirements "
          "(pip install -r BIRD-Interact-ADK/requirements.txt, or Debian's python3-psycopg2)" % e, file=sys.stderr)
    sys.exit(2)

# Where the names of the roles made are appended (set by main(), or by the services script
# when it imports this file for its re-grading).
ROLES_FILE = None

real_connect = psycopg2.connect
ADMIN = {"host": os.environ.get("PG_HOST", "127.0.0.1"), "port": int(os.environ.get("PG_PORT", "5432")),
         "user": os.environ.get("PG_USER", "root"), "password": os.environ.get("PG_PASSWORD", "123123")}
lock = threading.Lock()
roles = {}  # database -> (role, password)


def admin(dbname, search_path_catalog_only=False):
    # Bounded waits: a task's SQL can hold a lock on its own role's row or its database's
    # objects (an open transaction, a prepared one); the admin work then fails that task's
    # connection instead of stalling every task's behind the lock.
    kw = dict(ADMIN, dbname=dbname)
    options = "-c lock_timeout=10s -c statement_timeout=60s"
    if search_path_catalog_only:
        options += " -c search_path=pg_catalog,pg_temp"
    kw["options"] = options
    c = real_connect(**kw)
    c.autocommit = True
    return c


def databases():
    c = admin("postgres")
    try:
        with c.cursor() as cur:
            cur.execute("SELECT datname FROM pg_catalog.pg_database")
            return {r[0] for r in cur.fetchall()}
    finally:
        c.close()


BEFORE = databases()

# Objects of the task's database to hand to its role: relations (tables, views, materialized
# views, sequences not owned by a column, foreign tables; indexes and owned sequences follow
# their table), routines, types that are not a table's row type or an array, and schemas;
# never a system schema's, never an extension's member.
OBJECTS = """
SELECT 'TABLE', n.nspname, c.relname, NULL FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relowner <> %(role)s::regrole %(user_ns)s
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
UNION ALL
SELECT 'SEQUENCE', n.nspname, c.relname, NULL FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'S' AND c.relowner <> %(role)s::regrole %(user_ns)s
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i', 'e'))
UNION ALL
SELECT 'ROUTINE', NULL, NULL, p.oid::pg_catalog.regprocedure::pg_catalog.text FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
 WHERE p.proowner <> %(role)s::regrole %(user_ns)s
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
UNION ALL
SELECT 'TYPE', n.nspname, t.typname, NULL FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
 WHERE t.typowner <> %(role)s::regrole %(user_ns)s AND t.typtype IN ('e', 'd', 'r', 'c', 'm') AND t.typelem = 0
   AND (t.typrelid = 0 OR (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid) = 'c')
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_type'::regclass AND d.objid = t.oid AND d.deptype IN ('e', 'i'))
UNION ALL
SELECT 'SCHEMA', NULL, n.nspname, NULL FROM pg_catalog.pg_namespace n
 WHERE n.nspowner <> %(role)s::regrole %(user_ns)s
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_namespace'::regclass AND d.objid = n.oid AND d.deptype = 'e')
"""
USER_NS = "AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%%'"


def hand_over(dbname, role):
    """Gives `role` what it needs in `dbname` and the ownership of what is in it (see OBJECTS)."""
    # Not the database's owner: an owner may mark it a template (then nothing drops it, and the
    # role and database outlive the run), set per-database settings, or lock everyone out.
    # CREATE and TEMPORARY are what its own DDL needs; the schemas are handed over below.
    c = admin("postgres")
    try:
        with c.cursor() as cur:
            cur.execute(sql.SQL("GRANT CONNECT, CREATE, TEMPORARY ON DATABASE {} TO {}").format(sql.Identifier(dbname), sql.Identifier(role)))
    finally:
        c.close()
    c = admin(dbname, search_path_catalog_only=True)
    try:
        with c.cursor() as cur:
            cur.execute(OBJECTS.replace("%(user_ns)s", USER_NS), {"role": role})
            for kind, schema, name, routine in cur.fetchall():
                if routine is not None:
                    # regprocedure's text: the routine's name and argument types, quoted and
                    # schema-qualified by PostgreSQL itself (the search path is pg_catalog).
                    target = sql.SQL(routine)
                elif schema is None:
                    target = sql.Identifier(name)
                else:
                    target = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))
                cur.execute(sql.SQL("ALTER " + kind + " {} OWNER TO {}").format(target, sql.Identifier(role)))
    finally:
        c.close()


def role_for(dbname):
    with lock:
        if dbname not in roles:
            role, password = "ah_task_" + secrets.token_hex(6), secrets.token_urlsafe(24)
            c = admin("postgres")
            try:
                with c.cursor() as cur:
                    cur.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION "
                                        "NOBYPASSRLS").format(sql.Identifier(role), sql.Literal(password)))
            finally:
                c.close()
            with open(ROLES_FILE, "a", encoding="utf-8") as f:
                f.write(role + "\n")
            roles[dbname] = (role, password)
        role, password = roles[dbname]
        # Every new connection: a copy made again from its template (each submission's reset)
        # is the configured user's again; and what the role may change about itself outlives
        # a copy: its own settings (ALTER ROLE CURRENT_USER SET search_path ..., applied to
        # every later session, the gold SQL's too) and its password.
        c = admin("postgres")
        try:
            with c.cursor() as cur:
                # Every database's (ALTER ROLE CURRENT_USER IN DATABASE postgres SET ...: a
                # row in a shared catalog any role reads, which SQL run during the gold's
                # session could fill with the gold's text), then the role-wide ones.
                cur.execute("SELECT d.datname FROM pg_catalog.pg_db_role_setting s JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase "
                            "WHERE s.setrole = %s::pg_catalog.regrole", (role,))
                for (other,) in cur.fetchall():
                    cur.execute(sql.SQL("ALTER ROLE {} IN DATABASE {} RESET ALL").format(sql.Identifier(role), sql.Identifier(other)))
                cur.execute(sql.SQL("ALTER ROLE {} RESET ALL").format(sql.Identifier(role)))
                cur.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))
        finally:
            c.close()
        hand_over(dbname, role)
        return role, password


def connect(dsn=None, connection_factory=None, cursor_factory=None, **kwargs):
    params = psycopg2.extensions.parse_dsn(dsn) if dsn else {}
    params.update(kwargs)
    dbname = params.get("dbname") or params.get("database") or params.get("user") or ADMIN["user"]
    if dbname in BEFORE:
        raise psycopg2.OperationalError("autoharness: the DB environment may connect only to the databases it copies for tasks in this run, "
                                        "not to %r (it existed before the run; SQL there would run as %s)" % (dbname, ADMIN["user"]))
    role, password = role_for(dbname)
    params.pop("database", None)
    params.update(dbname=dbname, user=role, password=password)
    return real_connect(connection_factory=connection_factory, cursor_factory=cursor_factory, **params)


def main():
    global ROLES_FILE
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    p = argparse.ArgumentParser()
    p.add_argument("--roles-file", required=True)
    p.add_argument("uvicorn_args", nargs=argparse.REMAINDER)
    args = p.parse_args()
    ROLES_FILE = args.roles_file
    uvicorn_args = args.uvicorn_args[1:] if args.uvicorn_args[:1] == ["--"] else args.uvicorn_args
    psycopg2.connect = connect
    sys.argv = ["uvicorn"] + uvicorn_args
    runpy.run_module("uvicorn", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
