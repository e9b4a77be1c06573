"""Template tests of the alarms, the dashboard and the log groups (one synth per session, see
conftest.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.infra.support import Synth, _machine, lambdas_dir

# ---- observability ------------------------------------------------------------------------------


# Alarms on another namespace's metrics (the teardown machine's; the trigger DLQ's in test_security.py).
OTHER_ALARMS = ("CacheWarmerStoppedWarmTeardownFailedAlarm", "CacheWarmerTriggerDeadLettersAlarm")


def test_alarms(synth: Synth) -> None:
    teardown, _ = _machine(synth, "CacheWarmerTeardownStateMachine")
    [stopped] = [
        a["Properties"]
        for lid, a in synth.resources("AWS::CloudWatch::Alarm").items()
        if lid.startswith("CacheWarmerStoppedWarmTeardownFailedAlarm")
    ]
    assert stopped["MetricName"] == "ExecutionsFailed"
    assert stopped["Dimensions"] == [{"Name": "StateMachineArn", "Value": {"Ref": teardown}}]
    assert len(synth.resources("AWS::CloudWatch::Alarm")) == 7
    alarms = {
        a["Properties"]["MetricName"]: a["Properties"]
        for lid, a in synth.resources("AWS::CloudWatch::Alarm").items()
        if not lid.startswith(
            ("CacheWarmerStoppedWarmTeardownFailedAlarm", "CacheWarmerTriggerDeadLettersAlarm")
        )
    }
    assert set(alarms) == {
        "ExecutionsFailed",
        "ExecutionsTimedOut",
        "ExecutionsAborted",
        "Revives",
        "TeardownLeftovers",
    }
    # The stale-heartbeat alarm watches what CheckProgress emits (Powertools: service + Step dimensions).
    assert alarms["Revives"]["Namespace"] == "CacheWarm"
    assert sorted(alarms["Revives"]["Dimensions"], key=lambda d: d["Name"]) == [
        {"Name": "Step", "Value": "check_progress"},
        {"Name": "service", "Value": "cachewarm"},
    ]
    for a in alarms.values():
        assert a["Threshold"] == 1
        assert a["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert a["TreatMissingData"] == "notBreaching"
        assert "runbook" in a["AlarmDescription"]


def test_alarm_metrics_are_emitted_by_the_handlers(synth: Synth) -> None:
    """Every CacheWarm metric the alarms and dashboard use is one a handler adds (same name)."""
    handlers = lambdas_dir() / "cachewarm_controller" / "handlers.py"
    if not handlers.exists():
        pytest.skip("handlers not written yet")
    emitted = set(re.findall(r'add_metric\(\s*name="(\w+)"', handlers.read_text()))
    [dash] = synth.resources("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dash["Properties"]["DashboardBody"])
    used = set(re.findall(r'\\"CacheWarm\\",\\"(\w+)\\"', body))
    used |= {
        a["Properties"]["MetricName"]
        for a in synth.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("Namespace") == "CacheWarm"
    }
    assert used, body[:500]
    assert used <= emitted, f"not emitted by any handler: {used - emitted}"


def test_dashboard_shows_rates_and_nodes(synth: Synth) -> None:
    [dash] = synth.resources("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dash["Properties"]["DashboardBody"])
    for needle in ("ItemsPopulated", "BytesPopulated", "NodesDone", "SourceNodes", "RATE(items)", "node_id"):
        assert needle in body, needle


def test_dashboard_plots_the_dumpers_pace(synth: Synth) -> None:
    """Issue 16: the sources' read rate and the dumps backing off, per warm; per node in the table."""
    titles = {w["properties"].get("title", ""): w for w in _widgets(synth)}
    rate = next(w for t, w in titles.items() if t.startswith("Items/s read from the sources"))
    backing = next(w for t, w in titles.items() if t.startswith("Dumps backing off"))
    assert "DumpItemsPerSecond" in json.dumps(rate)
    assert "DumpsBackingOff" in json.dumps(backing)
    [table] = [w for t, w in titles.items() if t.startswith("Per-node progress")]
    for field in ("dump_items_per_s", "dump_limit_items_per_s", "dump_backing_off"):
        assert field in table["properties"]["query"]
    # Issue 22: what the source's clients feel, per node (the guard's probes, DONE's harm report).
    for field in ("dump_probe_p99_us", "dump_probe_baseline_us", "dump_backed_off_ms"):
        assert field in table["properties"]["query"]


def _widgets(synth: Synth) -> list[dict[str, Any]]:
    """The dashboard body with every token replaced by a readable reference, parsed."""
    [dash] = synth.resources("AWS::CloudWatch::Dashboard").values()
    parts = dash["Properties"]["DashboardBody"]["Fn::Join"][1]
    text = "".join(
        p if isinstance(p, str) else "TOKEN" + json.dumps(p).replace('"', "'") + "TOKEN" for p in parts
    )
    return list(json.loads(text)["widgets"])


