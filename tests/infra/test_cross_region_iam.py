"""The app for a two-region deployment (cross-region S3 warms): the stack synthesized in us-east-1
with destinationRegions=us-west-2 and, beside it, the us-west-2 stack the app now deploys — the
populators' launch template, SSM documents, log group, security group, role and key there.

The controller's EC2 and SSM rights reach its own region and us-west-2 only; in us-west-2 it may launch
only from that stack's template (by id: a template tagged like ours is not enough), into the fixed
VPC, with that stack's security group, and run only the stack's documents. Evaluated with
tests/infra/policy_eval.py, as test_transport_s3_iam.py does; cdk-nag runs on both stacks."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.infra.policy_eval import ACCOUNT, Request, decide, resolve
from tests.infra.support import MEMCACHED_SG, REPO, SOURCE_SG, Synth, asl_path, documents_dir, lambdas_dir

SOURCE, FAR = "us-east-1", "us-west-2"
FAR_VPC = "vpc-0fedcba9876543210"
FAR_SG = "sg-0fedcba9876543210"
STACK_TAG_KEY = "cachewarm:stack"
HOME, REMOTE = "CacheWarmTwoRegions", f"CacheWarmTwoRegions-{FAR}"


@dataclass
class TwoRegions:
    home: Synth
    far: dict[str, Any]  # the us-west-2 stack's template
    warmer: Any
    region: Any  # its CacheWarmerRegion


@pytest.fixture(scope="module")
def two_regions(
    artifacts: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TwoRegions]:
    from aws_cdk import App, Environment, Validations
    from cachewarm_infra.stack import CacheWarmStack, StackSettings
    from cdk_nag import AwsSolutionsChecks

    outdir = tmp_path_factory.mktemp("cdk.out.two-regions")
    flags = json.loads((REPO / "cdk.json").read_text()).get("context", {})
    # As `cdk deploy -c destinationRegions=us-west-2 -c destinationVpcs=… -c …` passes them.
    context = {
        **flags,
        "destinationRegions": FAR,
        "destinationVpcs": f"{FAR}={FAR_VPC}",
        "destinationSecurityGroupIds": f"{MEMCACHED_SG},{FAR}={FAR_SG}",
        "sourceSecurityGroupIds": SOURCE_SG,
    }
    app = App(outdir=str(outdir), context=context)
    from_context = StackSettings.from_context(app.node)
    settings = StackSettings(
        asl_path=asl_path(),
        lambdas_dir=lambdas_dir(),
        ssm_documents_dir=documents_dir(),
        dumper_tarball=artifacts[0],
        agent_bundle=artifacts[1],
        destination_security_group_ids=from_context.destination_security_group_ids,
        source_security_group_ids=from_context.source_security_group_ids,
        destination_regions=from_context.destination_regions,
        destination_vpcs=from_context.destination_vpcs,
        remote_security_group_ids=from_context.remote_security_group_ids,
    )
    stack = CacheWarmStack(app, HOME, settings=settings, env=Environment(account=ACCOUNT, region=SOURCE))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    nag_error = None
    try:
        app.synth()
    except Exception as e:  # an unacknowledged finding fails the synth
        nag_error = str(e)
    report = json.loads((outdir / "validation-report.json").read_text())
    template = json.loads((outdir / f"{HOME}.template.json").read_text())
    far = json.loads((outdir / f"{REMOTE}.template.json").read_text())
    [region_stack] = stack.regions
    yield TwoRegions(
        Synth(template=template, outdir=outdir, warmer=stack.warmer, nag_report=report, nag_error=nag_error),
        far,
        stack.warmer,
        region_stack.region_resources,
    )


def _policy(synth: Synth, cfn_type: str, prefix: str) -> list[dict[str, Any]]:
    [policy] = [p for k, p in synth.resources(cfn_type).items() if k.startswith(prefix)]
    return list(resolve(policy["Properties"]["PolicyDocument"]["Statement"], synth.template))


def _controller(synth: Synth) -> list[dict[str, Any]]:
    return _policy(synth, "AWS::IAM::Policy", "CacheWarmerControllerPolicy")


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def _of(template: dict[str, Any], cfn_type: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == cfn_type}


def _output(logical: str, attr: str | None = None) -> str:
    """How policy_eval renders a us-west-2 resource read through Fn::GetStackOutput."""
    return f"output-{REMOTE}-publishoutput".lower() + (
        f"ref{logical}".lower() if attr is None else f"fngetatt{logical}{attr}".lower()
    )


_ARN_REGION = re.compile(r"^arn:aws:(?:ec2|ssm|logs|states|lambda|kms|events):([^:]*):")


def test_cdk_nag_finds_nothing_unacknowledged_in_either_stack(two_regions: TwoRegions) -> None:
    """Before: 8 unacknowledged AwsSolutions-IAM5 (the far region's wildcard ARNs)."""
    assert two_regions.home.nag_error is None, two_regions.home.nag_error
    violations = [v for p in two_regions.home.nag_report["pluginReports"] for v in p["violations"]]
    assert not violations, violations
    for path, rule, reason in two_regions.warmer.nag_acknowledgements:
        assert rule.startswith("AwsSolutions-") and len(reason) > 40 and reason.endswith("."), (path, rule)
    # The wildcards left in us-west-2 are the ones naming what a warm creates (acknowledged, each
    # with a condition); the template, security group and role are named exactly.
    remote = {r for p, r, _ in two_regions.warmer.nag_acknowledgements if f":{FAR}:" in r}
    assert remote == {
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:{FAR}:<AWS::AccountId>:{kind}/*]"
        for kind in ("instance", "volume", "subnet", "network-interface")
    } | {
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:{FAR}::image/*]",
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:{FAR}:{ACCOUNT}:instance/*]",
    }


def test_every_regional_arn_names_the_source_or_the_destination_region(two_regions: TwoRegions) -> None:
    seen: set[str] = set()
    for st in _controller(two_regions.home):
        for r in _list(st["Resource"]):
            m = _ARN_REGION.match(str(r))
            if m:
                assert m.group(1) in (SOURCE, FAR, ""), (st.get("Sid"), r)
                seen.add(m.group(1))
        if st.get("Sid", "").startswith("Remote"):
            assert st["Sid"].startswith("RemoteUsWest2"), st["Sid"]
            regions = {m.group(1) for r in _list(st["Resource"]) if (m := _ARN_REGION.match(str(r)))}
            assert regions <= {FAR, ""}, (st["Sid"], st["Resource"])
    assert {SOURCE, FAR} <= seen


def test_unscoped_statements_are_limited_to_the_two_regions(two_regions: TwoRegions) -> None:
    by_sid = {st.get("Sid"): st for st in _controller(two_regions.home)}
    for sid in ("Inventory", "CancelCommands"):
        cond = by_sid[sid]["Condition"]["StringEquals"]["aws:RequestedRegion"]
        assert sorted(_list(cond)) == [SOURCE, FAR], sid
    for st in _controller(two_regions.home):
        if "*" in _list(st["Resource"]) and st.get("Sid") not in ("Inventory", "CancelCommands"):
            assert not any(str(a).startswith(("ec2:", "ssm:")) for a in _list(st["Action"])), st


def test_far_launches_only_from_the_far_stacks_template_vpc_and_group(two_regions: TwoRegions) -> None:
    statements = _controller(two_regions.home)
    role = f"arn:aws:iam::{ACCOUNT}:role/controller"
    stack_tag = next(
        st["Condition"]["StringEquals"][f"aws:RequestTag/{STACK_TAG_KEY}"]
        for st in statements
        if st.get("Sid") == "RemoteUsWest2LaunchTaggedPopulators"
    )
    far = two_regions.far
    [(lt_lid, _)] = _of(far, "AWS::EC2::LaunchTemplate").items()
    [(sg_lid, _)] = _of(far, "AWS::EC2::SecurityGroup").items()
    [(role_lid, _)] = _of(far, "AWS::IAM::Role").items()
    [(key_lid, _)] = _of(far, "AWS::KMS::Key").items()

    def output_of(value: Any) -> str:
        return str(resolve(value, {"Resources": {}}))

    publish = {k: v["Value"] for k, v in far["Outputs"].items() if k.startswith("PublishOutput")}

    def published(intrinsic: dict[str, Any]) -> str:
        [name] = [k for k, v in publish.items() if v == intrinsic]
        return output_of({"Fn::GetStackOutput": {"StackName": REMOTE, "Region": FAR, "OutputName": name}})

    lt_id = published({"Ref": lt_lid})
    sg_id = published({"Fn::GetAtt": [sg_lid, "GroupId"]})
    far_role = published({"Fn::GetAtt": [role_lid, "Arn"]})
    far_key = published({"Fn::GetAtt": [key_lid, "Arn"]})

    def arn(resource: str, region: str = FAR) -> str:
        return f"arn:aws:ec2:{region}:{ACCOUNT}:{resource}"

    def may(action: str, resource: str, **context: str) -> bool:
        parts = resource.split(":")
        ctx = {"aws:RequestedRegion": parts[3] if len(parts) > 3 and parts[3] else FAR, **context}
        return decide(statements, Request(action, resource, role, ctx)) == "Allow"

    ours = arn(f"launch-template/{lt_id}")
    forged = arn("launch-template/lt-0aaaaaaaaaaaaaaaa")  # tagged cachewarm:stack=<ours>: no matter
    tagged = {"aws:RequestTag/cachewarm:managed": "true", f"aws:RequestTag/{STACK_TAG_KEY}": stack_tag}
    instance = arn("instance/i-0123456789abcdef0")
    assert may("ec2:RunInstances", instance, **tagged, **{"ec2:LaunchTemplate": ours})
    assert not may("ec2:RunInstances", instance, **tagged, **{"ec2:LaunchTemplate": forged})
    assert may("ec2:RunInstances", ours)
    assert not may("ec2:RunInstances", forged, **{f"aws:ResourceTag/{STACK_TAG_KEY}": stack_tag})
    assert may("ec2:RunInstances", arn(f"security-group/{sg_id}"))
    assert not may("ec2:RunInstances", arn(f"security-group/{FAR_SG}"))
    in_vpc = {"ec2:Vpc": arn(f"vpc/{FAR_VPC}")}
    other_vpc = {"ec2:Vpc": arn("vpc/vpc-0aaaaaaaaaaaaaaaa")}
    for kind in ("subnet/subnet-0123456789abcdef0", "network-interface/*"):
        assert may("ec2:RunInstances", arn(kind), **in_vpc), kind
        assert not may("ec2:RunInstances", arn(kind), **other_vpc), kind
    assert may("ec2:RunInstances", arn("volume/*"), **{"ec2:Encrypted": "true"})
    assert not may("ec2:RunInstances", arn("volume/*"), **{"ec2:Encrypted": "false"})
    assert may("iam:PassRole", far_role, **{"iam:PassedToService": "ec2.amazonaws.com"})
    ebs = {"kms:ViaService": f"ec2.{FAR}.amazonaws.com", "kms:GrantIsForAWSResource": "true"}
    assert may("kms:CreateGrant", far_key, **ebs)
    assert not may("kms:Decrypt", far_key, **{"kms:ViaService": f"s3.{FAR}.amazonaws.com"})
    # Not another region, not an instance that is not ours, not a volume of its own.
    for region in ("eu-west-1", "us-west-1"):
        assert not may(
            "ec2:RunInstances", arn("instance/i-1", region), **tagged, **{"ec2:LaunchTemplate": ours}
        )
        assert not may("ec2:DescribeInstances", "*", **{"aws:RequestedRegion": region})
    assert not may("ec2:TerminateInstances", instance)
    assert not may("ssm:SendCommand", instance)
    assert not may("ec2:CreateVolume", arn("volume/*"), **tagged)
    ssm_ours = {"ssm:resourceTag/cachewarm:managed": "true", f"ssm:resourceTag/{STACK_TAG_KEY}": stack_tag}
    assert may("ssm:SendCommand", instance, **ssm_ours)
    assert may(
        "ec2:TerminateInstances",
        instance,
        **{k.replace("ssm:resourceTag", "aws:ResourceTag"): v for k, v in ssm_ours.items()},
    )


def test_far_commands_run_only_the_stacks_documents_there(two_regions: TwoRegions) -> None:
    statements = _controller(two_regions.home)
    names = sorted(two_regions.warmer.document_names.values())
    docs = sorted(
        r
        for st in statements
        if st.get("Sid") == "RemoteUsWest2RunOurDocuments"
        for r in _list(st["Resource"])
    )
    assert docs == [f"arn:aws:ssm:{FAR}:{ACCOUNT}:document/{n}" for n in names]
    role = f"arn:aws:iam::{ACCOUNT}:role/controller"
    req = Request("ssm:SendCommand", f"arn:aws:ssm:{FAR}:{ACCOUNT}:document/AWS-RunShellScript", role, {})
    assert decide(statements, req) != "Allow"


def test_the_far_stack_deploys_what_the_populators_need_there(two_regions: TwoRegions) -> None:
    far, home = two_regions.far, two_regions.home.template
    # The documents: the home stack's names and content (version 1 of each is the same document).
    docs = lambda t: {  # noqa: E731
        v["Properties"]["Name"]: json.dumps(v["Properties"]["Content"], sort_keys=True)
        for v in _of(t, "AWS::SSM::Document").values()
    }
    assert docs(far) == docs(home) and len(docs(far)) == 6
    # The security group: in the fixed VPC, memcached only to the named destination group there.
    [(sg_lid, sg)] = _of(far, "AWS::EC2::SecurityGroup").items()
    assert sg["Properties"]["VpcId"] == FAR_VPC
    assert [(e["CidrIp"], e["FromPort"]) for e in sg["Properties"]["SecurityGroupEgress"]] == [
        ("0.0.0.0/0", 443)
    ]
    [egress] = _of(far, "AWS::EC2::SecurityGroupEgress").values()
    assert egress["Properties"]["DestinationSecurityGroupId"] == FAR_SG
    assert egress["Properties"]["FromPort"] == egress["Properties"]["ToPort"] == 11211
    # The template: the region's role through its instance profile, that group, IMDSv2, encrypted
    # root volume with the region's key, this deployment's agent at boot.
    [(key_lid, key)] = _of(far, "AWS::KMS::Key").items()
    assert key["Properties"]["EnableKeyRotation"] is True
    [lt] = _of(far, "AWS::EC2::LaunchTemplate").values()
    data = lt["Properties"]["LaunchTemplateData"]
    [(profile_lid, profile)] = _of(far, "AWS::IAM::InstanceProfile").items()
    [(role_lid, _)] = _of(far, "AWS::IAM::Role").items()
    assert profile["Properties"]["Roles"] == [{"Ref": role_lid}]
    assert data["IamInstanceProfile"] == {"Arn": {"Fn::GetAtt": [profile_lid, "Arn"]}}
    assert data["SecurityGroupIds"] == [{"Fn::GetAtt": [sg_lid, "GroupId"]}]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    [root] = data["BlockDeviceMappings"]
    assert root["Ebs"]["Encrypted"] is True and root["Ebs"]["KmsKeyId"] == {"Fn::GetAtt": [key_lid, "Arn"]}
    user_data = json.dumps(data["UserData"])
    assert two_regions.warmer.artifacts.agent_sha256 in user_data
    assert f"-{SOURCE}/" in user_data  # the artifacts are fetched from the home region's asset bucket
    # The log group, encrypted with the region's key (its policy admits CloudWatch Logs there).
    [group] = _of(far, "AWS::Logs::LogGroup").values()
    assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key_lid, "Arn"]}
    assert any(
        "logs:arn" in json.dumps(st.get("Condition", {}))
        for st in key["Properties"]["KeyPolicy"]["Statement"]
    )
    # What the docs name, as outputs.
    assert {"PopulatorLaunchTemplateId", "PopulatorSecurityGroupId", "AgentOutputLogGroup"} <= set(
        far["Outputs"]
    )


def test_the_far_populators_carry_the_agent_policy_and_register_there(two_regions: TwoRegions) -> None:
    far = two_regions.far
    [(role_lid, _)] = _of(far, "AWS::IAM::Role").items()
    publish = {k for k, v in far["Outputs"].items() if v["Value"] == {"Ref": role_lid}}
    [agent] = [
        p
        for k, p in two_regions.home.resources("AWS::IAM::ManagedPolicy").items()
        if k.startswith("CacheWarmerAgentPolicy")
    ]
    far_names = [r["Fn::GetStackOutput"] for r in agent["Properties"]["Roles"] if "Fn::GetStackOutput" in r]
    assert [(o["StackName"], o["Region"]) for o in far_names] == [(REMOTE, FAR)]
    assert far_names[0]["OutputName"] in publish
    [ssm_agent] = _of(far, "AWS::IAM::ManagedPolicy").values()
    [register] = [
        st
        for st in resolve(ssm_agent["Properties"]["PolicyDocument"]["Statement"], far)
        if st.get("Sid") == "RegisterThisInstance"
    ]
    assert _list(register["Resource"]) == [f"arn:aws:ec2:{FAR}:{ACCOUNT}:instance/*"]
    # The home region's SSM agent policy no longer names the far region.
    home_ssm = _policy(two_regions.home, "AWS::IAM::ManagedPolicy", "CacheWarmerPopulatorSsmAgentPolicy")
    assert FAR not in json.dumps(home_ssm)


def test_populators_decrypt_only_through_s3_of_the_source_region(two_regions: TwoRegions) -> None:
    agent = _policy(two_regions.home, "AWS::IAM::ManagedPolicy", "CacheWarmerAgentPolicy")
    [key] = [st for st in agent if st.get("Sid") == "StatusBucketKey"]
    assert key["Condition"] == {"StringEquals": {"kms:ViaService": f"s3.{SOURCE}.amazonaws.com"}}


def test_the_controller_is_told_the_far_regions_vpc_template_documents_and_logs(
    two_regions: TwoRegions,
) -> None:
    fn = next(iter(two_regions.home.resources("AWS::Lambda::Function").values()))
    env = fn["Properties"]["Environment"]["Variables"]
    assert env["DESTINATION_REGIONS"] == FAR
    assert env["DOCUMENT_VERSION"] == "1"
    settings = json.loads(str(resolve(env["DESTINATION_REGION_SETTINGS"], two_regions.home.template)))
    [(region, far)] = settings.items()
    assert region == FAR and far["vpc_id"] == FAR_VPC
    assert far["launch_template_id"].startswith(f"output-{REMOTE}".lower())
    assert far["agent_log_group"].startswith(f"output-{REMOTE}".lower())
    assert far["documents"] == two_regions.warmer.document_names
    assert len(env["POPULATOR_ROLE_ARNS"]["Fn::Join"][1]) == 2  # the home and the far populator roles


def test_a_bad_destination_region_is_refused_at_synth() -> None:
    from aws_cdk import App, Stack
    from cachewarm_infra.iam_remote import check_destination_regions

    stack = Stack(App(), "S", env={"region": SOURCE})
    assert check_destination_regions(stack, [FAR]) == (FAR,)
    for bad in ([SOURCE], ["us-west-2a"], [FAR, FAR], ["*"]):
        with pytest.raises(ValueError, match="destination_regions"):
            check_destination_regions(stack, bad)


def test_destination_regions_need_the_stacks_own_region() -> None:
    """The far stack fetches the home region's artifacts: an environment-agnostic stack cannot say where."""
    from aws_cdk import App
    from cachewarm_infra.stack import CacheWarmStack, StackSettings

    settings = StackSettings(
        destination_regions=(FAR,),
        destination_vpcs={FAR: FAR_VPC},
        remote_security_group_ids={FAR: (FAR_SG,)},
    )
    with pytest.raises(ValueError, match="needs the stack's own region"):
        CacheWarmStack(App(), "Agnostic", settings=settings)
