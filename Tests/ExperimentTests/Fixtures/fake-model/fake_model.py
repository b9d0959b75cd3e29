"""A fake of the model vendors' HTTP APIs, for driving the real coding-agent CLIs in tests.

It speaks the vendors' wire formats, not ours:
  Anthropic Messages   POST /v1/messages   (stream: SSE message_start, content_block_start /
                       content_block_delta (text_delta, input_json_delta) / content_block_stop,
                       message_delta with stop_reason and usage, message_stop; or one JSON body)
  OpenAI Responses     POST /v1/responses  (stream: SSE response.created, response.output_item.added
                       / .done for messages and function calls, response.completed with usage)
  OpenAI Chat          POST /v1/chat/completions (one JSON body; tau2's agent, user simulator
                       and NL-assertion judge, through LiteLLM)
over TLS with a certificate from a CA the test makes (`--make-certs`).

And the vendors' state, as far as a test of the inference gate needs it: a Chat Completion
sent with `store: true` and a Response sent without `store: false` are kept, and listed by
GET /v1/chat/completions (with their metadata) and GET /v1/responses/<id>; POST /v1/files
keeps a file that GET /v1/files lists. Every request is logged with its method, path, Host
header and the `store` value it carried.

What the "model" says is a script (JSON): {"turns": [TURN, ...], "answers": [{"when": TEXT,
"turn": TURN}, ...]}; a TURN is a list of blocks,
{"text": "..."} or {"tool": NAME, "input": {...}}. Each request of the agent's main loop
(one that offers tools) gets the next turn; once the script is spent, a final text turn. A
request without tools (titles, summaries, quota probes) gets a short text and does not advance
the script. Every request is logged as one JSON line (path, model, whether it was streamed,
the tool results and text the agent sent back since the last turn), so a test can assert what
the agent saw, e.g. the gate's verdict. An OpenAI Chat request offering tools whose last user
message contains an `answers` rule's TEXT gets that rule's TURN instead (the script does not
advance).

A request containing `SLEEP:<seconds>` is answered that much later. An outage, for the gate's retries: `--fail-account KEY --fail-rate R --fail-seed S` answers
`--fail-status` (503) to a fraction R of the POSTs sent with KEY, drawn in arrival order. A request
containing `FAILONCE:<word>` is failed with 503 the first time that word arrives, answered after.

  python3 fake_model.py --make-certs DIR
  python3 fake_model.py --script S.json --cert DIR/server.pem --key DIR/server.key \
      --port-file PORT --log LOG.jsonl
"""
import argparse
import json
import os
import random
import re
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def make_certs(directory, ips=()):
    """A CA and a server certificate for 127.0.0.2 (and 127.0.0.1, localhost, and `ips`: a
    test's own bridge address), signed by it."""
    os.makedirs(directory, exist_ok=True)
    d = lambda name: os.path.join(directory, name)

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=autoharness test CA",
        "-keyout", d("ca.key"), "-out", d("ca.pem"),
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.2", "-keyout", d("server.key"), "-out", d("server.csr"))
    with open(d("ext.cnf"), "w") as f:
        f.write("subjectAltName=" + ",".join(["IP:127.0.0.2", "IP:127.0.0.1"] + ["IP:" + ip for ip in ips] + ["DNS:localhost"])
                + "\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", d("server.csr"), "-CA", d("ca.pem"), "-CAkey", d("ca.key"), "-CAcreateserial",
        "-days", "2", "-extfile", d("ext.cnf"), "-out", d("server.pem"))


