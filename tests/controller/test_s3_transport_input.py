"""The execution input's `transport` and `s3` (issue 25): valid input parses, bad input is refused
naming the field, and the bucket and agent parameters derived from it fit S3's and SSM's rules."""

from __future__ import annotations

import re
from typing import Any

import pytest
from cachewarm.contract import inputs
from cachewarm_controller import transport
from cachewarm_controller.errors import InvalidInputError
from cachewarm_controller.model import parse_input

from tests.infra import policy_eval

SUBNET = "subnet-0123456789abcdef0"


def body(**kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "warm_id": "warm-1",
        "destination": {"endpoints": ["10.0.0.1:11211"]},
        "populator": {"launch_template_id": "lt-0123456789abcdef0"},
    }
    out.update(kw)
    return out


def test_volume_is_the_default_and_s3_parses() -> None:
    assert parse_input(body()).transport == "volume"
    inp = parse_input(body(transport="s3", s3={"subnet_ids": [SUBNET], "destination_region": "eu-west-1"}))
    assert inp.transport == "s3" and inp.s3 is not None
    assert inp.s3.destination_region == "eu-west-1" and inp.s3.expire_days == 3
    assert inp.s3.upload_bytes_per_second == 0


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        ({"transport": "s3"}, "transport s3 needs s3.subnet_ids"),
        ({"s3": {"subnet_ids": [SUBNET]}}, 'transport is "volume"'),
        ({"transport": "ftp"}, "transport"),
        ({"transport": "s3", "s3": {"subnet_ids": []}}, "s3.subnet_ids"),
        ({"transport": "s3", "s3": {"subnet_ids": [SUBNET, SUBNET]}}, "subnet_ids has duplicates"),
        ({"transport": "s3", "s3": {"subnet_ids": ["sn-1"]}}, "s3.subnet_ids.0"),
        (
            {"transport": "s3", "s3": {"subnet_ids": [SUBNET], "destination_region": "Mars"}},
            "destination_region",
        ),
        ({"transport": "s3", "s3": {"subnet_ids": [SUBNET], "expire_days": 0}}, "s3.expire_days"),
        ({"transport": "s3", "s3": {"subnet_ids": [SUBNET], "upload_bytes_per_second": -1}}, "upload_bytes"),
        ({"transport": "s3", "s3": {"subnet_ids": [SUBNET], "bucket": "x"}}, "s3.bucket"),
    ],
)
def test_bad_transport_input_is_refused_naming_the_field(kw: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(named)):
        parse_input(body(**kw))


def test_per_az_populator_subnets_do_not_mix_with_s3() -> None:
    pop = {"launch_template_id": "lt-0123456789abcdef0", "subnet_ids": {"us-east-1a": SUBNET}}
    with pytest.raises(InvalidInputError, match=r"with transport s3 the populators go to s3\.subnet_ids"):
        parse_input(body(transport="s3", s3={"subnet_ids": [SUBNET]}, populator=pop))


def test_bucket_names_fit_s3_and_the_documents_for_the_longest_warm_id() -> None:
    arn = "arn:aws:states:us-east-1:123456789012:execution:cachewarm:run-1"
    longest = "w" * inputs.WARM_ID_MAX
    stack_prefix = "cw0a1b2-"  # the longest a stack sets (TRANSPORT_BUCKET_PREFIX)
    assert re.fullmatch(transport.PREFIX_PATTERN, stack_prefix)
    name = transport.bucket_name(longest, arn, stack_prefix)
    assert len(name) == 63 and re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name)
    assert transport.bucket_name(longest, arn + "2", stack_prefix) != name  # another execution
    node = "i-0123456789abcdef0"
    # What the controller sends passes the documents' patterns (the agents' flags: w25a's half).
    assert inputs.matches(inputs.S3_TO_PARAM, transport.node_url(name))
    assert inputs.matches(inputs.S3_FROM_PARAM, transport.node_source_url(name, node))
    for region in ("us-east-1", "ap-southeast-2", "us-gov-west-1", "eu-central-2"):
        assert inputs.matches(inputs.S3_REGION_PARAM, region) and inputs.matches(inputs.AWS_REGION, region)


def test_the_bucket_policy_lets_populators_only_read_and_nobody_outside_the_account_in() -> None:
    arn = "arn:aws:states:us-east-1:123456789012:execution:cachewarm:run-1"
    populator = "arn:aws:iam::123456789012:role/Populator"
    source = "arn:aws:iam::123456789012:role/platform-cache-node"
    spec = transport.BucketSpec(
        name=transport.bucket_name("warm-1", arn),
        region="us-east-1",
        warm_id="warm-1",
        execution_arn=arn,
        stack_tag="stack",
        expire_days=3,
        reader_role_arns=(populator,),
        account="123456789012",
    )
    statements = transport.bucket_policy(spec)["Statement"]
    obj = f"arn:aws:s3:::{spec.name}/dumps/i-0123456789abcdef0/data-0001"

    def decide(action: str, principal: str, **context: str) -> str:
        ctx = {"aws:SecureTransport": "true", "aws:PrincipalAccount": "123456789012", **context}
        return policy_eval.decide(statements, policy_eval.Request(action, obj, principal, ctx))

    # The bucket policy only denies; the roles' own policies (the stack's) allow.
    assert decide("s3:PutObject", source) == "ImplicitDeny"
    assert decide("s3:GetObject", populator) == "ImplicitDeny"
    assert decide("s3:PutObject", populator) == "Deny"
    assert decide("s3:DeleteObject", populator) == "Deny"
    assert decide("s3:GetObject", source, **{"aws:SecureTransport": "false"}) == "Deny"
    assert (
        decide("s3:GetObject", "arn:aws:iam::999999999999:role/x", **{"aws:PrincipalAccount": "999999999999"})
        == "Deny"
    )
