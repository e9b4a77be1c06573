"""The ASL file and the SSM documents, statically: asl-validator, the shape rules moto cannot check
(it accepts dangling Next), and the documents' parameter patterns against hostile values."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest
from cachewarm_controller import handlers

from tests.controller.support import ASL_PATH, DOCS_DIR, REPO, TEARDOWN_ASL_PATH

VALIDATOR = REPO / "infra" / "node_modules" / ".bin" / "asl-validator"
ASL: dict[str, Any] = json.loads(ASL_PATH.read_text())
STATES: dict[str, dict[str, Any]] = ASL["States"]
TASKS = {n: s for n, s in STATES.items() if s["Type"] == "Task"}
DOCS = {n: json.loads((DOCS_DIR / f"{n}.json").read_text()) for n in ("dump-agent", "populate-agent")}


def asl_validator(path: Any) -> subprocess.CompletedProcess[str]:
    if not VALIDATOR.exists():
        pytest.fail(f"{VALIDATOR} missing: run `make deps-node`")
    return subprocess.run(
        [str(VALIDATOR), "--json-path", str(path)], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("path", [ASL_PATH, TEARDOWN_ASL_PATH], ids=lambda p: p.name)
def test_asl_validator_accepts_the_definition(path: Any) -> None:
    proc = asl_validator(path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_asl_validator_rejects_a_dangling_next(tmp_path: Any) -> None:
    """The validator really checks (moto would run this until it reached the bad state)."""
    bad = json.loads(json.dumps(ASL))
    bad["States"]["Plan"]["Next"] = "NoSuchState"
    path = tmp_path / "bad.asl.json"
    path.write_text(json.dumps(bad))
    proc = subprocess.run(
        [str(VALIDATOR), "--json-path", str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0


@pytest.mark.parametrize("path", [ASL_PATH, TEARDOWN_ASL_PATH], ids=lambda p: p.name)
def test_jsonpath_only_no_map_no_variables_no_nested_executions(path: Any) -> None:
    text = path.read_text()
    asl = json.loads(text)
    assert "QueryLanguage" not in asl
    for key in (
        "JSONata",
        "Assign",
        '"Arguments"',
        '"Output"',
        "states:startExecution",
        '"Map"',
        '"Parallel"',
    ):
        assert key not in text, key
    assert {s["Type"] for s in asl["States"].values()} <= {"Task", "Choice", "Wait", "Fail", "Succeed"}


def test_teardown_machine_runs_the_warm_machines_teardown_task() -> None:
    """Same Lambda, same retries and timeout; bad input is the one error not worth retrying."""
    states = json.loads(TEARDOWN_ASL_PATH.read_text())["States"]
    task = states["Teardown"]
    assert task["Resource"] == STATES["Teardown"]["Resource"] == "${TeardownFunctionArn}"
    assert task["ResultPath"] == "$.teardown"  # the event itself stays, for every pass
    assert task["TimeoutSeconds"] == STATES["Teardown"]["TimeoutSeconds"]
    assert task["Retry"][0] == {"ErrorEquals": ["InvalidInputError"], "MaxAttempts": 0}
    assert task["Retry"][1:] == STATES["Teardown"]["Retry"]
    assert task["Catch"] == STATES["Teardown"]["Catch"]
    # In-flight Lambdas of the stopped warm finish first (the construct checks it outlasts their timeout).
    first = states[json.loads(TEARDOWN_ASL_PATH.read_text())["StartAt"]]
    assert first["Type"] == "Wait" and first["Seconds"] > 300 and first["Next"] == "Teardown"
    assert states["WaitForTeardown"] == STATES["WaitForTeardown"] | {
        "Comment": states["WaitForTeardown"]["Comment"]
    }


def test_every_next_exists_and_every_state_is_reachable() -> None:
    def targets(state: dict[str, Any]) -> list[str]:
        out = [state[k] for k in ("Next", "Default") if k in state]
        out += [c["Next"] for c in state.get("Choices", [])]
        out += [c["Next"] for c in state.get("Catch", [])]
        return out

    for name, state in STATES.items():
        for t in targets(state):
            assert t in STATES, f"{name} -> {t}"
    seen, todo = set(), [ASL["StartAt"]]
    while todo:
        cur = todo.pop()
        if cur not in seen:
            seen.add(cur)
            todo.extend(targets(STATES[cur]))
    assert seen == set(STATES)


def test_every_task_catches_into_teardown_and_retries_transient_errors() -> None:
    for name, task in TASKS.items():
        errors = {e for r in task["Retry"] for e in r["ErrorEquals"]}
        assert {"TransientError", "Lambda.TooManyRequestsException", "Lambda.ServiceException"} <= errors, (
            name
        )
        catch = task.get("Catch", [])
        assert catch and catch[0]["ErrorEquals"] == ["States.ALL"], name
        if name == "ValidateInput":
            assert catch[0]["Next"] == "InputRejected"  # nothing created yet: no teardown
        elif name == "ClaimWarmId":
            # Nothing created yet, and the warm id may be another execution's: no teardown.
            assert catch[0]["Next"] == "ClaimFailed"
        elif name == "Teardown":
            assert catch[0]["Next"] == "TeardownFailed"
        else:
            assert catch[0]["Next"] == "Teardown" and catch[0]["ResultPath"] == "$.error", name
    # The teardown path ends in Fail with the original cause when there was an error.
    outcome = STATES["WarmOutcome"]["Choices"][0]
    assert outcome == {"Variable": "$.error", "IsPresent": True, "Next": "WarmFailed"}
    assert STATES["WarmFailed"]["CausePath"] == "$.error.Cause"


def test_every_lambda_resource_has_a_handler() -> None:
    for name, task in TASKS.items():
        m = re.fullmatch(r"\$\{(\w+)FunctionArn\}", task["Resource"])
        assert m, task["Resource"]
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1)).lower()
        assert callable(getattr(handlers, snake, None)), f"{name}: no handlers.{snake}"


def test_polling_loop_is_replica_level() -> None:
    """Wait -> CheckProgress -> Choice: ~9 history events per poll, whatever the node count."""
    assert STATES["WaitForProgress"]["Next"] == "CheckProgress"
    assert STATES["CheckProgress"]["Next"] == "AllNodesDone?"
    assert STATES["AllNodesDone?"]["Default"] == "WaitForProgress"


def test_the_claim_comes_first_and_only_the_owner_goes_on() -> None:
    """Nothing is written before ClaimWarmId; a duplicate ends in a Succeed that touched nothing."""
    assert ASL["StartAt"] == "ValidateInput" and STATES["ValidateInput"]["Next"] == "ClaimWarmId"
    assert STATES["ValidateInput"]["Parameters"] == {"input.$": "$", "execution_arn.$": "$$.Execution.Id"}
    choice = STATES["WarmIdClaimed?"]
    assert choice["Choices"] == [
        {"Variable": "$.claim.owned", "BooleanEquals": True, "Next": "SurveyReplicas"}
    ]
    assert STATES[choice["Default"]]["Type"] == "Succeed"


def test_no_task_waits_inside_a_lambda() -> None:
    """Every looping Task is followed by a Choice on its own `ready` (or done/complete) and loops back
    to itself, through a Wait on its own `wait_seconds` unless it never needs to wait."""
    loops = {
        "SurveyReplicas": "survey",
        "CreateVolumes": "volumes",
        "LaunchPopulators": "populators",
        "AttachVolumes": "attach",
        "InstallAgents": "install",
        "Verify": "verify",
    }
    for task, key in loops.items():
        assert TASKS[task]["ResultPath"] == f"$.{key}"
        choice = STATES[TASKS[task]["Next"]]
        assert choice["Choices"][0]["Variable"] == f"$.{key}.ready", task
        wait = STATES[choice["Default"]]
        assert wait == {**wait, "Type": "Wait", "SecondsPath": f"$.{key}.wait_seconds", "Next": task}
    started = STATES[TASKS["StartAgents"]["Next"]]
    assert started["Choices"][0]["Variable"] == "$.agents.ready" and started["Default"] == "StartAgents"


# ---- SSM documents ----------------------------------------------------------------------------------

HOSTILE = [
    "; rm -rf /",
    "$(reboot)",
    "`id`",
    "a b",
    "x' || true '",
    "a\nb",
    "../../etc/passwd;",
    "",
    "&&",
    "|",
    "${IFS}",
]


@pytest.mark.parametrize("name", sorted(DOCS))
def test_document_shape(name: str) -> None:
    doc = DOCS[name]
    assert doc["schemaVersion"] == "2.2"
    (step,) = doc["mainSteps"]
    assert step["action"] == "aws:runShellScript"
    script = "\n".join(step["inputs"]["runCommand"])
    used = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", script + step["inputs"]["timeoutSeconds"]))
    assert used == set(doc["parameters"]), "declared and used parameters differ"
    role = name.split("-")[0]
    assert f"cachewarm agent {role} " in script
    for pname, p in doc["parameters"].items():
        pat = p["allowedPattern"]
        assert pat.startswith("^") and pat.endswith("$"), pname
        if "default" in p:
            assert re.fullmatch(pat, p["default"]), pname


@pytest.mark.parametrize("name", sorted(DOCS))
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_never_pass_a_pattern(name: str, value: str) -> None:
    for pname, p in DOCS[name]["parameters"].items():
        assert not re.fullmatch(p["allowedPattern"], value), (pname, value)


def test_patterns_admit_realistic_values() -> None:
    params = DOCS["populate-agent"]["parameters"] | DOCS["dump-agent"]["parameters"]
    good = {
        "warmId": "prod-main-2026-11-22",
        "nodeId": "i-0123456789abcdef0",
        "device": "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0",
        "mount": "/mnt/cachewarm/prod-main-2026-11-22",
        "statusBucket": "cachewarm-status-123456789012-us-east-1",
        "statusPrefix": "warms",
        "memcached": "127.0.0.1:11211",
        "threads": "8",
        "to": "10.0.1.1:11211,10.0.1.2:11211,cache-3.internal:11211",
        "mode": "add",
        "maxItemsPerSecond": "250000",
        "executionTimeout": "172800",
    }
    for k, v in good.items():
        assert re.fullmatch(params[k]["allowedPattern"], v), k
    assert not re.fullmatch(params["executionTimeout"]["allowedPattern"], "172801")


def test_input_schema_file_is_current() -> None:
    """statemachine/input.schema.json is generated from the pydantic model (regenerate with
    `python3 -c 'import json; from cachewarm_controller.model import WarmInput;
    print(json.dumps(WarmInput.model_json_schema(), indent=2))' > statemachine/input.schema.json`)."""
    from cachewarm_controller.model import WarmInput

    on_disk = json.loads((REPO / "statemachine" / "input.schema.json").read_text())
    assert on_disk == WarmInput.model_json_schema()


def test_every_input_field_has_a_description() -> None:
    """Every property of statemachine/input.schema.json, nested ones too, says what it is (the console
    and `cachewarm start` users read the schema)."""
    schema = json.loads((REPO / "statemachine" / "input.schema.json").read_text())
    missing: list[str] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            for name, prop in node.get("properties", {}).items():
                if not str(prop.get("description", "")).strip():
                    missing.append(f"{path}.{name}")
            for key, child in node.items():
                walk(child, f"{path}/{key}")
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{path}/{i}")

    walk(schema, "")
    assert schema["$defs"] and not missing, missing
