"""The demo's stand-in for a model API (no LLM, no network): an HTTPS server on 127.0.0.2 that
answers OpenAI Chat Completions requests the way templates/demo/demo_triage.py asks them, so
the demo's triage goes through the supervisor's inference gate exactly as a real model's
traffic would (TLS to the gate, the gate's own TLS upstream to this server, which it trusts
through triage.network.upstream_ca).

Its "judgement" is a rule over the failure it is shown (a unit conversion's expected and
produced values): nothing produced means agent.py lacks the pair's factor; a value within 1 %
means the factor is right and the rounding is not; anything else, a wrong factor.

  python3 demo_model.py DIR     makes DIR/ca.pem (a CA of its own, via openssl), serves,
                                writes DIR/port, logs each request to DIR/requests.log
"""
import json
import os
import re
import ssl
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAILURE = re.compile(r"convert (\S+)\b.*expected ([0-9.]+), got (\S+)")


def certificates(d):
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    # P-256 keys: generating two RSA-2048 keys took over 10 s in the cgroup v2 VM (TCG, busy host).
    p = lambda n: os.path.join(d, n)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", "/CN=autoharness demo model CA",
            "-keyout", p("ca.key"), "-out", p("ca.pem"), "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=127.0.0.2", "-keyout", p("server.key"), "-out", p("server.csr"))
    with open(p("san.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.2\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", p("server.csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"), "-CAcreateserial",
            "-days", "2", "-extfile", p("san.cnf"), "-out", p("server.pem"))


def judge(text):
    m = FAILURE.search(text)
    if not m:
        return {"label": "unexplained failure", "severity": "medium", "hypothesis": "the failure does not show a conversion"}
    pair, expected, got = m.group(1), float(m.group(2)), m.group(3)
    try:
        value = float(got)
    except ValueError:
        return {"label": "unknown unit pair", "severity": "high",
                "hypothesis": f"agent.py has no factor for {pair}, so it writes no answer"}
    if expected and abs(value - expected) / expected < 0.01:
        return {"label": "rounding", "severity": "low",
                "hypothesis": f"the factor for {pair} is right but the answer is rounded too coarsely ({got} for {expected})"}
    return {"label": "wrong factor", "severity": "medium", "hypothesis": f"agent.py's factor for {pair} is wrong ({got} for {expected})"}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        question = "".join(m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user")
        verdict = judge(question)
        with open(os.path.join(self.server.directory, "requests.log"), "a") as f:
            f.write(json.dumps({"path": self.path, "label": verdict["label"]}) + "\n")
        call = {"id": "call_0", "type": "function", "function": {"name": "triage", "arguments": json.dumps(verdict)}}
        reply = json.dumps({"id": "chatcmpl-demo", "object": "chat.completion", "created": 0, "model": body.get("model", "demo"),
                            "choices": [{"index": 0, "finish_reason": "tool_calls",
                                         "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
                            "usage": {"prompt_tokens": len(question) // 4, "completion_tokens": 40, "total_tokens": len(question) // 4 + 40}}).encode()
        self.send_response(200 if self.path.endswith("/chat/completions") else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


def main(d):
    os.makedirs(d, exist_ok=True)
    certificates(d)
    server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
    server.directory = d
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(os.path.join(d, "server.pem"), os.path.join(d, "server.key"))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with open(os.path.join(d, "port.tmp"), "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(os.path.join(d, "port.tmp"), os.path.join(d, "port"))
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
