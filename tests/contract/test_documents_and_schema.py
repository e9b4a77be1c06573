"""The SSM documents' `allowedPattern`s and `statemachine/input.schema.json` agree with the contract
package (`cachewarm.contract.inputs`); each check is also shown to fail on a drifted copy."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from cachewarm.contract import inputs

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted((REPO / "infra" / "ssm_documents").glob("*.json"))
SCHEMA = REPO / "statemachine" / "input.schema.json"

# Where each pattern of the input schema sits (a path of keys and list indexes) and the contract's
# constant it must equal. `anyOf[0]` is the non-null branch of an optional field.
_D = "$defs"
SCHEMA_PATTERNS: dict[tuple[str | int, ...], str] = {
    ("properties", "warm_id", "pattern"): inputs.WARM_ID,
    ("properties", "status_prefix", "pattern"): inputs.STATUS_PREFIX,
    ("properties", "mount_dir", "pattern"): inputs.MOUNT_DIR,
    (_D, "SourceSpec", "properties", "replica", "anyOf", 0, "pattern"): inputs.REPLICA_NAME,
    (_D, "SourceSpec", "properties", "asg_name", "anyOf", 0, "pattern"): inputs.ASG_NAME,
    (_D, "SourceSpec", "properties", "instance_ids", "anyOf", 0, "items", "pattern"): inputs.INSTANCE_ID,
    (_D, "DestinationSpec", "properties", "replica", "anyOf", 0, "pattern"): inputs.REPLICA_NAME,
    (_D, "DestinationSpec", "properties", "asg_name", "anyOf", 0, "pattern"): inputs.ASG_NAME,
    (_D, "DestinationSpec", "properties", "endpoints", "anyOf", 0, "items", "pattern"): inputs.ENDPOINT,
    (
        _D,
        "PopulatorSpec",
        "properties",
        "launch_template_id",
        "anyOf",
        0,
        "pattern",
    ): inputs.LAUNCH_TEMPLATE_ID,
    (_D, "PopulatorSpec", "properties", "launch_template_name", "anyOf", 0, "pattern"): (
        inputs.LAUNCH_TEMPLATE_NAME
    ),
    (_D, "PopulatorSpec", "properties", "launch_template_version", "pattern"): inputs.LAUNCH_TEMPLATE_VERSION,
    (_D, "VolumeSpec", "properties", "kms_key_id", "anyOf", 0, "pattern"): inputs.KMS_KEY_ID,
    (_D, "VolumeSpec", "properties", "device_name", "pattern"): inputs.ATTACH_DEVICE_NAME,
    (_D, "PopulatorSpec", "properties", "placement", "pattern"): inputs.PLACEMENT,
    (_D, "S3Spec", "properties", "destination_region", "anyOf", 0, "pattern"): inputs.AWS_REGION,
    (_D, "S3Spec", "properties", "subnet_ids", "items", "pattern"): inputs.SUBNET_ID,
    (_D, "S3Spec", "properties", "kms_key_id", "anyOf", 0, "pattern"): inputs.KMS_KEY_ID,
}
# Maps keyed by a pattern (JSON Schema `patternProperties`): where the map is, the key's pattern, and
# the pattern of its values (None: the values are objects).
SCHEMA_KEYED: dict[tuple[str | int, ...], tuple[str, str | None]] = {
    (_D, "PopulatorSpec", "properties", "subnet_ids"): (inputs.AZ_NAME, inputs.SUBNET_ID),
    (_D, "SourceSpec", "properties", "node_stats", "anyOf", 0): (inputs.INSTANCE_ID, None),
}
SCHEMA_VALUES: dict[tuple[str | int, ...], object] = {
    ("properties", "status_prefix", "default"): inputs.DEFAULT_STATUS_PREFIX,
    ("properties", "mount_dir", "default"): inputs.DEFAULT_MOUNT_DIR,
    (_D, "DestinationSpec", "properties", "endpoints", "anyOf", 0, "maxItems"): inputs.MAX_ENDPOINTS,
    (_D, "DestinationSpec", "properties", "port", "default"): inputs.DEFAULT_MEMCACHED_PORT,
    (_D, "SourceSpec", "properties", "memcached_port", "default"): inputs.DEFAULT_MEMCACHED_PORT,
    (_D, "PopulatorSpec", "properties", "mode", "default"): inputs.DEFAULT_MODE,
    (_D, "PopulatorSpec", "properties", "placement", "default"): inputs.DEFAULT_PLACEMENT,
}
# Integer fields the controller passes on to an SSM document parameter: the schema's whole range
# must pass that parameter's pattern (or SSM would refuse a valid execution's command).
SCHEMA_RANGES_SENT_TO_SSM: dict[tuple[str | int, ...], str] = {
    (_D, "DumperSpec", "properties", "threads"): inputs.THREADS,
    (_D, "DumperSpec", "properties", "max_items_per_second"): inputs.RATE,
    (_D, "PopulatorSpec", "properties", "max_items_per_second"): inputs.RATE,
    (_D, "S3Spec", "properties", "upload_bytes_per_second"): inputs.BYTE_RATE,
}


def _at(doc: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _where(path: tuple[str | int, ...]) -> str:
    return "/".join(str(p) for p in path)


def _patterns(node: Any, path: tuple[str | int, ...] = ()) -> set[tuple[str | int, ...]]:
    """The path of every `pattern` and `patternProperties` in the schema."""
    found: set[tuple[str | int, ...]] = set()
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            found.add((*path, "pattern"))
        if "patternProperties" in node:
            found.add(path)
        for k, v in node.items():
            found |= _patterns(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found |= _patterns(v, (*path, i))
    return found


def schema_drift(schema: dict[str, Any]) -> list[str]:
    """Every place the input schema disagrees with the contract (empty: none)."""
    problems = []
    for path, want in {**SCHEMA_PATTERNS, **SCHEMA_VALUES}.items():
        try:
            got = _at(schema, path)
        except (KeyError, IndexError, TypeError):
            problems.append(f"{_where(path)}: missing (contract: {want!r})")
            continue
        if got != want:
            problems.append(f"{_where(path)}: {got!r} != contract {want!r}")
    for path, (key_pattern, value_pattern) in SCHEMA_KEYED.items():
        try:
            [(key, value)] = _at(schema, path)["patternProperties"].items()
        except (KeyError, IndexError, TypeError, ValueError):
            problems.append(f"{_where(path)}: no single patternProperties entry")
            continue
        if key != key_pattern:
            problems.append(f"{_where(path)}: key pattern {key!r} != contract {key_pattern!r}")
        if value_pattern is not None and value.get("pattern") != value_pattern:
            problems.append(
                f"{_where(path)}: value pattern {value.get('pattern')!r} != contract {value_pattern!r}"
            )
    mode_path = (_D, "PopulatorSpec", "properties", "mode")
    enum = _at(schema, mode_path).get("enum", [])
    if "^(" + "|".join(enum) + ")$" != inputs.MODE:
        problems.append(f"{_where(mode_path)}: enum {enum} != contract {inputs.MODE!r}")
    for path, pattern in SCHEMA_RANGES_SENT_TO_SSM.items():
        field = _at(schema, path)
        for bound in ("minimum", "maximum"):
            if not inputs.matches(pattern, str(field.get(bound))):
                problems.append(
                    f"{_where(path)}: {bound} {field.get(bound)} fails the SSM pattern {pattern!r}"
                )
    for path in sorted(_patterns(schema) - set(SCHEMA_PATTERNS) - set(SCHEMA_KEYED), key=_where):
        if path[-3:-1] == ("patternProperties", path[-2]) and path[:-3] in SCHEMA_KEYED:
            continue  # the value pattern of a keyed map, checked with the map
        problems.append(f"{_where(path)}: a pattern the contract does not check (add it to this test)")
    return problems


def document_drift(doc: dict[str, Any]) -> list[str]:
    """Every parameter of an SSM document whose pattern is not the contract's (empty: none)."""
    problems = []
    for name, spec in doc.get("parameters", {}).items():
        want = inputs.SSM_PARAMETERS.get(name)
        if want is None:
            problems.append(f"{name}: not in cachewarm.contract.inputs.SSM_PARAMETERS")
        elif spec.get("allowedPattern") != want:
            problems.append(f"{name}: allowedPattern {spec.get('allowedPattern')!r} != contract {want!r}")
        elif "default" in spec and not inputs.matches(want, spec["default"]):
            problems.append(f"{name}: default {spec['default']!r} fails its own pattern")
    if (
        "mode" in doc.get("parameters", {})
        and doc["parameters"]["mode"].get("default") != inputs.DEFAULT_MODE
    ):
        problems.append(f"mode: default is not the contract's {inputs.DEFAULT_MODE!r}")
    return problems


