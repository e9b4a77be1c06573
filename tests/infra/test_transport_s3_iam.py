"""The S3 transport's IAM in the synthesized stack (issue 25): the controller makes, configures,
empties and deletes only this stack's transport buckets (named with its TRANSPORT_BUCKET_PREFIX);
the agents put and get only under such a bucket's dumps/, and use the stack's key only through S3.
Evaluated with tests/infra/policy_eval.py (moto knows neither the policy variables nor conditions)."""

from __future__ import annotations

import re
from typing import Any

from cachewarm_controller import transport

from tests.infra.policy_eval import Request, decide, resolve
from tests.infra.support import Synth, _controller_statements


def _env(synth: Synth) -> dict[str, Any]:
    fn = next(iter(synth.resources("AWS::Lambda::Function").values()))
    return dict(fn["Properties"]["Environment"]["Variables"])


def _agent_statements(synth: Synth) -> list[dict[str, Any]]:
    [agent] = [
        p
        for k, p in synth.resources("AWS::IAM::ManagedPolicy").items()
        if k.startswith("CacheWarmerAgentPolicy")
    ]
    return list(resolve(agent["Properties"]["PolicyDocument"]["Statement"], synth.template))


def test_the_controller_is_told_the_bucket_prefix_and_the_populator_role(synth: Synth) -> None:
    env = _env(synth)
    prefix = env["TRANSPORT_BUCKET_PREFIX"]
    assert re.fullmatch(transport.PREFIX_PATTERN, prefix), prefix
    role = env["POPULATOR_ROLE_ARNS"]["Fn::GetAtt"]
    assert role[1] == "Arn" and synth.template["Resources"][role[0]]["Type"] == "AWS::IAM::Role"


def test_the_controller_owns_only_its_own_transport_buckets(synth: Synth) -> None:
    prefix = _env(synth)["TRANSPORT_BUCKET_PREFIX"]
    statements = list(resolve(list(_controller_statements(synth).values()), synth.template))
    ours = transport.bucket_name("warm-1", "a" * 16, prefix)
    role = "arn:aws:iam::123456789012:role/controller"

    def may(action: str, resource: str, owner: str = "123456789012") -> bool:
        ctx = {"s3:ResourceAccount": owner}
        return decide(statements, Request(action, resource, role, ctx)) == "Allow"

    for action in (
        "s3:CreateBucket",
        "s3:PutEncryptionConfiguration",
        "s3:PutLifecycleConfiguration",
        "s3:PutBucketPolicy",
        "s3:PutBucketPublicAccessBlock",
        "s3:PutBucketTagging",
        "s3:PutBucketOwnershipControls",
        "s3:ListBucketMultipartUploads",
        "s3:ListBucketVersions",
        "s3:DeleteBucket",
    ):
        assert may(action, f"arn:aws:s3:::{ours}"), action
        assert not may(action, "arn:aws:s3:::someone-elses-bucket"), action
        assert not may(action, f"arn:aws:s3:::cw-warm-1-{'a' * 16}") or prefix == "cw-", action
    for action in ("s3:DeleteObject", "s3:AbortMultipartUpload"):
        assert may(action, f"arn:aws:s3:::{ours}/dumps/x/y/i-0aaaaaaaaaaaaaaaa/data-0001")
        assert not may(action, "arn:aws:s3:::someone-elses-bucket/x")
    # Teardown finds the bucket from its record, never by listing the account's buckets.
    assert not may("s3:ListAllMyBuckets", "*")


def test_agents_reach_only_their_own_keys_of_the_transport_buckets(synth: Synth) -> None:
    prefix = _env(synth)["TRANSPORT_BUCKET_PREFIX"]
    statements = _agent_statements(synth)
    node = "arn:aws:iam::123456789012:role/node"
    me = "arn:aws:ec2:us-east-1:123456789012:instance/i-0aaaaaaaaaaaaaaaa"
    pop = "arn:aws:ec2:us-west-2:123456789012:instance/i-0bbbbbbbbbbbbbbbb"
    bucket = transport.bucket_name("warm-1", "a" * 16, prefix)

    def may(action: str, resource: str, instance: str = me, **ctx: str) -> bool:
        context = {"ec2:SourceInstanceARN": instance, "s3:ResourceAccount": "123456789012", **ctx}
        return decide(statements, Request(action, resource, node, context)) == "Allow"

    obj = f"arn:aws:s3:::{bucket}/{transport.pair_prefix(me, pop)}/i-0aaaaaaaaaaaaaaaa/data-0001"
    for action in ("s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"):
        assert may(action, obj), action
        assert not may(action, obj, instance=pop) or action == "s3:GetObject", action
        assert not may(action, "arn:aws:s3:::someone-elses-bucket/dumps/x"), action
    assert may("s3:GetObject", obj, instance=pop)  # the paired populator reads
    assert may("s3:ListBucket", f"arn:aws:s3:::{bucket}", **{"s3:prefix": f"dumps/{me}/{pop}/i-0a/"})
    assert may("s3:ListBucket", f"arn:aws:s3:::{bucket}", instance=pop, **{"s3:prefix": f"dumps/{me}/{pop}/"})
    assert not may("s3:ListBucket", f"arn:aws:s3:::{bucket}", **{"s3:prefix": "dumps/"})
    assert not may("s3:PutObject", f"arn:aws:s3:::{bucket}/elsewhere")
    assert not may("s3:DeleteObject", obj)  # the controller deletes, at teardown
    assert not may("s3:CreateBucket", f"arn:aws:s3:::{bucket}")
