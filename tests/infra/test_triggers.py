"""Template tests of the EventBridge rules and the teardown machine they start (one synth per
session, see conftest.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template
from cachewarm_infra.orchestration import asg_launch_pattern

from tests.infra.support import REPO, Synth, _as_list, _definition, _invoke_statements, _machine, _statements

# ---- triggers -----------------------------------------------------------------------------------

ACCOUNT_REF = {"Ref": "AWS::AccountId"}
EXAMPLE_ACCOUNT = "123456789012"


def _rules(synth: Synth) -> dict[str, dict[str, Any]]:
    return synth.resources("AWS::Events::Rule")


def render_transformer(target: dict[str, Any], event: dict[str, Any], lt_id: str) -> dict[str, Any]:
    """What EventBridge would send the state machine for `event` (simple `$.a.b` paths)."""
    tr = target["InputTransformer"]
    template = "".join(p if isinstance(p, str) else lt_id for p in tr["InputTemplate"]["Fn::Join"][1])
    for name, path in tr["InputPathsMap"].items():
        value: Any = event
        for part in path.removeprefix("$.").split("."):
            value = value[part]
        template = template.replace(f"<{name}>", json.dumps(value))
    return dict(json.loads(template))


def _rule(synth: Synth, prefix: str) -> dict[str, Any]:
    [rule] = [r for k, r in _rules(synth).items() if k.startswith(prefix)]
    return rule["Properties"]


def _matches(pattern: dict[str, Any], event: dict[str, Any]) -> bool:
    # moto's EventBridge pattern matcher (its TestEventPattern API returns no result).
    from moto.events.models import EventPattern

    # The rules match this account only ({"Ref": "AWS::AccountId"}): the examples' account stands in.
    text = json.dumps(pattern).replace(json.dumps(ACCOUNT_REF), json.dumps(EXAMPLE_ACCOUNT))
    return bool(EventPattern.load(text).matches_event(event))


def test_replica_deployed_rule_pattern_and_target(synth: Synth) -> None:
    # One rule per replica pair of the configuration (users-v1->users-v2; the asg: pair has none).
    p = _rule(synth, "CacheWarmerReplicaDeployedRule")
    assert p["EventPattern"] == {
        "source": ["cachewarm"],
        "detail-type": ["Replica Deployed"],
        "account": [{"Ref": "AWS::AccountId"}],
        "detail": {
            "warm_id": [{"exists": True}],
            "source": {"replica": ["users-v1"]},
            "destination": {"replica": ["users-v2"]},
        },
    }
    # On the stack's own bus, not the default one.
    [bus] = synth.resources("AWS::Events::EventBus")
    assert p["EventBusName"] == {"Ref": bus}
    [target] = p["Targets"]
    sm, _ = _machine(synth)
    assert target["Arn"] == {"Ref": sm}
    assert "DeadLetterConfig" in target and target["RetryPolicy"]["MaximumRetryAttempts"] == 4
    assert target["InputTransformer"]["InputPathsMap"] == {
        "detail-warm_id": "$.detail.warm_id",
        "detail-source-replica": "$.detail.source.replica",
        "detail-destination-replica": "$.detail.destination.replica",
    }


def test_documented_event_starts_a_valid_warm(synth: Synth) -> None:
    """infra/examples/replica-deployed-event.json matches the rule, and the transformed input passes
    the controller's own input validation."""
    event = json.loads((REPO / "infra" / "examples" / "replica-deployed-event.json").read_text())
    p = _rule(synth, "CacheWarmerReplicaDeployedRule")
    assert _matches(p["EventPattern"], event)
    assert not _matches(p["EventPattern"], {**event, "account": "999999999999"})
    for missing in ("warm_id", "source", "destination"):
        broken = {**event, "detail": {k: v for k, v in event["detail"].items() if k != missing}}
        assert not _matches(p["EventPattern"], broken), missing
    no_replica = {**event, "detail": {**event["detail"], "destination": {"endpoints": ["203.0.113.7:11211"]}}}
    assert not _matches(p["EventPattern"], no_replica)
    # Replicas the configuration does not pair: no rule on the bus matches, no execution starts.
    for source, destination in (("users-v1", "sessions"), ("sessions", "users-v2"), ("users-v2", "users-v1")):
        other = {**event, "detail": {**event["detail"], "source": {"replica": source}}}
        other["detail"]["destination"] = {"replica": destination}
        assert not any(_matches(r["Properties"]["EventPattern"], other) for r in _rules(synth).values())
    # Endpoints in an event never reach the execution: the controller finds the replica's nodes.
    with_endpoints = {
        **event,
        "detail": {**event["detail"], "destination": {"replica": "users-v2", "endpoints": ["203.0.113.7:1"]}},
    }
    for sent in (event, with_endpoints):
        rendered = render_transformer(p["Targets"][0], sent, "lt-0123456789abcdef0")
        assert rendered == {
            "warm_id": "users-v2-20261122",
            "source": {"replica": "users-v1"},
            "destination": {"replica": "users-v2"},
            "populator": {"launch_template_id": "lt-0123456789abcdef0"},
        }
    model = pytest.importorskip("cachewarm_controller.model")
    assert model.parse_input(rendered).warm_id == "users-v2-20261122"