def test_every_widget_reads_what_the_stack_creates(synth: Synth) -> None:
    """Log widgets query log groups of this stack, for fields that are logged; metric widgets show
    metrics the handlers emit or the stack's own state machine's."""
    from cachewarm_infra.observability import NODE_PROGRESS_FIELDS, NODE_PROGRESS_MESSAGE

    groups = set(synth.resources("AWS::Logs::LogGroup"))
    sm, _ = _machine(synth)
    handlers = (lambdas_dir() / "cachewarm_controller" / "handlers.py").read_text()
    emitted = set(re.findall(r'add_metric\(\s*name="(\w+)"', handlers))
    logs_seen = 0
    for w in _widgets(synth):
        props = w.get("properties", {})
        if w["type"] == "log":
            logs_seen += 1
            refs = re.findall(r"'Ref': '(\w+)'", props["query"])
            assert refs and set(refs) <= groups, props["query"]
            if NODE_PROGRESS_MESSAGE in props["query"]:
                assert all(f in props["query"] for f in NODE_PROGRESS_FIELDS)
        for metric in props.get("metrics", []):
            for m in metric:
                # SEARCH over the per-warm series: emitted metrics, in the handlers' namespace.
                for ns, name in re.findall(r"\{(\w+),[^}]*\} MetricName=\"(\w+)\"", str(m)):
                    assert ns == "CacheWarm" and name in emitted, m
            names = [m for m in metric if isinstance(m, str) and not m.startswith("TOKEN")]
            if not names or "expression" in json.dumps(metric):
                continue
            namespace, name = names[0], names[1]
            if namespace == "CacheWarm":
                assert name in emitted, name
            else:
                assert namespace == "AWS/States" and sm in json.dumps(metric), metric
    assert logs_seen == 2


def test_check_progress_logs_the_fields_the_dashboard_reads() -> None:
    """The per-node widget's fields are what check_progress hands its log function."""
    from cachewarm_infra.observability import NODE_PROGRESS_FIELDS, NODE_PROGRESS_MESSAGE

    source = (lambdas_dir() / "cachewarm_controller" / "steps" / "progress.py").read_text()
    for field in NODE_PROGRESS_FIELDS:
        assert f'"{field}":' in source, field
    assert (
        f'logger.info("{NODE_PROGRESS_MESSAGE}"'
        in (lambdas_dir() / "cachewarm_controller" / "handlers.py").read_text()
    )


def test_dashboard_tells_warms_apart(synth: Synth) -> None:
    """Per-warm graphs are SEARCHes over the WarmId dimension the handlers add (one labelled line per
    warm); the "Warm id" variable sets WarmId in the one-warm widgets; alarms stay on the aggregate."""
    from cachewarm_controller.handlers import WARM_ID_DIMENSION
    from cachewarm_infra.observability import NO_WARM, WARM_ID

    assert WARM_ID == WARM_ID_DIMENSION == "WarmId"
    [dash] = synth.resources("AWS::CloudWatch::Dashboard").values()
    body = json.loads(
        "".join(
            p if isinstance(p, str) else "TOKEN" for p in dash["Properties"]["DashboardBody"]["Fn::Join"][1]
        )
    )
    [variable] = body["variables"]
    assert (variable["type"], variable["property"], variable["inputType"]) == ("property", "WarmId", "select")
    assert variable["search"].startswith("{CacheWarm,WarmId,") and variable["populateFrom"] == "WarmId"
    searches = [
        m[0]
        for w in body["widgets"]
        for m in w.get("properties", {}).get("metrics", [])
        if isinstance(m[0], dict) and "SEARCH(" in m[0].get("expression", "")
    ]
    names = {re.search(r'MetricName="(\w+)"', m["expression"]).group(1) for m in searches}  # type: ignore[union-attr]
    assert names == {
        "ItemsPopulated",
        "BytesPopulated",
        "NodesDone",
        "Revives",
        "DumpItemsPerSecond",
        "DumpsBackingOff",
    }
    assert all(m["label"] == "${PROP('Dim.WarmId')}" for m in searches)
    assert "RATE(SEARCH(" in json.dumps(searches)
    one_warm = [
        m
        for w in body["widgets"]
        for m in w.get("properties", {}).get("metrics", [])
        if isinstance(m[0], str) and "WarmId" in m
    ]
    assert len(one_warm) == 5 and all(m[m.index("WarmId") + 1] == NO_WARM for m in one_warm)
    for alarm in synth.resources("AWS::CloudWatch::Alarm").values():
        assert "WarmId" not in json.dumps(alarm["Properties"])
