"""Validates an SBOM with independent tools: `sbom_validate.py cyclonedx|spdx FILE SPDX_SCHEMA`.

CycloneDX: cyclonedx-python-lib's strict JSON validator (the official bom-1.6 schema it bundles), then the
library's own deserializer. SPDX: the official SPDX 2.3 JSON schema (jsonschema), then spdx-tools' parser and
validator. Exit 0 when valid, 1 with the problems on stdout when not.
"""
import json
import sys


def cyclonedx(path):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator
    from cyclonedx.model.bom import Bom

    text = open(path, encoding="utf-8").read()
    err = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if err is not None:
        return [f"schema: {err}"]
    bom = Bom.from_json(json.loads(text))  # raises on what the library cannot read
    if bom.metadata.component is None:
        return ["no metadata.component"]
    return []


def spdx(path, schema_path):
    import jsonschema
    from spdx_tools.spdx.parser.parse_anything import parse_file
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    schema = json.load(open(schema_path, encoding="utf-8"))
    doc = json.load(open(path, encoding="utf-8"))
    problems = [f"schema: {e.json_path}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(doc)]
    if problems:
        return problems
    document = parse_file(path)
    return [f"spdx-tools: {m.validation_message}" for m in validate_full_spdx_document(document, "SPDX-2.3")]


def main():
    kind, path = sys.argv[1], sys.argv[2]
    try:
        problems = cyclonedx(path) if kind == "cyclonedx" else spdx(path, sys.argv[3])
    except Exception as e:  # a parser's refusal is an invalid document
        problems = [f"{type(e).__name__}: {e}"]
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


main()