def test_documented_console_input_is_valid() -> None:
    model = pytest.importorskip("cachewarm_controller.model")
    doc = json.loads((REPO / "infra" / "examples" / "start-input.json").read_text())
    assert model.parse_input(doc).destination.replica == "users-v2"


def test_documented_put_events_entry_is_the_event() -> None:
    [entry] = json.loads((REPO / "infra" / "examples" / "put-replica-deployed.json").read_text())
    event = json.loads((REPO / "infra" / "examples" / "replica-deployed-event.json").read_text())
    assert (entry["Source"], entry["DetailType"]) == (event["source"], event["detail-type"])
    assert entry["EventBusName"] != "default"
    assert json.loads(entry["Detail"]) == event["detail"]


def _start_execution_targets(synth: Synth) -> dict[str, set[str]]:
    """Role logical id -> the state machines its policies may start."""
    out: dict[str, set[str]] = {}
    for policy in synth.resources("AWS::IAM::Policy").values():
        for st in policy["Properties"]["PolicyDocument"]["Statement"]:
            if "states:StartExecution" in _as_list(st["Action"]):
                for role in policy["Properties"]["Roles"]:
                    out.setdefault(role["Ref"], set()).update(r["Ref"] for r in _as_list(st["Resource"]))
    return out


def _rule_roles(synth: Synth, prefix: str) -> set[str]:
    return {t["RoleArn"]["Fn::GetAtt"][0] for t in _rule(synth, prefix)["Targets"]}


def test_rule_role_may_only_start_this_machine(synth: Synth) -> None:
    sm, _ = _machine(synth)
    starts = _start_execution_targets(synth)
    [role] = _rule_roles(synth, "CacheWarmerReplicaDeployedRule") | _rule_roles(
        synth, "CacheWarmerAsgLaunchRule"
    )
    assert starts[role] == {sm}
    # Nothing else may start the warm machine; only the stopped-warm rule's role the teardown machine.
    teardown, _ = _machine(synth, "CacheWarmerTeardownStateMachine")
    [teardown_role] = _rule_roles(synth, "CacheWarmerStoppedWarmRule")
    assert starts == {role: {sm}, teardown_role: {teardown}}
    roles = synth.resources("AWS::IAM::Role")
    for r in (role, teardown_role):
        principal = roles[r]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
        assert principal == {"Service": "events.amazonaws.com"}
    stmts = [
        st for lid, st in _statements(synth) if teardown_role in json.dumps(synth.template["Resources"][lid])
    ]
    assert [st["Action"] for st in stmts] == ["states:StartExecution"]


# ---- the teardown machine for stopped / timed-out warms ------------------------------------------

TEARDOWN_ASL = REPO / "statemachine" / "teardown.asl.json"


