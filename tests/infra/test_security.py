"""Issue 26 ("Let no one in where they don't belong"): template tests that fail if a closed door
opens again. One synth per session (conftest.py); docs/security.md is the threat model they guard."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
from aws_cdk.assertions import Template

from tests.infra.support import MEMCACHED_SG, SOURCE_SG, Synth, _as_list, _controller_statements, _statements

# ---- High 1: where a populator may send data ---------------------------------------------------------


def test_populators_reach_only_memcached_of_the_replicas_and_https(synth: Synth) -> None:
    [(sg_id, sg)] = synth.resources("AWS::EC2::SecurityGroup").items()
    egress = sg["Properties"]["SecurityGroupEgress"]
    assert [(e["CidrIp"], e["FromPort"], e["ToPort"], e["IpProtocol"]) for e in egress] == [
        ("0.0.0.0/0", 443, 443, "tcp")
    ]
    # The one other way out: memcached's port, to the named destination and source groups only.
    rules = sorted(
        synth.resources("AWS::EC2::SecurityGroupEgress").values(),
        key=lambda r: r["Properties"]["DestinationSecurityGroupId"],
    )
    assert [r["Properties"] for r in rules] == [
        {
            "Description": "memcached of the replicas (populate, verify)",
            "DestinationSecurityGroupId": group,
            "FromPort": 11211,
            "GroupId": {"Fn::GetAtt": [sg_id, "GroupId"]},
            "IpProtocol": "tcp",
            "ToPort": 11211,
        }
        for group in (MEMCACHED_SG, SOURCE_SG)
    ]


def test_without_named_groups_there_is_no_memcached_egress_at_all() -> None:
    """No fallback to the private address ranges: a synth without groups fails, naming the keys."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_ec2 as ec2
    from cachewarm_infra.compute import _limit_egress

    stack = Stack(App(), "Sg")
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-1", availability_zones=["a"])
    sg = ec2.SecurityGroup(stack, "G", vpc=vpc, allow_all_outbound=False)
    with pytest.raises(ValueError, match="destinationSecurityGroupIds"):
        _limit_egress(sg, (), 11211)
    # One group for sources and destinations: one rule.
    group = ec2.SecurityGroup.from_security_group_id(stack, "R", "sg-0123456789abcdef0")
    _limit_egress(sg, (group, group), 11211)
    assert len(Template.from_stack(stack).find_resources("AWS::EC2::SecurityGroupEgress")) == 1


def test_the_controller_is_told_its_vpc(synth: Synth) -> None:
    for fn in synth.resources("AWS::Lambda::Function").values():
        assert fn["Properties"]["Environment"]["Variables"]["VPC_ID"] == {"Ref": "VpcId"}


def test_every_rule_matches_this_account_only(synth: Synth) -> None:
    for lid, rule in synth.resources("AWS::Events::Rule").items():
        assert rule["Properties"]["EventPattern"]["account"] == [{"Ref": "AWS::AccountId"}], lid


# ---- High 2: who may write what in the status bucket -----------------------------------------------

NODE_A, NODE_B = "i-0aaaaaaaaaaaaaaaa", "i-0bbbbbbbbbbbbbbbb"


def _arn(instance: str) -> str:
    return f"arn:aws:ec2:us-east-1:123456789012:instance/{instance}"


@dataclass
class Bucket:
    """The status bucket's name and policy, and the agent's and controller's statements, resolved."""

    name: str
    bucket_policy: list[dict[str, Any]]
    agent: list[dict[str, Any]]
    controller: list[dict[str, Any]]
    controller_arn: str

    def may(self, who: str, action: str, key: str, instance: str | None = None, extra: Any = ()) -> bool:
        from tests.infra.policy_eval import Request, decide

        identity = (self.controller if who == "controller" else self.agent) + list(extra)
        principal = self.controller_arn if who == "controller" else "arn:aws:iam::123456789012:role/node"
        ctx = {"aws:SecureTransport": "true", "s3:ResourceAccount": "123456789012"}
        if instance is not None:
            ctx["ec2:SourceInstanceARN"] = _arn(instance)
        req = Request(action, f"arn:aws:s3:::{self.name}/{key}", principal, ctx)
        if decide(self.bucket_policy, req) == "Deny":
            return False
        return decide(identity, req) == "Allow"