def _schema() -> dict[str, Any]:
    return dict(json.loads(SCHEMA.read_text()))


# ---- the real files agree ------------------------------------------------------------------------


def test_both_documents_exist() -> None:
    assert {p.stem for p in DOCUMENTS} >= {"dump-agent", "populate-agent"}


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.stem)
def test_document_patterns_are_the_contracts(path: Path) -> None:
    assert document_drift(json.loads(path.read_text())) == []


def test_input_schema_patterns_and_defaults_are_the_contracts() -> None:
    assert schema_drift(_schema()) == []


# ---- and the checks catch a drift ----------------------------------------------------------------


def test_document_check_sees_a_changed_pattern() -> None:
    doc = json.loads((REPO / "infra" / "ssm_documents" / "dump-agent.json").read_text())
    doc["parameters"]["mount"]["allowedPattern"] = r"^/[A-Za-z0-9/_.-]{1,200}$"
    assert document_drift(doc) == [
        f"mount: allowedPattern '^/[A-Za-z0-9/_.-]{{1,200}}$' != contract {inputs.MOUNT!r}"
    ]


def test_document_check_sees_a_parameter_the_contract_lacks() -> None:
    doc = json.loads((REPO / "infra" / "ssm_documents" / "populate-agent.json").read_text())
    doc["parameters"]["extra"] = {"type": "String", "allowedPattern": "^x$"}
    assert document_drift(doc) == ["extra: not in cachewarm.contract.inputs.SSM_PARAMETERS"]