class Script:
    def __init__(self, path):
        with open(path) as f:
            script = json.load(f)
        self.turns = script["turns"]
        self.answers = script.get("answers", [])
        self.next = 0
        self.lock = threading.Lock()

    def answer(self, messages):
        """The turn of the first `answers` rule whose `when` is in the last user message (a
        model that answers each prompt the same way, whatever order they come in: BFCL's
        tasks), or None; once that turn's calls have run (the last message is a tool result),
        a text that ends the turn."""
        last = next((m.get("content") for m in reversed(messages or []) if m.get("role") == "user"), None)
        if not isinstance(last, str):
            return None
        turn = next((r["turn"] for r in self.answers if r["when"] in last), None)
        if turn is not None and messages and messages[-1].get("role") == "tool":
            return [{"text": "Done."}]  # the calls ran: the turn ends
        return turn

    def take(self):
        with self.lock:
            if self.next < len(self.turns):
                self.next += 1
                return self.next, self.turns[self.next - 1]
            return self.next + 1, [{"text": "Done: the script has no more turns."}]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-model/1"

    def log_message(self, fmt, *args):
        pass

    def body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {}

    def record(self, entry):
        if self.command == "POST":
            entry.setdefault("store", getattr(self, "store_seen", "absent"))
            entry.setdefault("host", self.headers.get("host"))
            entry.setdefault("account", self.account())
        with self.server.log_lock, open(self.server.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self):
        path = self.path.split("?")[0]
        self.record({"method": "GET", "path": path, "host": self.headers.get("host")})
        state = self.server.state
        with state["lock"]:
            if path.endswith("/v1/chat/completions"):
                return self.reply_json(200, {"object": "list", "data": list(state["chat"]), "has_more": False,
                                             "first_id": None, "last_id": None})
            if path.endswith("/v1/files"):
                return self.reply_json(200, {"object": "list", "data": list(state["files"]), "has_more": False})
            if "/v1/responses/" in path:
                rid = path.rsplit("/", 1)[-1]
                if rid in state["responses"]:
                    return self.reply_json(200, state["responses"][rid])
        self.reply_json(404, {"error": {"type": "not_found_error", "message": "no such endpoint in the fake"}})

    def keep(self, kind, obj):
        with self.server.state["lock"]:
            if kind == "responses":
                self.server.state["responses"][obj["id"]] = obj
            else:
                self.server.state[kind].append(obj)

    def do_POST(self):
        if self.path.split("?")[0].endswith("/v1/files"):
            n = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(n) if n else b""
            f = {"id": "file-%d" % len(self.server.state["files"]), "object": "file", "bytes": len(raw),
                 "filename": "upload", "purpose": "user_data", "created_at": 0, "status": "processed",
                 "content": raw.decode("utf-8", "replace")[:2000]}
            self.keep("files", f)
            self.record({"method": "POST", "path": "/v1/files", "host": self.headers.get("host")})
            return self.reply_json(200, f)
        req = self.body()
        path = self.path.split("?")[0]
        self.store_seen = req.get("store", "absent")
        # `SLEEP:<seconds>` in a request: answered that much later (a slow generation), logged
        # when it arrives.
        slow = re.search(r"SLEEP:(\d+)", json.dumps(req))
        if slow:
            self.record({"method": "POST", "path": path, "slow": int(slow.group(1))})
            time.sleep(int(slow.group(1)))
        if self.outage() or self.fails_once(req):
            status = self.server.fail_status
            self.record({"method": "POST", "path": path, "failed": status})
            return self.reply_json(status, {"error": {"type": "overloaded_error", "message": "the fake vendor is failing this request"}})
        if path.endswith("/v1/messages/count_tokens"):
            self.record({"method": "POST", "path": path})
            return self.reply_json(200, {"input_tokens": 100})
        if path.endswith("/v1/messages"):
            return self.anthropic(req, path)
        if path.endswith("/v1/responses"):
            return self.openai(req, path)
        if path.endswith("/chat/completions"):
            return self.chat(req, path)
        self.record({"method": "POST", "path": path})
        self.reply_json(404, {"error": {"type": "not_found_error", "message": "no such endpoint in the fake"}})

    def fails_once(self, req):
        """`FAILONCE:<word>`: true the first time the word arrives."""
        once = re.search(r"FAILONCE:([A-Za-z0-9_-]+)", json.dumps(req))
        if not once:
            return False
        with self.server.state["lock"]:
            seen = once.group(1) in self.server.state["failed_once"]
            self.server.state["failed_once"].add(once.group(1))
            return not seen

    def outage(self):
        """`--fail-rate`: whether this request, sent with `--fail-account`'s key, is failed; drawn
        from one seeded generator in arrival order."""
        if self.server.fail_rate <= 0 or self.account() not in (self.server.fail_account, "Bearer " + self.server.fail_account):
            return False
        with self.server.state["lock"]:
            return self.server.fail_random.random() < self.server.fail_rate

    def reply_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        # As the vendors do: per-key counters the inference gate must not relay.
        self.send_header("x-ratelimit-remaining-tokens", "149982")
        self.send_header("anthropic-ratelimit-requests-remaining", "49")
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def sse(self, event, data):
        self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    # --- Anthropic Messages ------------------------------------------------------------

    @staticmethod
    def anthropic_feedback(messages):
        """What the agent sent since the model's last turn: tool results and user text."""
        out = []
        for m in reversed(messages or []):
            if m.get("role") == "assistant":
                break
            content = m.get("content")
            if isinstance(content, str):
                out.append({"text": content})
                continue
            for c in content or []:
                if c.get("type") == "tool_result":
                    inner = c.get("content")
                    if isinstance(inner, list):
                        inner = "".join(x.get("text", "") for x in inner if isinstance(x, dict))
                    out.append({"tool_result": inner, "is_error": bool(c.get("is_error"))})
                elif c.get("type") == "text":
                    out.append({"text": c.get("text", "")})
        return list(reversed(out))

    # --- the vendors' prompt caches, per account ------------------------------------------
    # As the vendors document them: OpenAI caches every prompt of 1,024 tokens or more, by
    # prefix, within an organisation, and says so in usage.prompt_tokens_details.cached_tokens;
    # Anthropic caches only up to a `cache_control` breakpoint and says so in
    # usage.cache_read_input_tokens. Here a "token" is a character and the account is the key.

    def account(self):
        return self.headers.get("authorization") or self.headers.get("x-api-key") or ""

    def prompt_cached(self, prefix):
        key = (self.account(), prefix)
        with self.server.state["lock"]:
            seen = key in self.server.state["prompt_cache"]
            self.server.state["prompt_cache"].add(key)
        return seen

    def openai_cached_tokens(self, req):
        text = json.dumps(req.get("messages") or req.get("input") or "")
        return 1024 if len(text) >= 1024 and self.prompt_cached(text[:1024]) else 0

    def anthropic_cached_tokens(self, req):
        blocks = []
        system = req.get("system")
        if isinstance(system, list):
            blocks += system
        for m in req.get("messages") or []:
            if isinstance(m.get("content"), list):
                blocks += m["content"]
        # A breakpoint anywhere in a block counts, however deep (a document's or a search
        # result's content blocks), as the vendor honours it; the cached prefix is the blocks'
        # content without the breakpoints themselves.
        def breakpoint_in(v):
            if isinstance(v, dict):
                if "cache_control" in v:
                    return True
                return any(breakpoint_in(x) for k, x in v.items() if not (k == "input" and v.get("type") in ("tool_use", "server_tool_use")))
            return isinstance(v, list) and any(breakpoint_in(x) for x in v)

        def without(v):
            if isinstance(v, dict):
                return {k: without(x) for k, x in v.items() if k != "cache_control"}
            return [without(x) for x in v] if isinstance(v, list) else v

        last = max((i for i, b in enumerate(blocks) if breakpoint_in(b)), default=None)
        if last is None and "cache_control" not in req:
            return 0
        upto = blocks if last is None else blocks[:last + 1]
        return 1000 if self.prompt_cached(json.dumps(without(upto), sort_keys=True)) else 0

    def anthropic(self, req, path):
        main = bool(req.get("tools"))
        n, turn = self.server.script.take() if main else (0, [{"text": "ok"}])
        self.record({"method": "POST", "path": path, "vendor": "anthropic", "model": req.get("model"),
                     "stream": bool(req.get("stream")), "main": main, "turn": n,
                     "tools": [t.get("name") for t in req.get("tools") or []],
                     "cache_control": '"cache_control"' in json.dumps(req),
                     "feedback": self.anthropic_feedback(req.get("messages")) if main else []})
        blocks = []
        for i, b in enumerate(turn):
            if "tool" in b:
                blocks.append({"type": "tool_use", "id": f"toolu_{n:03d}_{i}", "name": b["tool"], "input": b.get("input", {})})
            else:
                blocks.append({"type": "text", "text": b["text"]})
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        usage = {"input_tokens": 1000, "output_tokens": 50, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": self.anthropic_cached_tokens(req)}
        message = {"id": f"msg_{n:04d}", "type": "message", "role": "assistant", "model": req.get("model", "fake"),
                   "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage}
        if not req.get("stream"):
            return self.reply_json(200, message)
        self.start_sse()
        self.sse("message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                                      "usage": {**usage, "output_tokens": 1}}})
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                self.sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
                self.sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}})
            else:
                self.sse("content_block_start", {"type": "content_block_start", "index": i,
                                                 "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
                js = json.dumps(b["input"])
                half = len(js) // 2  # two deltas: clients must join partial JSON
                for part in (js[:half], js[half:]):
                    self.sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                     "delta": {"type": "input_json_delta", "partial_json": part}})
            self.sse("content_block_stop", {"type": "content_block_stop", "index": i})
        self.sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": {"output_tokens": usage["output_tokens"]}})
        self.sse("message_stop", {"type": "message_stop"})

    # --- OpenAI Chat Completions (tau2-bench through LiteLLM) --------------------------

    def chat(self, req, path):
        """Three callers, told apart as tau2 v1.0.1 makes them: its agent offers tools (the
        script's next turn, then text); its NL-assertion judge's system prompt asks for
        `metExpectation` (src/tau2/evaluator/evaluator_nl_assertions.py): every expected
        outcome graded unmet; its user simulator (its guidelines' words, tools or none) opens with a request and ends the
        conversation with tau2's stop token (src/tau2/user/user_simulator_base.py, STOP) once
        the agent has answered twice."""
        messages = req.get("messages") or []
        system = " ".join(m.get("content") or "" for m in messages if m.get("role") == "system" and isinstance(m.get("content"), str))
        # banking_knowledge's simulator has tools of its own (call_discoverable_user_tool): it is
        # told apart by its guidelines (data/tau2/user_simulator/simulation_guidelines*.md).
        # A caller without tools whose prompt an `answers` rule matches is an agent too
        # (inspect_ai's generate() on an openai/ model).
        simulator = "playing the role of a customer" in system
        if "metExpectation" in system:
            role, n = "judge", 0
            asked = "".join(m.get("content") or "" for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str))
            outcomes = asked.split("expectedOutcomes:", 1)[-1].strip()
            turn = [{"text": json.dumps({"results": [{"expectedOutcome": outcomes[:200], "reasoning": "fake judge", "metExpectation": False}]})}]
        elif not simulator and self.server.script.answer(messages) is not None:
            role, n, turn = "agent", 0, self.server.script.answer(messages)
        elif req.get("tools") and not simulator:
            role = "agent"
            n, turn = self.server.script.take()
        else:
            role, n = "user", 0
            answered = sum(1 for m in messages if m.get("role") == "user")  # the agent's turns, as the simulator sees them
            turn = [{"text": "Thank you, that is all. ###STOP###" if answered >= 2 else "Hi, I need help with an order of mine."}]
        feedback = []
        for m in reversed(messages):
            if m.get("role") != "tool":
                break
            feedback.insert(0, {"tool_result": m.get("content")})
        self.record({"method": "POST", "path": path, "vendor": "openai-chat", "role": role, "model": req.get("model"), "feedback": feedback,
                     "prompt_cache_key": "prompt_cache_key" in req,
                     "stream": bool(req.get("stream")), "turn": n, "tools": [t.get("function", {}).get("name") for t in req.get("tools") or []]})
        text = "".join(b.get("text", "") for b in turn if "text" in b) or None
        calls = [{"id": f"call_{n:03d}_{i}", "type": "function", "function": {"name": b["tool"], "arguments": json.dumps(b.get("input", {}))}}
                 for i, b in enumerate(turn) if "tool" in b]
        message = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        completion = {"id": f"chatcmpl-{n:04d}-{len(self.server.state['chat'])}", "object": "chat.completion", "created": 0,
                      "model": req.get("model", "fake"),
                      "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
                      "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050,
                                "prompt_tokens_details": {"cached_tokens": self.openai_cached_tokens(req)}}}
        if req.get("store") is True:
            self.keep("chat", {**completion, "metadata": req.get("metadata") or {}})
        self.reply_json(200, completion)

    # --- OpenAI Responses ----------------------------------------------------------------

    @staticmethod
    def openai_feedback(items):
        out = []
        for it in reversed(items if isinstance(items, list) else []):
            t = it.get("type")
            if t in ("function_call", "custom_tool_call") or (t == "message" and it.get("role") == "assistant"):
                break
            if t in ("function_call_output", "custom_tool_call_output"):
                o = it.get("output")
                if isinstance(o, dict):
                    o = o.get("content") or json.dumps(o)
                out.append({"tool_result": o})
            elif t == "message":
                for c in it.get("content") or []:
                    if c.get("type") in ("input_text", "output_text"):
                        out.append({"text": c.get("text", "")})
        return list(reversed(out))

    def openai(self, req, path):
        main = bool(req.get("tools"))
        n, turn = self.server.script.take() if main else (0, [{"text": "ok"}])
        tools = []
        for t in req.get("tools") or []:
            tools.append(t.get("name") or (t.get("function") or {}).get("name") or t.get("type"))
        self.record({"method": "POST", "path": path, "vendor": "openai", "model": req.get("model"),
                     "stream": bool(req.get("stream")), "main": main, "turn": n, "tools": tools,
                     "feedback": self.openai_feedback(req.get("input")) if main else []})
        rid = f"resp_{n:04d}"
        items = []
        for i, b in enumerate(turn):
            if "tool" in b:
                items.append({"type": "function_call", "id": f"fc_{n:03d}_{i}", "call_id": f"call_{n:03d}_{i}",
                              "name": b["tool"], "arguments": json.dumps(b.get("input", {})), "status": "completed"})
            else:
                items.append({"type": "message", "id": f"msg_{n:03d}_{i}", "role": "assistant", "status": "completed",
                              "content": [{"type": "output_text", "text": b["text"], "annotations": []}]})
        usage = {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 50,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 1050}
        response = {"id": rid, "object": "response", "status": "completed", "model": req.get("model", "fake"),
                    "output": items, "usage": usage, "metadata": req.get("metadata") or {}}
        if req.get("store", True) is not False:
            self.keep("responses", response)
        if not req.get("stream"):
            return self.reply_json(200, response)
        self.start_sse()
        seq = 0

        def ev(kind, data):
            nonlocal seq
            data = {"type": kind, "sequence_number": seq, **data}
            seq += 1
            self.sse(kind, data)

        ev("response.created", {"response": {**response, "status": "in_progress", "output": [], "usage": None}})
        for i, it in enumerate(items):
            ev("response.output_item.added", {"output_index": i, "item": {**it, "status": "in_progress"}})
            if it["type"] == "message":
                ev("response.output_text.delta", {"output_index": i, "item_id": it["id"], "content_index": 0,
                                                  "delta": it["content"][0]["text"]})
            else:
                ev("response.function_call_arguments.delta", {"output_index": i, "item_id": it["id"], "delta": it["arguments"]})
            ev("response.output_item.done", {"output_index": i, "item": it})
        ev("response.completed", {"response": response})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-certs")
    ap.add_argument("--san-ip", action="append", default=[])
    ap.add_argument("--script")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--port-file")
    ap.add_argument("--log")
    ap.add_argument("--address", default="127.0.0.2")
    # An outage: requests that carry this key fail with --fail-status at this rate.
    ap.add_argument("--fail-account", default="")
    ap.add_argument("--fail-rate", type=float, default=0.0)
    ap.add_argument("--fail-seed", type=int, default=0)
    ap.add_argument("--fail-status", type=int, default=503)
    a = ap.parse_args()
    if a.make_certs:
        make_certs(a.make_certs, a.san_ip)
        return
    # 127.0.0.2: a loopback address of the host that is not the sandbox's own 127.0.0.1
    # (which its NO_PROXY sends straight to the sandbox's private loopback), so a sandboxed
    # agent reaches it only through the egress proxy, and only where a policy allows it.
    server = ThreadingHTTPServer((a.address, 0), Handler)
    server.daemon_threads = True
    server.script = Script(a.script)
    server.log_path = a.log
    server.log_lock = threading.Lock()
    server.fail_account, server.fail_rate, server.fail_status = a.fail_account, a.fail_rate, a.fail_status
    server.fail_random = random.Random(a.fail_seed)
    server.state = {"lock": threading.Lock(), "chat": [], "files": [], "responses": {}, "prompt_cache": set(),
                    "failed_once": set()}
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.cert, a.key)
    # The handshake in the handler thread, not in accept(): one stalled client cannot block the rest.
    server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    with open(a.port_file + ".part", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(a.port_file + ".part", a.port_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
