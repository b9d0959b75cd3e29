"""The demo's triage command (`triage:` in the demo's experiment): a scripted stand-in for a
model-driven triage. It runs in the supervisor's `triage` sandbox: it reads the train split's
failure records from /work/in/records.json, asks the model (templates/demo/demo_model.py,
reached only through the inference gate) about one record of each cluster with the OpenAI
Chat Completions wire format and one offered tool, and writes /work/out/triage.json: a
hypothesis, a label and a severity for every record.
"""
import json
import os
import urllib.request

records = json.load(open(os.environ["AUTOHARNESS_TRIAGE_INPUT"]))["records"]
clusters = {}
for r in records:
    clusters.setdefault(r["cluster"], []).append(r)

tool = {"type": "function", "function": {"name": "triage", "description": "the root cause of a failure",
        "parameters": {"type": "object", "properties": {"label": {"type": "string"}, "hypothesis": {"type": "string"},
                                                        "severity": {"type": "string", "enum": ["low", "medium", "high", "critical"]}}}}}
entries = []
for cluster, members in sorted(clusters.items()):
    r = members[0]
    question = f"What is the root cause of this failure? {r['check']}: {r['excerpt']}"
    body = {"model": "demo-triage", "tools": [tool], "tool_choice": {"type": "function", "function": {"name": "triage"}},
            "messages": [{"role": "system", "content": "You triage benchmark failures."}, {"role": "user", "content": question}]}
    request = urllib.request.Request(os.environ["MODEL_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    answer = json.load(urllib.request.urlopen(request, timeout=60))
    verdict = json.loads(answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
    for m in members:
        entries.append({"record": m["id"], "hypothesis": verdict["hypothesis"], "label": verdict["label"], "severity": verdict["severity"]})

with open(os.environ["AUTOHARNESS_TRIAGE_OUTPUT"], "w") as f:
    json.dump({"triage": entries}, f)
print(f"demo triage: {len(entries)} record(s) in {len(clusters)} cluster(s)")
