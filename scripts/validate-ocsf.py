#!/usr/bin/env python3
"""Validates OCSF events (JSON lines) against OCSF 1.8.0, with the schema that
ocsf-json-schema packages turned into JSON Schema (draft 2020-12) and checked by jsonschema:
every required attribute, every enum, no attribute the class does not define.

    pip install ocsf-json-schema==1.2.0 jsonschema==4.26.0
    python3 validate-ocsf.py EVENTS.jsonl...

Prints how many events of each class validated and exits 0, or prints the first invalid
event's line and error and exits 1. scripts/install-evidence-tools installs both packages;
OCSFTests.validates runs this on `autoharness audit export`'s output.
"""
import json
import sys

from jsonschema import Draft202012Validator
from ocsf_json_schema import OcsfJsonSchemaEmbedded, get_ocsf_schema


def main(paths):
    schema = OcsfJsonSchemaEmbedded(get_ocsf_schema(version="1.8.0"))
    validators = {}
    counts = {}
    for path in paths:
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            if not line.strip():
                continue
            event = json.loads(line)
            uid = event.get("class_uid")
            if uid not in validators:
                name = schema.lookup_class_name_from_uid(class_uid=uid)
                validators[uid] = (name, Draft202012Validator(schema.get_class_schema(class_name=name, profiles=[])))
            name, validator = validators[uid]
            errors = sorted(validator.iter_errors(event), key=lambda e: list(e.path))
            if errors:
                print("INVALID %s:%d (%s %s): %s at %s" % (path, n, uid, name, errors[0].message, "/".join(map(str, errors[0].path))))
                sys.exit(1)
            counts[(uid, name)] = counts.get((uid, name), 0) + 1
    for (uid, name), c in sorted(counts.items()):
        print("ok  %d %s (%d) event(s) valid under OCSF 1.8.0" % (c, name, uid))


if __name__ == "__main__":
    main(sys.argv[1:])
