"""Read the state machine's ASL file and find what the stack must provide for it.

The ASL (`statemachine/warm.asl.json`) is the single source of truth: every `${<PascalName>FunctionArn}`
placeholder becomes one Lambda function whose handler is `cachewarm_controller.handlers.<snake_name>`,
so adding a Task state never needs an infra change.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

# `${CheckProgressFunctionArn}` -> "CheckProgress"
_FUNCTION_ARN = re.compile(r"\$\{([A-Z][A-Za-z0-9]*)FunctionArn\}")
# Any `${Name}` placeholder the ASL uses (function ARNs included).
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z][A-Za-z0-9]*)\}")
# Service integrations the construct knows how to grant; anything else must be added on purpose.
_KNOWN_INTEGRATIONS = ("arn:aws:states:::lambda:invoke",)
HANDLER_MODULE = "cachewarm_controller.handlers"


@dataclass(frozen=True)
class AslTask:
    """One Lambda the ASL refers to through `${<pascal>FunctionArn}`."""

    pascal: str

    @property
    def placeholder(self) -> str:
        return f"{self.pascal}FunctionArn"

    @property
    def snake(self) -> str:
        # CheckProgress -> check_progress, ValidateInput -> validate_input, SSMStart -> ssm_start
        s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", self.pascal)
        s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
        return s.lower()

    @property
    def handler(self) -> str:
        return f"{HANDLER_MODULE}.{self.snake}"


def load_asl(path: Path) -> dict[str, object]:
    """Parse the ASL file; a clear error if it is missing or not JSON."""
    if not path.is_file():
        raise FileNotFoundError(f"state machine definition not found: {path}")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(doc, dict) or "States" not in doc or "StartAt" not in doc:
        raise ValueError(f"{path}: not an ASL document (needs StartAt and States)")
    return doc


def discover_function_substitutions(text: str) -> list[AslTask]:
    """Every distinct `${<Pascal>FunctionArn}` in the ASL text, sorted by name."""
    return [AslTask(p) for p in sorted(set(_FUNCTION_ARN.findall(text)))]


def placeholders(text: str) -> set[str]:
    """Every `${Name}` placeholder in the ASL text."""
    return set(_PLACEHOLDER.findall(text))


def service_integrations(doc: object) -> set[str]:
    """The `arn:aws:states:::…` Resources of Task states (direct Lambda ARNs are not integrations)."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            res = node.get("Resource")
            if node.get("Type") == "Task" and isinstance(res, str) and res.startswith("arn:aws:states:::"):
                found.add(res)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc)
    return found


def unsupported_integrations(doc: object) -> list[str]:
    """Integrations whose IAM the construct does not grant (adding one must be a deliberate change)."""
    return sorted(r for r in service_integrations(doc) if not r.startswith(_KNOWN_INTEGRATIONS))


def read_asl(path: Path) -> str:
    """The ASL file's text, after checking it parses and uses only integrations the construct grants."""
    doc = load_asl(path)
    unsupported = unsupported_integrations(doc)
    if unsupported:
        raise ValueError(
            f"{path}: service integrations {unsupported} need IAM grants the CacheWarmer "
            "construct does not make; add them to infra/cachewarm_infra/orchestration.py"
        )
    return path.read_text(encoding="utf-8")


def check_teardown_grace(path: Path, text: str, lambda_timeout_s: float) -> None:
    """The teardown machine first waits out any Lambda the stopped execution still runs (a stop does
    not stop an invoked Lambda, which could create resources after the first pass found none): that
    wait must outlast the controller Lambdas' timeout."""
    doc = json.loads(text)
    first = doc["States"][doc["StartAt"]]
    waits = first.get("Seconds") if first.get("Type") == "Wait" else None
    if not isinstance(waits, int) or waits <= lambda_timeout_s:
        raise ValueError(
            f"{path}: the first state must be a Wait longer than the Lambda timeout "
            f"({lambda_timeout_s} s) so in-flight steps of a stopped warm finish first; "
            f"found {doc['StartAt']} with Seconds={waits}"
        )
