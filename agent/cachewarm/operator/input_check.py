"""`cachewarm start` checks its input offline, before any AWS call, against the execution input's JSON
Schema (`statemachine/input.schema.json`, generated from the controller's pydantic model; the wheel
carries a copy, `input.schema.json` beside this file, that tests/operator_cli keeps identical).

The checker covers the JSON Schema keywords pydantic writes (type, properties, required,
additionalProperties, patternProperties, anyOf, $ref into $defs, enum, pattern, minimum, maximum,
exclusiveMinimum, minItems, maxItems, items); tests/operator_cli compares it with the `jsonschema`
package on valid and broken inputs. Each problem names its place in the document.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

SCHEMA_NAME = "input.schema.json"
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def input_schema() -> dict[str, Any]:
    """The execution input's schema as the wheel carries it."""
    return dict(json.loads(resources.files("cachewarm.operator").joinpath(SCHEMA_NAME).read_text()))


def problems(doc: object, schema: dict[str, Any] | None = None) -> list[str]:
    """Every place `doc` breaks the schema, as `path: what` (empty: valid)."""
    root = schema if schema is not None else input_schema()
    out: list[str] = []
    _check(doc, root, root, "input", out)
    return out


def _is(value: object, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False  # JSON's true is not a number
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES[kind])


def _check(v: object, s: dict[str, Any], root: dict[str, Any], at: str, out: list[str]) -> None:
    if "$ref" in s:
        name = str(s["$ref"]).rsplit("/", 1)[-1]
        _check(v, root["$defs"][name], root, at, out)
        return
    if "anyOf" in s:
        tries: list[list[str]] = []
        for alt in s["anyOf"]:
            found: list[str] = []
            _check(v, alt, root, at, found)
            if not found:
                return
            tries.append(found)
        # The alternative that got furthest (null is always one of pydantic's): its problems.
        out.extend(min(tries, key=len) if len(tries) > 1 else tries[0])
        return
    kind = s.get("type")
    if kind is not None and not _is(v, kind):
        out.append(f"{at}: {json.dumps(v)[:60]} is not {'an' if kind[0] in 'aeiou' else 'a'} {kind}")
        return
    if "enum" in s and v not in s["enum"]:
        out.append(f"{at}: {json.dumps(v)[:60]} is not one of {', '.join(json.dumps(e) for e in s['enum'])}")
    if isinstance(v, str) and "pattern" in s and not re.search(s["pattern"], v):
        out.append(f"{at}: {json.dumps(v)[:60]} does not match {s['pattern']}")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if "minimum" in s and v < s["minimum"]:
            out.append(f"{at}: {v} is less than {s['minimum']}")
        if "exclusiveMinimum" in s and v <= s["exclusiveMinimum"]:
            out.append(f"{at}: {v} must be more than {s['exclusiveMinimum']}")
        if "maximum" in s and v > s["maximum"]:
            out.append(f"{at}: {v} is more than {s['maximum']}")
    if isinstance(v, list):
        if "minItems" in s and len(v) < s["minItems"]:
            out.append(f"{at}: {len(v)} items, at least {s['minItems']} needed")
        if "maxItems" in s and len(v) > s["maxItems"]:
            out.append(f"{at}: {len(v)} items, at most {s['maxItems']} allowed")
        if "items" in s:
            for i, item in enumerate(v):
                _check(item, s["items"], root, f"{at}[{i}]", out)
    if isinstance(v, dict):
        props: dict[str, Any] = s.get("properties", {})
        for name in s.get("required", []):
            if name not in v:
                out.append(f"{at}: {name} is required")
        pattern_props: dict[str, Any] = s.get("patternProperties", {})
        for k, item in v.items():
            if k in props:
                _check(item, props[k], root, f"{at}.{k}", out)
                continue
            matched = [ps for p, ps in pattern_props.items() if re.search(p, k)]
            for ps in matched:
                _check(item, ps, root, f"{at}.{k}", out)
            extra = s.get("additionalProperties", True)
            if not matched and extra is False:
                out.append(f"{at}: unknown field {k!r} (allowed: {', '.join(props)})")
            elif not matched and isinstance(extra, dict):
                _check(item, extra, root, f"{at}.{k}", out)
