#!/usr/bin/env python3
"""Checks an autoharness evidence bundle with the reference implementations, not autoharness:
securesystemslib's DSSE envelope and key id, in-toto's Envelope (how in-toto verifies DSSE
metadata), in-toto-attestation's Statement v1 validation; then, in plain Python, the split
against its signed commitment and each revealed reward leaf against its signed RFC 6962 root.

    pip install 'securesystemslib[crypto]==1.6.0' in-toto==3.1.0 in-toto-attestation==0.9.3
    python3 verify-evidence.py BUNDLE [--key TRUSTED_KEY.json]

TRUSTED_KEY.json is securesystemslib's key object (`autoharness evidence key --json`); without
it the bundle's own key is used (integrity only, not origin). Prints one line per check and
exits 0, or prints what failed and exits 1. scripts/install-evidence-tools installs the three
packages; EvidenceTests.referenceImplementations runs this script on real bundles.
"""
import base64
import hashlib
import json
import sys


def fail(why):
    print("FAILED: " + shown(why))
    sys.exit(1)


def shown(text):
    """Text from the bundle as it may go to a terminal: controls and non-ASCII escaped."""
    return ascii(str(text))[1:-1]


def strict(pairs):
    """json's object_pairs_hook: a name twice in one object is refused (parsers disagree on
    which one wins, so one file could verify as two different Statements)."""
    names = [k for k, _ in pairs]
    if len(names) != len(set(names)):
        raise ValueError("a name appears twice in one object: %s" % sorted(n for n in set(names) if names.count(n) > 1))
    return dict(pairs)


def load_strict(text):
    try:
        return json.loads(text, object_pairs_hook=strict)
    except ValueError as e:
        fail("not strict JSON: %s" % e)


def merkle_verify(leaf, index, size, path, root):
    """RFC 9162 section 2.1.3.2: an inclusion proof for leaf `index` of `size` leaves."""
    if not 0 <= index < size:
        return False
    fn, sn = index, size - 1
    r = hashlib.sha256(b"\x00" + leaf).digest()
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = hashlib.sha256(b"\x01" + p + r).digest()
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = hashlib.sha256(b"\x01" + r + p).digest()
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--key"):
        fail("usage: verify-evidence.py BUNDLE [--key KEY.json]")
    from google.protobuf import json_format
    from in_toto.models.metadata import Envelope as InTotoEnvelope, Metadata
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey
    from securesystemslib.signer._utils import compute_default_keyid

    bundle = load_strict(open(argv[1], encoding="utf-8").read())
    if bundle.get("mediaType") != "application/vnd.autoharness.evidence.v1+json":
        fail("not an autoharness evidence bundle")
    key_obj = load_strict(open(argv[3], encoding="utf-8").read()) if len(argv) == 4 else bundle["verificationKey"]
    if len(argv) != 4:
        print("!!  no --key: the bundle is checked against the key it carries, which says nothing about who signed it")
    if key_obj != bundle["verificationKey"]:
        fail("the bundle is signed with another key than the one trusted")
    keyid = compute_default_keyid(key_obj["keytype"], key_obj["scheme"], key_obj["keyval"])
    key = SSlibKey.from_dict(keyid, dict(key_obj))

    # securesystemslib: the DSSE signature over PAE(payloadType, payload).
    envelope = Envelope.from_dict(json.loads(json.dumps(bundle["dsseEnvelope"])))
    try:
        envelope.verify([key], 1)
    except Exception as e:  # VerificationError: names no key that verified
        fail("securesystemslib: " + str(e))
    print("ok  securesystemslib DSSE: signature by %s verifies" % keyid)

    # in-toto: loads the envelope as in-toto metadata and verifies it as in-toto does.
    metadata = Metadata.from_dict(json.loads(json.dumps(bundle["dsseEnvelope"])))
    if not isinstance(metadata, InTotoEnvelope):
        fail("in-toto did not load the envelope as DSSE in-toto metadata")
    try:
        metadata.verify_signature(dict(key_obj, keyid=keyid))
    except Exception as e:
        fail("in-toto: " + str(e))
    print("ok  in-toto %s envelope: signature verifies" % metadata.payload_type)

    # in-toto-attestation: the payload is a valid Statement v1.
    payload = envelope.payload
    statement = load_strict(payload.decode("utf-8"))
    pb = statement_pb2.Statement()
    json_format.Parse(payload, pb)
    Statement.copy_from_pb(pb).validate()
    print("ok  in-toto-attestation Statement v1 validates: subject %s, predicateType %s"
          % (shown(statement["subject"][0]["digest"]["sha256"]), shown(statement["predicateType"])))

    predicate = statement["predicate"]
    gate = predicate.get("gate") or {}
    print("ok  signed: %s of %s%s" % (shown(predicate["kind"]), shown(predicate["benchmark"]),
                                      ", attempt %s: %s" % (gate["attempt"], shown(gate["outcome"])) if gate else ""))
    for c in predicate.get("claims", []):
        print("ok  signed claim: %s %s %s %s: %s (n=%s)" % (shown(c["metric"]), c["value"], shown(c["comparator"]), c["threshold"],
                                                     "passed" if c["passed"] is True else "failed", c["sampleSize"]))
    reveal = bundle.get("reveal") or {}
    split = reveal.get("split")
    if split:
        message = json.dumps({"test": sorted(split["test"], key=lambda s: s.encode()),
                              "train": sorted(split["train"], key=lambda s: s.encode())},
                             separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
        digest = hashlib.sha256(bytes.fromhex(split["salt"]) + message).hexdigest()
        if digest != predicate["split"]["commitment"]:
            fail("the revealed split does not match its signed commitment")
        print("ok  split commitment %s recomputed" % shown(digest))
    for r in reveal.get("rewards") or []:
        tree = predicate["rewards"][r["tree"]]
        if not merkle_verify(r["leaf"].encode(), r["index"], tree["size"],
                             [bytes.fromhex(p) for p in r["path"]], bytes.fromhex(tree["root"])):
            fail("the %s leaf %d is not under the signed root" % (r["tree"], r["index"]))
        leaf = load_strict(r["leaf"])
        print("ok  %s reward %s = %s under root %s" % (shown(r["tree"]), shown(leaf["task"]), leaf["reward"], shown(tree["root"])))


if __name__ == "__main__":
    main(sys.argv)