def test_teardown_machine_deploys_its_asl_logged_traced(synth: Synth) -> None:
    _, sm = _machine(synth, "CacheWarmerTeardownStateMachine")
    props = sm["Properties"]
    assert json.loads(_definition(sm)) == json.loads(TEARDOWN_ASL.read_text())
    assert props["StateMachineType"] == "STANDARD"
    assert props["TracingConfiguration"] == {"Enabled": True}
    assert props["LoggingConfiguration"]["Level"] == "ALL"
    [dest] = props["LoggingConfiguration"]["Destinations"]
    log_group = dest["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    assert log_group.startswith("CacheWarmerTeardownStateMachineLogs")
    # The same substitution mechanism: exactly the placeholders its ASL uses, the Teardown function.
    subs = props["DefinitionSubstitutions"]
    assert set(subs) == {"TeardownFunctionArn", "WarmStateMachineArn"}
    # It serves this stack's warm machine: the Teardown Lambda refuses an execution of any other.
    assert subs["WarmStateMachineArn"] == {"Ref": _machine(synth)[0]}
    functions = synth.resources("AWS::Lambda::Function")
    fn = subs["TeardownFunctionArn"]["Fn::GetAtt"][0]
    assert functions[fn]["Properties"]["Handler"] == "cachewarm_controller.handlers.teardown"
    warm_subs = _machine(synth)[1]["Properties"]["DefinitionSubstitutions"]
    assert warm_subs["TeardownFunctionArn"] == subs["TeardownFunctionArn"]  # one function, two machines


def test_teardown_machine_may_invoke_only_the_teardown_function(synth: Synth) -> None:
    lid, sm = _machine(synth, "CacheWarmerTeardownStateMachine")
    st = _invoke_statements(synth)[lid]
    assert st["Action"] == "lambda:InvokeFunction"
    [resource] = _as_list(st["Resource"])
    fn = resource["Fn::GetAtt"][0]
    assert synth.resources("AWS::Lambda::Function")[fn]["Properties"]["Handler"].endswith(".teardown")
    # Its role can do nothing else but log and trace (what CDK adds for logging and X-Ray).
    role = sm["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    actions = {
        a
        for plid, policy in synth.resources("AWS::IAM::Policy").items()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for st in policy["Properties"]["PolicyDocument"]["Statement"]
        for a in _as_list(st["Action"])
    }
    assert {a.split(":")[0] for a in actions} <= {"lambda", "logs", "xray"}, actions
    assert {a for a in actions if a.startswith("lambda:")} == {"lambda:InvokeFunction"}


def test_stopped_warm_rule_pattern_and_target(synth: Synth) -> None:
    p = _rule(synth, "CacheWarmerStoppedWarmRule")
    sm, _ = _machine(synth)
    teardown, _ = _machine(synth, "CacheWarmerTeardownStateMachine")
    assert p["EventPattern"] == {
        "source": ["aws.states"],
        "detail-type": ["Step Functions Execution Status Change"],
        "account": [ACCOUNT_REF],
        "detail": {"status": ["ABORTED", "TIMED_OUT", "FAILED"], "stateMachineArn": [{"Ref": sm}]},
    }
    [target] = p["Targets"]
    assert target["Arn"] == {"Ref": teardown}
    # The whole event is the input (the Teardown Lambda reads detail.input).
    assert not {"Input", "InputPath", "InputTransformer"} & set(target)
    replica = _rule(synth, "CacheWarmerReplicaDeployedRule")["Targets"][0]
    assert target["DeadLetterConfig"] == replica["DeadLetterConfig"]
    assert target["RetryPolicy"] == replica["RetryPolicy"]


@pytest.mark.parametrize(
    ("status", "matches"),
    [("ABORTED", True), ("TIMED_OUT", True), ("FAILED", True), ("SUCCEEDED", False), ("RUNNING", False)],
)
def test_stopped_warm_rule_matches_only_stopped_warms(synth: Synth, status: str, matches: bool) -> None:
    p = _rule(synth, "CacheWarmerStoppedWarmRule")
    arn = "arn:aws:states:us-east-1:123456789012:stateMachine:cachewarm"
    pattern = json.loads(
        json.dumps(p["EventPattern"]).replace(
            json.dumps(p["EventPattern"]["detail"]["stateMachineArn"][0]), json.dumps(arn)
        )
    )
    event = {
        "version": "0",
        "account": EXAMPLE_ACCOUNT,
        "source": "aws.states",
        "detail-type": "Step Functions Execution Status Change",
        "detail": {"status": status, "stateMachineArn": arn, "input": '{"warm_id": "w-1"}'},
    }
    assert _matches(pattern, event) is matches
    other = {**event, "detail": {**event["detail"], "stateMachineArn": arn + "-other"}}
    assert not _matches(pattern, other)
    assert not _matches(pattern, {**event, "account": "999999999999"})


def test_warm_bus_refuses_other_accounts_and_names_its_starters(synth: Synth) -> None:
    [policy] = synth.resources("AWS::Events::EventBusPolicy").values()
    [bus] = synth.resources("AWS::Events::EventBus")
    statement = policy["Properties"]["Statement"]
    assert statement["Effect"] == "Deny" and statement["Action"] == "events:PutEvents"
    assert statement["Condition"] == {"StringNotEquals": {"aws:PrincipalAccount": ACCOUNT_REF}}
    assert synth.template["Outputs"]["WarmEventBusName"]["Value"] == {"Ref": bus}


def test_named_warm_starters_are_the_only_ones_the_bus_admits() -> None:
    from aws_cdk import App, Stack
    from cachewarm_infra.orchestration import build_event_bus

    stack = Stack(App(), "Bus")
    starter = "arn:aws:iam::123456789012:role/deploy-pipeline-*"
    build_event_bus(stack, [starter])
    policies = Template.from_stack(stack).find_resources("AWS::Events::EventBusPolicy")
    by_sid = {
        p["Properties"]["StatementId"].removeprefix("cdk-"): p["Properties"]["Statement"]
        for p in policies.values()
    }
    assert by_sid["OnlyTheNamedStarters"]["Effect"] == "Deny"
    assert by_sid["OnlyTheNamedStarters"]["Condition"] == {"ArnNotLike": {"aws:PrincipalArn": [starter]}}
    # The policy only refuses: no statement names a principal ARN (a wildcard is allowed in the
    # condition, never in a principal); the starters' own policies grant events:PutEvents.
    assert set(by_sid) == {"OnlyThisAccount", "OnlyTheNamedStarters"}
    assert all(st["Effect"] == "Deny" and st["Principal"] == "*" for st in by_sid.values())


def test_teardown_machine_arn_is_an_output(synth: Synth) -> None:
    teardown, _ = _machine(synth, "CacheWarmerTeardownStateMachine")
    assert synth.template["Outputs"]["TeardownStateMachineArn"]["Value"] == {"Ref": teardown}


def _stack_rules(**settings: Any) -> dict[str, Any]:
    """The EventBridge rules of a stack synthesized with these StackSettings (the session synth's
    files), without cdk-nag."""
    from aws_cdk import App
    from cachewarm_infra.stack import CacheWarmStack, StackSettings

    from tests.infra.support import MEMCACHED_SG, SOURCE_SG, asl_path, documents_dir, lambdas_dir

    base = {
        "asl_path": asl_path(),
        "lambdas_dir": lambdas_dir(),
        "ssm_documents_dir": documents_dir(),
        "destination_security_group_ids": (MEMCACHED_SG,),
        "source_security_group_ids": (SOURCE_SG,),
    }
    stack = CacheWarmStack(App(), "Pairs", settings=StackSettings(**base, **settings))
    return Template.from_stack(stack).find_resources("AWS::Events::Rule")


def test_every_replica_pair_has_its_own_rule_and_none_starts_nothing(artifacts: tuple[Any, Any]) -> None:
    dist = {"dumper_tarball": artifacts[0], "agent_bundle": artifacts[1]}
    rules = _stack_rules(**dist, replica_pairs=("a->b", "c->b", "a->asg:g"), asg_names=("g",))
    patterns = {
        (
            r["Properties"]["EventPattern"]["detail"]["source"]["replica"][0],
            r["Properties"]["EventPattern"]["detail"]["destination"]["replica"][0],
        )
        for k, r in rules.items()
        if k.startswith("ReplicaDeployedRule") or "ReplicaDeployedRule" in k
    }
    assert patterns == {("a", "b"), ("c", "b")}
    [asg] = [r for k, r in rules.items() if "AsgLaunchRule" in k]
    assert asg["Properties"]["EventPattern"]["detail"] == {"AutoScalingGroupName": ["g"]}
    # The default: no pair, no rule that starts a warm (only the stopped-warm rule remains).
    empty = _stack_rules(**dist)
    assert [k for k in empty if "StoppedWarmRule" not in k] == []
    # A group whose launches would have no configured source is refused at synth.
    with pytest.raises(ValueError, match=r"asgNames g: no replicaPairs entry SOURCE->asg:g"):
        _stack_rules(**dist, replica_pairs=("a->b",), asg_names=("g",))
    with pytest.raises(ValueError, match="SOURCE->DESTINATION"):
        _stack_rules(**dist, replica_pairs=("a-b",))


def test_the_controller_is_told_the_pairs_and_the_replicas_groups(synth: Synth) -> None:
    from tests.infra.support import MEMCACHED_SG, REPLICA_PAIRS, SOURCE_SG

    for fn in synth.resources("AWS::Lambda::Function").values():
        env = fn["Properties"]["Environment"]["Variables"]
        assert env["REPLICA_PAIRS"] == ",".join(REPLICA_PAIRS)
        # The destination replicas' groups, then the sources': a node found by its tag is in one.
        assert env["MEMCACHED_SECURITY_GROUP_IDS"] == f"{MEMCACHED_SG},{SOURCE_SG}"


def test_the_controller_may_describe_only_the_warm_machines_executions(synth: Synth) -> None:
    """The teardown machine checks the execution it is given (ended, of the warm machine) with
    DescribeExecution: allowed on the warm machine's executions and nothing else."""
    sm, _ = _machine(synth)
    found = [st for _, st in _statements(synth) if "states:DescribeExecution" in _as_list(st["Action"])]
    assert len(found) == 1 and _as_list(found[0]["Action"]) == ["states:DescribeExecution"]
    [resource] = _as_list(found[0]["Resource"])
    text = json.dumps(resource)
    assert (
        ":execution:" in text and json.dumps({"Fn::GetAtt": [sm, "Name"]}) in text and text.endswith(':*"]]}')
    )


def test_asg_example_rule(synth: Synth) -> None:
    [rule] = [r for k, r in _rules(synth).items() if k.startswith("CacheWarmerAsgLaunchRule")]
    event = json.loads((REPO / "infra" / "examples" / "asg-launch-event.json").read_text())
    assert _matches(rule["Properties"]["EventPattern"], event)
    other = {**event, "detail": {**event["detail"], "AutoScalingGroupName": "web-frontend"}}
    assert not _matches(rule["Properties"]["EventPattern"], other)
    assert rule["Properties"]["EventPattern"] == {
        "source": ["aws.autoscaling"],
        "detail-type": ["EC2 Instance Launch Successful"],
        "account": [ACCOUNT_REF],
        "detail": {"AutoScalingGroupName": ["memcached-replica-b"]},
    }
    assert not _matches(rule["Properties"]["EventPattern"], {**event, "account": "999999999999"})


def test_asg_pattern_helper_renders() -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_events as events

    stack = Stack(App(), "P")
    events.Rule(stack, "R", event_pattern=asg_launch_pattern(["a", "b"]))
    Template.from_stack(stack).has_resource_properties(
        "AWS::Events::Rule",
        {"EventPattern": Match.object_like({"detail": {"AutoScalingGroupName": ["a", "b"]}})},
    )


def test_trigger_dead_letter_queue_encrypted_tls(synth: Synth) -> None:
    [q] = synth.resources("AWS::SQS::Queue").values()
    assert "KmsMasterKeyId" in q["Properties"]
    [qp] = synth.resources("AWS::SQS::QueuePolicy").values()
    assert "aws:SecureTransport" in json.dumps(qp)


def test_replica_pairs_come_from_context() -> None:
    from aws_cdk import App
    from cachewarm_infra.stack import StackSettings

    s = StackSettings.from_context(App(context={"replicaPairs": "users-v1->users-v2, users-v1->asg:g"}).node)
    assert s.replica_pairs == ("users-v1->users-v2", "users-v1->asg:g")
    assert StackSettings.from_context(App().node).replica_pairs == ()
