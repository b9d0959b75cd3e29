"""A triage command for the tests (`triage:`): asks a model, through the proxy's inference gate,
about each failure cluster in /work/in/records.json and writes /work/out/triage.json.

Like a real one it speaks the OpenAI Chat Completions wire format (urllib: HTTPS_PROXY and
SSL_CERT_FILE as the sandbox sets them) and offers the model one tool, `triage`, whose
arguments are the label, the hypothesis and the severity of the cluster's records.

It also does what a test needs to see:
  - every text file it can read under /work, /tmp, /etc and /usr/local is searched for the
    fixture's task markers, and the ids found go into the first entry's hypothesis (the test
    finds the train ones there, and never a held-out one);
  - with TRIAGE_BAD=1, three entries the supervisor must refuse: an unknown record id, a
    severity outside the list, an unknown key; and a hypothesis with control characters and
    a bidi override, which must be kept flattened.
"""
import json
import os
import re
import sys
import urllib.request

records = json.load(open(os.environ["AUTOHARNESS_TRIAGE_INPUT"]))["records"]
base = os.environ["MODEL_URL"]
key = os.environ["OPENAI_API_KEY"]

markers = set()
for top in ("/work", "/tmp", "/etc", "/usr/local"):
    for root, dirs, files in os.walk(top):
        for name in files:
            try:
                with open(os.path.join(root, name), "rb") as f:
                    data = f.read(1 << 20)
            except OSError:
                continue
            markers.update(m.decode() for m in re.findall(rb"MARKER-([a-z]+-[0-9]+)-a91f", data))

clusters = {}
for r in records:
    clusters.setdefault(r["cluster"], []).append(r)

tool = {"type": "function", "function": {"name": "triage", "description": "the root cause of these failures",
        "parameters": {"type": "object", "properties": {"label": {"type": "string"}, "hypothesis": {"type": "string"},
                                                        "severity": {"type": "string"}}}}}
entries = []
for cluster, members in sorted(clusters.items()):
    body = {"model": "triage-model", "tools": [tool], "messages": [
        {"role": "system", "content": "You triage benchmark failures."},
        {"role": "user", "content": f"cluster {cluster}: {members[0]['error_class']} in {members[0]['check']}: {members[0]['excerpt']}"}]}
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    answer = json.load(urllib.request.urlopen(req, timeout=60))
    call = answer["choices"][0]["message"]["tool_calls"][0]["function"]
    args = json.loads(call["arguments"])
    for r in members:
        entries.append({"record": r["id"], "hypothesis": args["hypothesis"], "label": args.get("label"), "severity": args.get("severity")})

if entries:
    entries[0]["hypothesis"] += " | markers seen: " + ",".join(sorted(markers))
if os.environ.get("TRIAGE_BAD") == "1":
    last = records[-1]["id"]
    entries = [e for e in entries if e["record"] != last]
    entries.append({"record": "c0000000/not-a-record", "hypothesis": "x"})
    entries.append({"record": records[0]["id"], "hypothesis": "again"})
    entries.append({"record": last, "hypothesis": "y", "severity": "apocalyptic"})
    entries.append({"record": last, "hypothesis": "z", "score": 1})
    entries[0]["hypothesis"] = "line one\nline\ttwo\u202e reversed " + entries[0]["hypothesis"]
json.dump({"triage": entries}, open(os.environ["AUTOHARNESS_TRIAGE_OUTPUT"], "w"))
print(f"triaged {len(entries)} entries over {len(clusters)} clusters", file=sys.stderr)