def test_document_check_sees_a_bad_default() -> None:
    doc = json.loads((REPO / "infra" / "ssm_documents" / "populate-agent.json").read_text())
    doc["parameters"]["mode"]["default"] = "set"
    assert document_drift(doc) == ["mode: default is not the contract's 'add'"]


SCHEMA_DRIFTS: list[tuple[tuple[str | int, ...], object]] = [
    (("properties", "warm_id", "pattern"), "^[a-z0-9-]{1,64}$"),
    (("properties", "status_prefix", "default"), "status"),
    (("properties", "mount_dir", "default"), "/mnt/warm"),
    (("properties", "mount_dir", "pattern"), "^/[A-Za-z0-9/_.-]{1,250}$"),
    ((_D, "DestinationSpec", "properties", "endpoints", "anyOf", 0, "items", "pattern"), "^.+$"),
    ((_D, "SourceSpec", "properties", "instance_ids", "anyOf", 0, "items", "pattern"), "^i-.+$"),
    ((_D, "PopulatorSpec", "properties", "subnet_ids", "patternProperties"), {"^.+$": {"type": "string"}}),
    ((_D, "PopulatorSpec", "properties", "mode", "enum"), ["add", "set", "replace"]),
    ((_D, "DumperSpec", "properties", "threads", "maximum"), 1000),
    # A new pattern the contract does not know.
    ((_D, "VerifySpec", "properties", "note"), {"type": "string", "pattern": "^.*$"}),
]


@pytest.mark.parametrize(("path", "value"), SCHEMA_DRIFTS, ids=[_where(p[-3:]) for p, _ in SCHEMA_DRIFTS])
def test_schema_check_sees_a_drift(path: tuple[str | int, ...], value: object) -> None:
    schema = copy.deepcopy(_schema())
    _at(schema, path[:-1])[path[-1]] = value
    problems = schema_drift(schema)
    assert any(p.startswith(_where(path[:-1])) for p in problems), (_where(path), problems)
