#!/usr/bin/env python3
"""An independent implementation of DSSE and in-toto for repro's interop test (tests/attest_interop.rs).

It uses securesystemslib (DSSE envelopes, keys and the key id), pyca/cryptography (PEM key files) and
in-toto-attestation (the Statement v1 protobuf and its validation, the test-result and VSA predicates), never
repro's code.

    dsse_interop.py keyid PUB.pem                    prints securesystemslib's key id of a PEM public key
    dsse_interop.py verify ENVELOPE PUB.pem          exit 0 and a JSON summary if the envelope verifies and holds
                                                     a valid in-toto Statement v1; exit 1 and the reason if not
    dsse_interop.py sign KEY.pem STATEMENT OUT       signs STATEMENT's bytes (an in-toto statement) into a DSSE
                                                     envelope written to OUT; prints the key id
"""

import json
import sys

from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key
from google.protobuf import json_format
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.predicates.vsa.v1 import vsa_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, SSlibKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
VSA = "https://slsa.dev/verification_summary/v1"


def public_key(path):
    with open(path, "rb") as f:
        return SSlibKey.from_crypto(load_pem_public_key(f.read()))


def check_predicate(statement):
    """Parses the predicates that have a protobuf schema strictly (every field must be one of the spec's, of its
    type). For the VSA, first: extension fields named by URIs (the spec allows them) are set aside;
    `verifiedLevels`, an array of strings in the SLSA spec but one string in in-toto-attestation's proto, is
    checked here; `inputAttestations` are ResourceDescriptors in the spec but {uri, digest} in the proto, so
    only those two are parsed (and the digest the spec requires is checked)."""
    predicate = dict(statement["predicate"])
    if statement["predicateType"] == TEST_RESULT:
        json_format.ParseDict(predicate, test_result_pb2.TestResult())
    elif statement["predicateType"] == VSA:
        for k in [k for k in predicate if k.startswith("https://")]:
            del predicate[k]
        levels = predicate.pop("verifiedLevels")
        if not isinstance(levels, list) or not levels or not all(isinstance(x, str) for x in levels):
            raise ValueError(f"verifiedLevels must be a non-empty array of strings, not {levels!r}")
        inputs = predicate.get("inputAttestations", [])
        if not all(a.get("digest") for a in inputs):
            raise ValueError("an inputAttestations entry without a digest")
        predicate["inputAttestations"] = [{k: a[k] for k in ("uri", "digest") if k in a} for a in inputs]
        json_format.ParseDict(predicate, vsa_pb2.VerificationSummary())


def verify(envelope_path, pub_path):
    key = public_key(pub_path)
    with open(envelope_path, "rb") as f:
        envelope = Envelope.from_dict(json.load(f))
    if envelope.payload_type != PAYLOAD_TYPE:
        raise ValueError(f"payloadType {envelope.payload_type!r}")
    envelope.verify([key], 1)
    # The payload verified: now it must be an in-toto Statement v1.
    statement = json.loads(envelope.payload)
    pb = json_format.Parse(envelope.payload, statement_pb2.Statement())
    Statement.copy_from_pb(pb).validate()
    check_predicate(statement)
    print(
        json.dumps(
            {
                "keyid": key.keyid,
                "predicateType": pb.predicate_type,
                "subjects": [{"name": s.name, "digest": dict(s.digest)} for s in pb.subject],
            }
        )
    )


def sign(key_path, statement_path, out_path):
    with open(key_path, "rb") as f:
        private = load_pem_private_key(f.read(), password=None)
    signer = CryptoSigner(private)
    with open(statement_path, "rb") as f:
        payload = f.read()
    envelope = Envelope(payload, PAYLOAD_TYPE, {})
    envelope.sign(signer)
    with open(out_path, "w") as f:
        json.dump(envelope.to_dict(), f)
    print(signer.public_key.keyid)


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "keyid" and len(argv) == 3:
        print(public_key(argv[2]).keyid)
    elif cmd == "verify" and len(argv) == 4:
        try:
            verify(argv[2], argv[3])
        except Exception as e:  # noqa: BLE001 - every refusal is a reason to print
            print(f"not verified: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    elif cmd == "sign" and len(argv) == 5:
        sign(argv[2], argv[3], argv[4])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