@pytest.fixture(scope="module")
def bucket(synth: Synth) -> Bucket:
    from tests.infra.policy_eval import resolve

    t = synth.template
    [lid] = [k for k in synth.resources("AWS::S3::Bucket") if k.startswith("CacheWarmerStatusBucket")]
    [policy] = [
        p
        for p in synth.resources("AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": lid}
    ]
    [agent] = [
        p
        for k, p in synth.resources("AWS::IAM::ManagedPolicy").items()
        if k.startswith("CacheWarmerAgentPolicy")
    ]
    controller = _controller_statements(synth)
    [role] = [k for k in synth.resources("AWS::IAM::Role") if k.startswith("CacheWarmerControllerRole")]
    return Bucket(
        name=f"ref-{lid}".lower(),
        bucket_policy=resolve(policy["Properties"]["PolicyDocument"]["Statement"], t),
        agent=resolve(agent["Properties"]["PolicyDocument"]["Statement"], t),
        controller=resolve(list(controller.values()), t),
        controller_arn=f"arn:aws:iam::123456789012:role/{role}",
    )


def test_an_agent_writes_and_reads_only_its_own_status_objects(bucket: Bucket) -> None:
    own = f"warms/w-1/dump/{NODE_A}/{_arn(NODE_A)}.json"
    assert bucket.may("agent", "s3:PutObject", own, NODE_A)
    assert bucket.may("agent", "s3:GetObject", own, NODE_A)
    # Another node's object, whatever it claims to be.
    theirs = f"warms/w-1/dump/{NODE_B}/{_arn(NODE_B)}.json"
    assert not bucket.may("agent", "s3:PutObject", theirs, NODE_A)
    assert not bucket.may("agent", "s3:GetObject", theirs, NODE_A)
    assert not bucket.may("agent", "s3:PutObject", f"warms/w-1/dump/{NODE_B}.json", NODE_A)
    # Credentials that are no instance's (the variable is absent): nothing.
    assert not bucket.may("agent", "s3:PutObject", own)
    assert not bucket.may("agent", "s3:DeleteObject", own, NODE_A)


@pytest.mark.parametrize(
    "key",
    [
        "_controller/warms/w-1/plan.json",
        "_controller/warms/_claims/w-1.json",
        "_controller/warms/w-1/teardown.json",
    ],
)
def test_agent_credentials_cannot_forge_or_read_controller_state(bucket: Bucket, key: str) -> None:
    for action in ("s3:PutObject", "s3:DeleteObject", "s3:GetObject"):
        assert not bucket.may("agent", action, key, NODE_A), action
    # Not even with a key ending in its own ARN, nor when the node's role grants s3:* everywhere
    # (the source nodes' roles are the platform's): the bucket policy denies the write.
    assert not bucket.may("agent", "s3:PutObject", f"_controller/warms/w-1/{_arn(NODE_A)}.json", NODE_A)
    broad = [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]
    assert not bucket.may("agent", "s3:PutObject", key, NODE_A, extra=broad)
    assert not bucket.may("agent", "s3:DeleteObject", key, NODE_A, extra=broad)
    assert bucket.may("controller", "s3:PutObject", key)
    assert bucket.may("controller", "s3:DeleteObject", key)


def test_the_controller_reads_the_agents_objects_and_deletes_them_at_teardown(bucket: Bucket) -> None:
    key = f"warms/w-1/populate/{NODE_A}/{_arn(NODE_B)}.json"
    for action in ("s3:GetObject", "s3:DeleteObject"):
        assert bucket.may("controller", action, key)


