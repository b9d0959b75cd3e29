#!/usr/bin/env python3
"""Checks an autoharness evidence bundle with the reference implementations, not autoharness:
securesystemslib's DSSE envelope and key id, in-toto's Envelope (how in-toto verifies DSSE
metadata), in-toto-attestation's Statement v1 validation; then, in plain Python, the split
against its signed commitment and each revealed reward leaf against its signed RFC 6962 root.

    pip install 'securesystemslib[crypto]==1.6.0' in-toto==3.1.0 in-toto-attestation==0.9.3
    python3 verify-evidence.py BUNDLE (--key TRUSTED_KEY.json | --allow-untrusted-key)

TRUSTED_KEY.json is securesystemslib's key object (`autoharness evidence key --json`). Without
it the bundle is refused (anyone can sign one with a key of their own), unless
--allow-untrusted-key asks only whether it is intact under the key it carries. Prints one line
per check and exits 0, or prints what failed and exits 1. It accepts exactly the encodings
`autoharness evidence verify` accepts (canonical standard base64, lower-case hex, integer
indices and sizes, claims held to the gate's rules): EvidenceTests.sharedVectors runs both on the
same bundles. scripts/install-evidence-tools installs the three packages;
EvidenceTests.referenceImplementations runs this script on real bundles.
"""
import base64
import binascii
import hashlib
import json
import re
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


def canonical_base64(text, what):
    """The bytes of standard, padded base64 that re-encodes to itself, as autoharness reads
    it; securesystemslib would also take the URL-safe alphabet, and Python's decoder text whose
    unused bits are set: one signature, several texts."""
    if not isinstance(text, str):
        fail("%s is not a base64 string" % what)
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        fail("%s is not canonical base64" % what)
    if base64.standard_b64encode(raw).decode("ascii") != text:
        fail("%s is not canonical base64" % what)
    return raw


def lower_hex(text, what, length=None):
    """Lower-case hex of `length` bytes (any even length when None), as autoharness reads it."""
    if not isinstance(text, str) or not re.fullmatch(r"(?:[0-9a-f]{2})*", text) or (length is not None and len(text) != 2 * length):
        fail("%s is not %slower-case hex" % (what, "%d bytes of " % length if length else ""))
    return bytes.fromhex(text)


def integer(value, what):
    """A JSON integer: not a boolean, not 1.0."""
    if type(value) is not int:
        fail("%s is not an integer" % what)
    return value


def number(value, what):
    if type(value) not in (int, float):
        fail("%s is not a number" % what)
    return float(value)


def claim_holds(c):
    """The gate's rule for a claim (EvidenceVerifier.holds): the suite's pass rate exactly, a
    held-out score with 1e-9 of floating-point noise in its mean, the paired rule's p-value
    exactly."""
    value, threshold = number(c.get("value"), "a claim's value"), number(c.get("threshold"), "a claim's threshold")
    exact = c.get("metric") == "suite_pass_rate"
    if c.get("comparator") == ">":
        return value > threshold if exact else value - threshold > 1e-9
    if c.get("comparator") == ">=":
        return value >= threshold if exact else value >= threshold - 1e-9
    if c.get("comparator") == "<=":  # the paired rule's p-value against gate.alpha, exactly
        return value <= threshold
    fail("claim %s: unknown comparator %s" % (shown(c.get("metric")), shown(c.get("comparator"))))


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
    if not ((len(argv) == 4 and argv[2] == "--key") or (len(argv) == 3 and argv[2] == "--allow-untrusted-key")):
        if len(argv) == 2:
            fail("no --key: a bundle verified against the key it carries could have been signed by anyone; pass the "
                 "operator's published key (--key KEY.json), or --allow-untrusted-key to check integrity only")
        fail("usage: verify-evidence.py BUNDLE (--key KEY.json | --allow-untrusted-key)")
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
        print("!!  --allow-untrusted-key: the bundle is checked against the key it carries, which says nothing about who signed it")
    if key_obj != bundle["verificationKey"]:
        fail("the bundle is signed with another key than the one trusted")
    if key_obj.get("keytype") != "ed25519" or key_obj.get("scheme") != "ed25519":
        fail("the bundle's verificationKey is not an Ed25519 key")
    lower_hex((key_obj.get("keyval") or {}).get("public"), "the verification key", 32)
    envelope_dict = bundle.get("dsseEnvelope") or {}
    canonical_base64(envelope_dict.get("payload"), "the envelope's payload")
    for sig in envelope_dict.get("signatures") or []:
        canonical_base64(sig.get("sig"), "a signature")
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
        if type(c.get("passed")) is not bool:
            fail("claim %s: passed is not a boolean" % shown(c.get("metric")))
        integer(c.get("sampleSize"), "a claim's sampleSize")
        if claim_holds(c) != c["passed"]:
            fail("claim %s says passed=%s, but %s %s %s is %s" % (shown(c["metric"]), c["passed"], c["value"], shown(c["comparator"]),
                                                                  c["threshold"], claim_holds(c)))
        print("ok  signed claim: %s %s %s %s: %s (n=%s)" % (shown(c["metric"]), c["value"], shown(c["comparator"]), c["threshold"],
                                                     "passed" if c["passed"] is True else "failed", c["sampleSize"]))
    reveal = bundle.get("reveal") or {}
    split = reveal.get("split")
    if split:
        message = json.dumps({"test": sorted(split["test"], key=lambda s: s.encode()),
                              "train": sorted(split["train"], key=lambda s: s.encode())},
                             separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
        digest = hashlib.sha256(lower_hex(split["salt"], "the revealed split's salt", 32) + message).hexdigest()
        if digest != predicate["split"]["commitment"]:
            fail("the revealed split does not match its signed commitment")
        print("ok  split commitment %s recomputed" % shown(digest))
    for r in reveal.get("rewards") or []:
        tree = predicate["rewards"][r["tree"]]
        if not merkle_verify(r["leaf"].encode(), integer(r["index"], "a revealed leaf's index"), integer(tree["size"], "a tree's size"),
                             [lower_hex(p, "an audit path entry", 32) for p in r["path"]], lower_hex(tree["root"], "a tree's root", 32)):
            fail("the %s leaf %d is not under the signed root" % (r["tree"], r["index"]))
        leaf = load_strict(r["leaf"])
        print("ok  %s reward %s = %s under root %s" % (shown(r["tree"]), shown(leaf["task"]), leaf["reward"], shown(tree["root"])))


if __name__ == "__main__":
    main(sys.argv)
