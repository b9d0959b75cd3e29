import json
import os
import urllib.request


def post(port_var, default, path, obj):
    port = int(os.environ.get(port_var, default))
    req = urllib.request.Request("http://localhost:%d%s" % (port, path), data=json.dumps(obj).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def db(path, obj):
    return post("DB_ENV_PORT", 6002, path, obj)


def user(path, obj):
    return post("USER_SIM_PORT", 6001, path, obj)


def system(path, obj):
    return post("SYSTEM_AGENT_PORT", 6000, path, obj)