def test_the_status_bucket_is_versioned(synth: Synth) -> None:
    [bucket] = [
        b for k, b in synth.resources("AWS::S3::Bucket").items() if k.startswith("CacheWarmerStatusBucket")
    ]
    assert bucket["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    [rule] = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    assert rule["NoncurrentVersionExpiration"]["NoncurrentDays"] == 30


# ---- acceptance: no unconditioned "*" on a mutating action --------------------------------------------

# Mutating actions that IAM cannot scope to a resource and that we accept on "*" unconditioned:
# cancelling can only stop a command, and the controller can start commands only of its own documents
# on tagged instances.
UNSCOPED_MUTATIONS_ACCEPTED = {"ssm:CancelCommand": "stops commands only; starts nothing"}
_READ_ONLY = re.compile(r"^(ec2|ssm|s3):(Describe|List|Get)\w*$")


def test_no_mutating_ec2_ssm_s3_action_on_star_without_a_condition(synth: Synth) -> None:
    for lid, st in _statements(synth):
        if st["Effect"] != "Allow" or "*" not in _as_list(st["Resource"]) or "Condition" in st:
            continue
        for action in _as_list(st["Action"]):
            if action.split(":")[0] in ("ec2", "ssm", "s3") and not _READ_ONLY.match(action):
                assert action in UNSCOPED_MUTATIONS_ACCEPTED, f"{lid}: {action} on Resource * unconditioned"


# ---- Medium 7: the safety nets can fire --------------------------------------------------------------


def _role_statements(synth: Synth, role_lid: str) -> list[dict[str, Any]]:
    from tests.infra.policy_eval import resolve

    out: list[dict[str, Any]] = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": role_lid} in policy["Properties"].get("Roles", []):
            out.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return list(resolve(out, synth.template))


def test_every_controller_function_can_write_its_own_log_group(synth: Synth) -> None:
    """Without it the Lambdas log nothing and their EMF metrics (Revives, TeardownLeftovers, which
    alarms watch) never arrive."""
    from tests.infra.policy_eval import ACCOUNT, REGION, Request, decide

    functions = synth.resources("AWS::Lambda::Function")
    assert functions
    for lid, fn in functions.items():
        role = fn["Properties"]["Role"]["Fn::GetAtt"][0]
        group = fn["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        statements = _role_statements(synth, role)
        log_group = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:ref-{group}".lower()
        stream = f"{log_group}:log-stream:2026/11/25/[$LATEST]abc"
        for action in ("logs:CreateLogStream", "logs:PutLogEvents"):
            req = Request(action, stream, f"arn:aws:iam::{ACCOUNT}:role/{role}")
            assert decide(statements, req) == "Allow", f"{lid}: {action} on its log group"


def test_the_dlq_key_admits_eventbridge_and_the_alarm_topic_cloudwatch(synth: Synth) -> None:
    [dlq] = synth.resources("AWS::SQS::Queue").values()
    key_lid = dlq["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    key = synth.template["Resources"][key_lid]
    admitted = {
        (p, a)
        for st in key["Properties"]["KeyPolicy"]["Statement"]
        if st["Effect"] == "Allow"
        for p in _as_list(st["Principal"].get("Service", []))
        if isinstance(p, str)
        for a in _as_list(st["Action"])
    }
    for service in ("events.amazonaws.com", "cloudwatch.amazonaws.com"):
        assert {(service, "kms:Decrypt"), (service, "kms:GenerateDataKey")} <= admitted, service
    [topic] = synth.resources("AWS::SNS::Topic").values()
    assert topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0] == key_lid


def test_the_keys_service_grants_serve_this_accounts_rules_alarms_and_log_groups_only(synth: Synth) -> None:
    """Key policy (Low): EventBridge and CloudWatch may use the key only on behalf of a rule or an
    alarm of this account and region (aws:SourceAccount, aws:SourceArn), CloudWatch Logs only for
    this account's log groups (the encryption context)."""
    from tests.infra.policy_eval import ACCOUNT, REGION, Request, decide, resolve

    [key] = synth.resources("AWS::KMS::Key").values()
    statements = resolve(key["Properties"]["KeyPolicy"]["Statement"], synth.template)

    def may(service: str, action: str, **context: str) -> bool:
        mine = [st for st in statements if service in _as_list(st["Principal"].get("Service", []))]
        return decide(mine, Request(action, "*", service, context)) == "Allow"

    other = "210987654321"
    for service, source in (
        ("events.amazonaws.com", f"arn:aws:events:{REGION}:{{account}}:rule/WarmEventBus/ReplicaDeployed"),
        ("cloudwatch.amazonaws.com", f"arn:aws:cloudwatch:{REGION}:{{account}}:alarm:Executions-failed"),
    ):
        ours = {"aws:SourceAccount": ACCOUNT, "aws:SourceArn": source.format(account=ACCOUNT)}
        theirs = {"aws:SourceAccount": other, "aws:SourceArn": source.format(account=other)}
        for action in ("kms:Decrypt", "kms:GenerateDataKey"):
            assert may(service, action, **ours), (service, action)
            assert not may(service, action, **theirs), (service, action)
            assert not may(service, action), (service, action)  # no source: no use
    logs = f"logs.{REGION}.amazonaws.com"
    group = f"arn:aws:logs:{REGION}:{{account}}:log-group:/aws/vendedlogs/x"
    assert may(
        logs, "kms:GenerateDataKey", **{"kms:EncryptionContext:aws:logs:arn": group.format(account=ACCOUNT)}
    )
    assert not may(
        logs, "kms:GenerateDataKey", **{"kms:EncryptionContext:aws:logs:arn": group.format(account=other)}
    )


def test_every_alarm_has_an_action(synth: Synth) -> None:
    [topic] = synth.resources("AWS::SNS::Topic")
    alarms = synth.resources("AWS::CloudWatch::Alarm")
    assert alarms
    for lid, alarm in alarms.items():
        assert alarm["Properties"].get("AlarmActions") == [{"Ref": topic}], lid
    assert synth.template["Outputs"]["AlarmTopicArn"]["Value"] == {"Ref": topic}


def test_the_trigger_dlq_depth_alarms(synth: Synth) -> None:
    [dlq] = synth.resources("AWS::SQS::Queue")
    [alarm] = [a for k, a in synth.resources("AWS::CloudWatch::Alarm").items() if "TriggerDeadLetters" in k]
    p = alarm["Properties"]
    assert (p["Namespace"], p["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert p["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq, "QueueName"]}}]
    assert (p["Threshold"], p["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")


# ---- Medium 3: least privilege that does not trust one shared tag alone ---------------------------------


def _ec2_request(action: str, resource: str, tags: dict[str, str], **ctx: str) -> Any:
    from tests.infra.policy_eval import Request

    context = {f"aws:ResourceTag/{k}": v for k, v in tags.items()} | dict(ctx)
    return Request(action, resource, "arn:aws:iam::123456789012:role/controller", context)


def test_volumes_attach_only_to_this_stacks_populators_or_replica_nodes(synth: Synth) -> None:
    from tests.infra.policy_eval import decide, resolve

    statements = resolve(list(_controller_statements(synth).values()), synth.template)
    env = next(iter(synth.resources("AWS::Lambda::Function").values()))["Properties"]["Environment"]
    ours = str(resolve(env["Variables"]["STACK_TAG"], synth.template))
    instance = "arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"
    volume = "arn:aws:ec2:us-east-1:123456789012:volume/vol-0123456789abcdef0"
    our_volume = {"cachewarm:managed": "true", "cachewarm:stack": ours}
    assert decide(statements, _ec2_request("ec2:AttachVolume", volume, our_volume)) == "Allow"
    for tags, allowed in [
        ({"cachewarm:managed": "true", "cachewarm:stack": ours}, True),  # our populator
        ({"cachewarm:replica": "users-v1"}, True),  # a replica node (the platform's tag)
        ({"cachewarm:managed": "true", "cachewarm:stack": "another-stack"}, False),
        ({"cachewarm:managed": "true"}, False),
        ({}, False),  # any other instance of the account
    ]:
        got = decide(statements, _ec2_request("ec2:AttachVolume", instance, tags))
        assert (got == "Allow") is allowed, (tags, got)
    # Another stack's volume, or an untagged one, never.
    for tags in ({"cachewarm:managed": "true", "cachewarm:stack": "another-stack"}, {}):
        assert decide(statements, _ec2_request("ec2:AttachVolume", volume, tags)) != "Allow"
        assert decide(statements, _ec2_request("ec2:DeleteVolume", volume, tags)) != "Allow"


def test_run_instances_only_through_this_stacks_launch_template(synth: Synth) -> None:
    from tests.infra.policy_eval import decide, resolve

    statements = resolve(list(_controller_statements(synth).values()), synth.template)
    env = next(iter(synth.resources("AWS::Lambda::Function").values()))["Properties"]["Environment"]
    ours = str(resolve(env["Variables"]["STACK_TAG"], synth.template))
    lt_id = str(resolve(env["Variables"]["POPULATOR_LAUNCH_TEMPLATE_ID"], synth.template))
    instance = "arn:aws:ec2:us-east-1:123456789012:instance/*"
    tagged = {"aws:RequestTag/cachewarm:managed": "true", "aws:RequestTag/cachewarm:stack": ours}
    our_lt = f"arn:aws:ec2:us-east-1:123456789012:launch-template/{lt_id}"
    other_lt = "arn:aws:ec2:us-east-1:123456789012:launch-template/lt-0ffffffffffffffff"
    assert (
        decide(
            statements,
            _ec2_request("ec2:RunInstances", instance, {}, **tagged, **{"ec2:LaunchTemplate": our_lt}),
        )
        == "Allow"
    )
    assert (
        decide(
            statements,
            _ec2_request("ec2:RunInstances", instance, {}, **tagged, **{"ec2:LaunchTemplate": other_lt}),
        )
        != "Allow"
    )
    assert (
        decide(statements, _ec2_request("ec2:RunInstances", instance, {}, **tagged)) != "Allow"
    )  # no template


# ---- lows ---------------------------------------------------------------------------------------------


def test_every_log_group_is_encrypted_with_the_stack_key(synth: Synth) -> None:
    """Step Functions logs execution data (inputs, outputs) at ALL; agent output names nodes."""
    [key] = synth.resources("AWS::KMS::Key")
    groups = synth.resources("AWS::Logs::LogGroup")
    assert groups
    for lid, group in groups.items():
        assert group["Properties"].get("KmsKeyId") == {"Fn::GetAtt": [key, "Arn"]}, lid
    statements = synth.template["Resources"][key]["Properties"]["KeyPolicy"]["Statement"]
    assert any("logs:arn" in json.dumps(st.get("Condition", {})) for st in statements)


def test_key_use_only_through_the_services_that_need_it(synth: Synth) -> None:
    controller = _controller_statements(synth)
    via = json.dumps(controller["UseKey"]["Condition"]["StringEquals"]["kms:ViaService"])
    assert "ec2." in via and "s3." in via
    assert "ec2." in json.dumps(controller["GrantKeyToEbs"]["Condition"]["StringEquals"]["kms:ViaService"])
    [agent] = [
        p
        for k, p in synth.resources("AWS::IAM::ManagedPolicy").items()
        if k.startswith("CacheWarmerAgentPolicy")
    ]
    [st] = [s for s in agent["Properties"]["PolicyDocument"]["Statement"] if s["Sid"] == "StatusBucketKey"]
    assert "s3." in json.dumps(st["Condition"]["StringEquals"]["kms:ViaService"])


def test_access_logs_arrive_by_bucket_policy_not_acl(synth: Synth) -> None:
    for lid, bucket in synth.resources("AWS::S3::Bucket").items():
        assert "AccessControl" not in bucket["Properties"], lid
        rules = bucket["Properties"].get("OwnershipControls", {}).get("Rules", [])
        assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}], lid
    policies = json.dumps(synth.resources("AWS::S3::BucketPolicy"))
    assert "logging.s3.amazonaws.com" in policies
