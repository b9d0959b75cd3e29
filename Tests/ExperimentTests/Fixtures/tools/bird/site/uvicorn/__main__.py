import http.server
import importlib
import json
import sys

target = sys.argv[1]
opts = dict(zip(sys.argv[2::2], sys.argv[3::2]))
module, name = target.split(":")
sys.path.insert(0, ".")
app = getattr(importlib.import_module(module), name)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def respond(self, method):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            status, obj = app(method, self.path, json.loads(body) if body else None)
        except Exception as e:
            status, obj = 500, {"detail": "%s: %s" % (type(e).__name__, e)}
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.respond("GET")

    def do_POST(self):
        self.respond("POST")

    def log_message(self, *a):
        pass


http.server.ThreadingHTTPServer((opts.get("--host", "127.0.0.1"), int(opts["--port"])), Handler).serve_forever()
