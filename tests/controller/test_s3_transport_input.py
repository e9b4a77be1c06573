"""The execution input's `transport` and `s3` (issue 25): valid input parses, bad input is refused
naming the field, and the bucket and agent parameters derived from it fit S3's and SSM's rules."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest
from cachewarm.contract import inputs
from cachewarm.contract.replicas import parse_pairs
from cachewarm_controller import transport
from cachewarm_controller.errors import InvalidInputError
from cachewarm_controller.model import parse_input
from cachewarm_controller.steps.common import Settings

SUBNET = "subnet-0123456789abcdef0"
STACK_KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


# The stack's replica pairs these inputs warm under (destination "cache-b").
PAIRS = parse_pairs("cache-a->cache-b")


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
    longest = "w" * inputs.WARM_ID_MAX
    stack_prefix = "cw0a1b2-"  # the longest a stack sets (TRANSPORT_BUCKET_PREFIX)
    assert re.fullmatch(transport.PREFIX_PATTERN, stack_prefix)
    token = transport.new_token()
    assert re.fullmatch(r"[a-z0-9]{16}", token) and transport.new_token() != token
    name = transport.bucket_name(longest, token, stack_prefix)
    assert len(name) == 63 and re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name)
    assert name.startswith(stack_prefix + "w") and name.endswith("-" + token)
    assert transport.NAME_PATTERN.fullmatch(name) and transport.recorded_bucket(name, stack_prefix) == name
    assert transport.recorded_bucket(name, "cw-") is None  # another stack's
    assert transport.recorded_bucket("someone-elses-bucket", "so") is None
    # A warm id cut at a hyphen leaves none before the token's.
    assert "--" not in transport.bucket_name("a" * 37 + "-b" * 5, token, stack_prefix)
    node, pop = "i-0123456789abcdef0", "i-0fedcba9876543210"
    for populator_region in (None, "ap-southeast-2", "us-gov-west-1"):
        region = "us-gov-east-1" if populator_region == "us-gov-west-1" else "us-east-1"
        to_s3, from_s3 = transport.pair_urls(name, region, "123456789012", node, pop, populator_region)
        # What the controller sends passes the documents' patterns (the agents' flags: w25a's half).
        assert inputs.matches(inputs.S3_TO_PARAM, to_s3) and inputs.matches(inputs.S3_TRANSPORT_URL, to_s3)
        assert inputs.matches(inputs.S3_FROM_PARAM, from_s3) and inputs.matches(inputs.S3_NODE_URL, from_s3)
        assert from_s3 == f"{to_s3}/{node}"
    for region in ("us-east-1", "ap-southeast-2", "us-gov-west-1", "eu-central-2"):
        assert inputs.matches(inputs.S3_REGION_PARAM, region) and inputs.matches(inputs.AWS_REGION, region)


@pytest.mark.parametrize(
    ("kms", "ok"),
    [
        (None, True),
        (STACK_KEY, True),
        (STACK_KEY.rsplit("/", 1)[-1], True),  # the key's id
        ("alias/aws/s3", False),
        ("alias/cachewarm", False),  # an alias may be pointed at any key
        ("arn:aws:kms:us-east-1:999999999999:key/1234abcd-12ab-34cd-56ef-1234567890ab", False),
        ("arn:aws:kms:us-east-1:123456789012:key/another", False),
    ],
)
def test_only_the_stack_key_encrypts_the_transport(kms: str | None, ok: bool) -> None:
    """Refused at ValidateInput, before anything is created (the machine test runs it end to end)."""
    from cachewarm_controller.steps.planning import validate

    s3: dict[str, Any] = {"subnet_ids": [SUBNET]} | ({"kms_key_id": kms} if kms else {})
    deps = SimpleNamespace(
        settings=Settings(  # type: ignore[arg-type]
            "status",
            None,
            kms_key_id=STACK_KEY,
            controller_role_arn="arn:aws:iam::1:role/c",
            replica_pairs=PAIRS,
        ),
        autoscaling=None,
        ec2=None,
    )
    raw = body(transport="s3", s3=s3, destination={"replica": "cache-b"})
    if ok:
        assert validate(raw, deps).s3 is not None  # type: ignore[arg-type]
    else:
        with pytest.raises(InvalidInputError, match=r"s3\.kms_key_id: .* is not this stack's key"):
            validate(raw, deps)  # type: ignore[arg-type]


def test_the_s3_transport_needs_the_stack_key_and_the_controller_role() -> None:
    from cachewarm_controller.steps.planning import validate

    for settings in (
        Settings("status", None, replica_pairs=PAIRS),  # type: ignore[arg-type]
        Settings("status", None, kms_key_id=STACK_KEY, replica_pairs=PAIRS),  # type: ignore[arg-type]
    ):
        deps = SimpleNamespace(settings=settings, autoscaling=None, ec2=None)
        raw = body(transport="s3", s3={"subnet_ids": [SUBNET]}, destination={"replica": "cache-b"})
        with pytest.raises(InvalidInputError, match="needs the stack's KMS key and the controller's role"):
            validate(raw, deps)  # type: ignore[arg-type]
