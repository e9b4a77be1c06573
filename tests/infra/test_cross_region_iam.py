"""The stack for a two-region deployment (issue 25, cross-region S3 warms): synthesized in us-east-1
with destinationRegions=['us-west-2']. The controller's EC2 and SSM rights reach its own region and
us-west-2 only — every regional ARN names one of the two, every "*" statement is limited by
aws:RequestedRegion — and the populators decrypt through S3 in the source region (the bucket's).
Evaluated with tests/infra/policy_eval.py, as test_transport_s3_iam.py does."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.infra.policy_eval import ACCOUNT, Request, decide, resolve
from tests.infra.support import REPO, Synth, asl_path, documents_dir, lambdas_dir

SOURCE, FAR = "us-east-1", "us-west-2"
STACK_TAG_KEY = "cachewarm:stack"


@pytest.fixture(scope="module")
def two_regions(artifacts: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    from aws_cdk import App, Environment
    from cachewarm_infra.stack import CacheWarmStack, StackSettings

    outdir = tmp_path_factory.mktemp("cdk.out.two-regions")
    flags = json.loads((REPO / "cdk.json").read_text()).get("context", {})
    # As `cdk deploy -c destinationRegions=us-west-2` passes it.
    app = App(outdir=str(outdir), context={**flags, "destinationRegions": FAR})
    settings = StackSettings.from_context(app.node)
    assert settings.destination_regions == (FAR,)
    settings = StackSettings(
        asl_path=asl_path(),
        lambdas_dir=lambdas_dir(),
        ssm_documents_dir=documents_dir(),
        dumper_tarball=artifacts[0],
        agent_bundle=artifacts[1],
        destination_regions=settings.destination_regions,
    )
    stack = CacheWarmStack(
        app, "CacheWarmTwoRegions", settings=settings, env=Environment(account=ACCOUNT, region=SOURCE)
    )
    app.synth()
    template = json.loads((outdir / "CacheWarmTwoRegions.template.json").read_text())
    yield Synth(template=template, outdir=outdir, warmer=stack.warmer, nag_report=None, nag_error=None)


def _policy(synth: Synth, cfn_type: str, prefix: str) -> list[dict[str, Any]]:
    [policy] = [p for k, p in synth.resources(cfn_type).items() if k.startswith(prefix)]
    return list(resolve(policy["Properties"]["PolicyDocument"]["Statement"], synth.template))


def _controller(synth: Synth) -> list[dict[str, Any]]:
    return _policy(synth, "AWS::IAM::Policy", "CacheWarmerControllerPolicy")


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


_ARN_REGION = re.compile(r"^arn:aws:(?:ec2|ssm|logs|states|lambda|kms|events):([^:]*):")


def test_every_regional_arn_names_the_source_or_the_destination_region(two_regions: Synth) -> None:
    seen: set[str] = set()
    for st in _controller(two_regions):
        for r in _list(st["Resource"]):
            m = _ARN_REGION.match(str(r))
            if m:
                assert m.group(1) in (SOURCE, FAR, ""), (st.get("Sid"), r)
                seen.add(m.group(1))
        if st.get("Sid", "").startswith("Remote"):
            regions = {m.group(1) for r in _list(st["Resource"]) if (m := _ARN_REGION.match(str(r)))}
            assert regions == {FAR}, (st["Sid"], st["Resource"])
    assert {SOURCE, FAR} <= seen


def test_unscoped_statements_are_limited_to_the_two_regions(two_regions: Synth) -> None:
    by_sid = {st.get("Sid"): st for st in _controller(two_regions)}
    for sid in ("Inventory", "CancelCommands"):
        cond = by_sid[sid]["Condition"]["StringEquals"]["aws:RequestedRegion"]
        assert sorted(_list(cond)) == [SOURCE, FAR], sid
    # No other "*"-resource statement reaches EC2 or SSM.
    for st in _controller(two_regions):
        if "*" in _list(st["Resource"]) and st.get("Sid") not in ("Inventory", "CancelCommands"):
            assert not any(str(a).startswith(("ec2:", "ssm:")) for a in _list(st["Action"])), st


def test_the_controller_launches_commands_and_terminates_there_and_nowhere_else(two_regions: Synth) -> None:
    statements = _controller(two_regions)
    role = f"arn:aws:iam::{ACCOUNT}:role/controller"
    stack_tag = next(
        v
        for st in statements
        if st.get("Sid") == "RemoteLaunchFromOurTemplates"
        for v in [st["Condition"]["StringEquals"][f"aws:ResourceTag/{STACK_TAG_KEY}"]]
    )
    tagged_request = {
        "aws:RequestTag/cachewarm:managed": "true",
        f"aws:RequestTag/{STACK_TAG_KEY}": stack_tag,
    }
    ours = {"aws:ResourceTag/cachewarm:managed": "true", f"aws:ResourceTag/{STACK_TAG_KEY}": stack_tag}
    ssm_ours = {"ssm:resourceTag/cachewarm:managed": "true", f"ssm:resourceTag/{STACK_TAG_KEY}": stack_tag}

    def may(action: str, resource: str, **context: str) -> bool:
        parts = resource.split(":")
        ctx = {"aws:RequestedRegion": parts[3] if len(parts) > 3 else SOURCE, **context}
        return decide(statements, Request(action, resource, role, ctx)) == "Allow"

    for region, allowed in ((FAR, True), ("eu-west-1", False), ("us-west-1", False)):
        instance = f"arn:aws:ec2:{region}:{ACCOUNT}:instance/i-0123456789abcdef0"
        template = f"arn:aws:ec2:{region}:{ACCOUNT}:launch-template/lt-0123456789abcdef0"
        launch = {**tagged_request, "ec2:LaunchTemplate": template}
        assert may("ec2:RunInstances", instance, **launch) is allowed, region
        assert may("ec2:RunInstances", template, **{f"aws:ResourceTag/{STACK_TAG_KEY}": stack_tag}) is allowed
        assert may("ec2:TerminateInstances", instance, **ours) is allowed, region
        assert may("ssm:SendCommand", instance, **ssm_ours) is allowed, region
        assert may("ec2:DescribeInstances", "*", **{"aws:RequestedRegion": region}) is allowed, region
    far_instance = f"arn:aws:ec2:{FAR}:{ACCOUNT}:instance/i-0123456789abcdef0"
    far_template = f"arn:aws:ec2:{FAR}:{ACCOUNT}:launch-template/lt-0123456789abcdef0"
    # Not a template of another stack (or none), not an instance that is not ours.
    assert not may("ec2:RunInstances", far_template, **{f"aws:ResourceTag/{STACK_TAG_KEY}": "other"})
    assert not may("ec2:RunInstances", far_template)
    assert not may("ec2:TerminateInstances", far_instance)
    assert not may("ssm:SendCommand", far_instance)
    assert not may("ec2:CreateVolume", f"arn:aws:ec2:{FAR}:{ACCOUNT}:volume/*", **tagged_request)
    # The stack's documents, by their names, in the destination region.
    docs = [r for st in statements if st.get("Sid") == "RemoteRunOurDocuments" for r in _list(st["Resource"])]
    assert docs and all(d.startswith(f"arn:aws:ssm:{FAR}:{ACCOUNT}:document/") for d in docs)
    assert may("ssm:SendCommand", docs[0])


def test_populators_decrypt_only_through_s3_of_the_source_region(two_regions: Synth) -> None:
    agent = _policy(two_regions, "AWS::IAM::ManagedPolicy", "CacheWarmerAgentPolicy")
    [key] = [st for st in agent if st.get("Sid") == "StatusBucketKey"]
    assert key["Condition"] == {"StringEquals": {"kms:ViaService": f"s3.{SOURCE}.amazonaws.com"}}


def test_the_controller_is_told_the_destination_regions(two_regions: Synth) -> None:
    fn = next(iter(two_regions.resources("AWS::Lambda::Function").values()))
    assert fn["Properties"]["Environment"]["Variables"]["DESTINATION_REGIONS"] == FAR


def test_a_bad_destination_region_is_refused_at_synth() -> None:
    from aws_cdk import App, Stack
    from cachewarm_infra.iam import check_destination_regions

    stack = Stack(App(), "S", env={"region": SOURCE})
    assert check_destination_regions(stack, [FAR]) == (FAR,)
    for bad in ([SOURCE], ["us-west-2a"], [FAR, FAR], ["*"]):
        with pytest.raises(ValueError, match="destination_regions"):
            check_destination_regions(stack, bad)


def test_the_populator_role_registers_with_ssm_in_both_regions(two_regions: Synth) -> None:
    """The role (and its instance profile) is global; the far region's launch template names it."""
    ssm_agent = _policy(two_regions, "AWS::IAM::ManagedPolicy", "CacheWarmerPopulatorSsmAgentPolicy")
    [register] = [st for st in ssm_agent if st.get("Sid") == "RegisterThisInstance"]
    assert sorted(_list(register["Resource"])) == [
        f"arn:aws:ec2:{SOURCE}:{ACCOUNT}:instance/*",
        f"arn:aws:ec2:{FAR}:{ACCOUNT}:instance/*",
    ]
