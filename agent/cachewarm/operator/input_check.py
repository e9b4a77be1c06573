"""`cachewarm start` checks its input offline, before any AWS call, against the execution input's JSON
Schema (`statemachine/input.schema.json`, generated from the controller's pydantic model; the wheel
carries a copy, `input.schema.json` beside this file, that tests/operator_cli keeps identical), with
the `jsonschema` package. Each problem names its place in the document.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

SCHEMA_NAME = "input.schema.json"


def input_schema() -> dict[str, Any]:
    """The execution input's schema as the wheel carries it."""
    return dict(json.loads(resources.files("cachewarm.operator").joinpath(SCHEMA_NAME).read_text()))


def _where(path: Iterable[str | int]) -> str:
    out = "input"
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def problems(doc: object, schema: dict[str, Any] | None = None) -> list[str]:
    """Every place `doc` breaks the schema, as `path: what` (empty: valid)."""
    validator = Draft202012Validator(schema if schema is not None else input_schema())
    out: list[str] = []
    for error in sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path]):
        # An optional field is `anyOf: [X, null]`: name what X wants, not "not valid under any of".
        shown: ValidationError = best_match(error.context) if error.context else error  # type: ignore[assignment]
        out.append(f"{_where(shown.absolute_path)}: {shown.message}")
    return out
