"""Hostile state-machine input through the real ASL: shell metacharacters in every string field of
the input model (found by walking its JSON schema, so a new field is covered without editing this
test), oversized input, and a lying warm id. Each must end FAILED at ValidateInput with an error
naming the field, and create nothing (no volume, instance, command or S3 object).

The controller tests cover the rest of the input rules and the failure-at-every-stage teardown
(tests/controller/test_state_machine.py); this file adds the breadth."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from cachewarm_controller.model import WarmInput

from tests.controller.support import BUCKET, World

HOSTILE = ["$(touch /tmp/cw-pwned)", "a;rm -rf /", "a\nb", "`id`", "a' || '1", "a|b&c>d"]


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def string_paths(schema: dict[str, Any], node: dict[str, Any] | None = None, path: tuple = ()) -> list[tuple]:
    """Paths (keys; 0 for a list item; "*" for a map value) of every string in the input model."""
    node = _resolve(schema, node if node is not None else schema)
    out: list[tuple] = []
    for alt in node.get("anyOf", []):
        out += string_paths(schema, alt, path)
    t = node.get("type")
    if t == "string":
        out.append(path)
    elif t == "array":
        out += string_paths(schema, node["items"], (*path, 0))
    elif t == "object":
        for k, sub in node.get("properties", {}).items():
            out += string_paths(schema, sub, (*path, k))
        for sub in node.get("patternProperties", {}).values():
            out += string_paths(schema, sub, (*path, "*"))
        if isinstance(node.get("additionalProperties"), dict):
            out += string_paths(schema, node["additionalProperties"], (*path, "*"))
    return sorted(set(out), key=str)


def put(doc: dict[str, Any], path: tuple, value: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    cur: Any = doc
    for i, key in enumerate(path):
        last = i == len(path) - 1
        nxt_empty: Any = [] if (not last and path[i + 1] == 0) else {}
        if key == 0:
            if not cur:
                cur.append(nxt_empty)
            if last:
                cur[0] = value
            cur = cur[0]
        else:
            k = "us-east-1a" if key == "*" else key
            if last:
                cur[k] = value
            else:
                if not isinstance(cur.get(k), dict | list):
                    cur[k] = nxt_empty
                cur = cur[k]
    return doc


def snapshot(world: World) -> tuple[int, int, int, int]:
    vols = len(world.ec2.describe_volumes()["Volumes"])
    insts = sum(len(r["Instances"]) for r in world.ec2.describe_instances()["Reservations"])
    cmds = len(world.ssm.list_commands()["Commands"])
    objs = world.s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0)
    return vols, insts, cmds, objs


def _rejected(world: World, raw: Any, named: str) -> str | None:
    """None if the execution failed at ValidateInput naming `named` and created nothing."""
    before = snapshot(world)
    world.invocations = []
    ex = world.run(raw)
    if ex.status != "FAILED":
        return f"status {ex.status}"
    f = ex.failure()
    msg = json.loads(f["cause"]).get("errorMessage", "") if f["cause"].startswith("{") else f["cause"]
    if f["error"] != "InvalidInputError" or named not in msg:
        return f"{f['error']}: {msg[:200]}"
    if ex.entered() != ["ValidateInput", "InputRejected"] or world.invocations != ["ValidateInput"]:
        return f"ran {ex.entered()}"
    if snapshot(world) != before:
        return "created resources"
    return None


def _field(path: tuple) -> str:
    return ".".join(str(p) for p in path if p != "*")


def test_shell_metacharacters_in_every_string_field(world: World) -> None:
    """Every field with one value through the real ASL; every value through the validation step."""
    from cachewarm_controller.steps.planning import validate

    paths = string_paths(WarmInput.model_json_schema())
    assert ("warm_id",) in paths and ("destination", "endpoints", 0) in paths and len(paths) >= 10
    base = world.make_input()
    problems = []
    for path in paths:
        why = _rejected(world, put(base, path, HOSTILE[0]), path[0])
        if why:
            problems.append(f"{_field(path)}={HOSTILE[0]!r} (state machine): {why}")
        for v in HOSTILE[1:]:
            try:
                validate(put(base, path, v), world.deps)
                problems.append(f"{_field(path)}={v!r}: accepted by ValidateInput")
            except Exception as e:
                if type(e).__name__ != "InvalidInputError" or path[0] not in str(e):
                    problems.append(f"{_field(path)}={v!r}: {type(e).__name__}: {str(e)[:200]}")
    assert not problems, "\n".join(problems)


def test_metacharacters_in_map_keys(world: World) -> None:
    raw = world.make_input(
        populator={"launch_template_id": world.template_id, "subnet_ids": {"$(id)": "subnet-0123abcd"}}
    )
    assert _rejected(world, raw, "subnet_ids") is None


@pytest.mark.parametrize(
    ("what", "named"),
    [("warm_id of 100 KB", "warm_id"), ("501 endpoints", "endpoints"), ("deep nesting", "source")],
)
def test_oversized_input(world: World, what: str, named: str) -> None:
    base = world.make_input()
    if what.startswith("warm_id"):
        raw = {**base, "warm_id": "w" * 100_000}
    elif what.startswith("501"):
        raw = {**base, "destination": {"endpoints": [f"10.0.{i // 250}.{i % 250}:11211" for i in range(501)]}}
    else:
        deep: Any = "x"
        for _ in range(200):
            deep = {"a": deep}
        raw = {**base, "source": deep}
    assert _rejected(world, raw, named) is None
