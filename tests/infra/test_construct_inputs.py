"""The construct and the stack settings refuse bad inputs with errors naming the problem (no synth)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from cachewarm_infra.asl import unsupported_integrations
from cachewarm_infra.construct import CacheWarmer, CacheWarmerProps
from cachewarm_infra.stack import StackSettings

from tests.infra.support import REPO, asl_path, documents_dir, lambdas_dir, write_artifacts


def props(tmp_path: Path, **over: Any) -> CacheWarmerProps:
    dumper, agent = write_artifacts(tmp_path)
    stack = Stack(App(), "S")
    group = ec2.SecurityGroup.from_security_group_id(stack, "G", "sg-0123456789abcdef0")
    base: dict[str, Any] = {
        "asl_path": asl_path(),
        "lambdas_dir": lambdas_dir(),
        "ssm_documents_dir": documents_dir(),
        "dumper_tarball": dumper,
        "agent_bundle": agent,
        "vpc": ec2.Vpc.from_vpc_attributes(stack, "V", vpc_id="vpc-1", availability_zones=["us-east-1a"]),
        "machine_image": ec2.MachineImage.latest_amazon_linux2023(),
        "instance_type": ec2.InstanceType("c6i.large"),
        "destination_security_groups": [group],
        "source_security_groups": [group],
    }
    base.update(over)
    return CacheWarmerProps(**base)


def build(p: CacheWarmerProps) -> None:
    CacheWarmer(Stack.of(p.vpc), "W", p)


def test_missing_asl(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="state machine definition not found"):
        build(props(tmp_path, asl_path=tmp_path / "nope.asl.json"))


def test_asl_without_functions(tmp_path: Path) -> None:
    asl = tmp_path / "x.asl.json"
    asl.write_text(json.dumps({"StartAt": "A", "States": {"A": {"Type": "Pass", "End": True}}}))
    with pytest.raises(ValueError, match=r"no .*FunctionArn"):
        build(props(tmp_path, asl_path=asl))


def test_asl_not_json(tmp_path: Path) -> None:
    asl = tmp_path / "x.asl.json"
    asl.write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        build(props(tmp_path, asl_path=asl))


def test_unknown_service_integration_is_refused(tmp_path: Path) -> None:
    doc = {
        "StartAt": "A",
        "States": {
            "A": {"Type": "Task", "Resource": "${AFunctionArn}", "Next": "B"},
            "B": {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:ec2:deleteVolume", "End": True},
        },
    }
    assert unsupported_integrations(doc) == ["arn:aws:states:::aws-sdk:ec2:deleteVolume"]
    asl = tmp_path / "x.asl.json"
    asl.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="aws-sdk:ec2:deleteVolume"):
        build(props(tmp_path, asl_path=asl))


def test_missing_artifacts_name_make_dist(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"agent bundle not found: .*make dist"):
        build(props(tmp_path, agent_bundle=tmp_path / "missing.tar.gz"))


def test_document_parameter_without_pattern(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for f in documents_dir().glob("*.json"):
        (docs / f.name).write_text(f.read_text())
    bad = json.loads((docs / "dump-agent.json").read_text())
    bad["parameters"]["extra"] = {"type": "String"}
    (docs / "dump-agent.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="extra has no allowedPattern"):
        build(props(tmp_path, ssm_documents_dir=docs))


def test_missing_document(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "dump-agent.json").write_text((documents_dir() / "dump-agent.json").read_text())
    with pytest.raises(FileNotFoundError, match=r"populate-agent\.json not found"):
        build(props(tmp_path, ssm_documents_dir=docs))


def test_settings_from_context() -> None:
    app = App(
        context={
            "subnetIds": "subnet-a, subnet-b,",
            "tracing": "false",
            "asgNames": "g1",
            "dumperTarball": "/abs/d.tar.gz",
            "instanceType": "m7i.xlarge",
        }
    )
    s = StackSettings.from_context(app.node, REPO)
    assert s.subnet_ids == ("subnet-a", "subnet-b")
    assert s.tracing is False and s.asg_names == ("g1",)
    assert s.dumper_tarball == Path("/abs/d.tar.gz")
    assert s.agent_bundle == REPO / "build" / "dist" / "cachewarm-agent.tar.gz"
    assert s.asl_path == REPO / "statemachine" / "warm.asl.json"
    assert s.instance_type == "m7i.xlarge"


def test_security_groups_and_destination_regions_from_context() -> None:
    """`sg-…` is the stack's region, `<region>=sg-…` a destination region's; every destination region
    needs its VPC and groups."""
    far = "us-west-2"
    s = StackSettings.from_context(
        App(
            context={
                "destinationSecurityGroupIds": f"sg-0123456789abcdef0, {far}=sg-0fedcba9876543210",
                "sourceSecurityGroupIds": "sg-0123456789abcdef1",
                "destinationRegions": far,
                "destinationVpcs": f"{far}=vpc-0123456789abcdef0",
            }
        ).node,
        REPO,
    )
    assert s.destination_security_group_ids == ("sg-0123456789abcdef0",)
    assert s.source_security_group_ids == ("sg-0123456789abcdef1",)
    assert s.remote_security_group_ids == {far: ("sg-0fedcba9876543210",)}
    assert s.destination_vpcs == {far: "vpc-0123456789abcdef0"}
    # cdk.json may hold the map as an object.
    s = StackSettings.from_context(
        App(
            context={
                "destinationSecurityGroupIds": f"{far}=sg-0fedcba9876543210",
                "destinationRegions": far,
                "destinationVpcs": {far: "vpc-0123456789abcdef0"},
            }
        ).node,
        REPO,
    )
    assert s.destination_vpcs == {far: "vpc-0123456789abcdef0"}


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"memcachedSecurityGroupIds": "sg-0123456789abcdef0"}, "replaced by destinationSecurityGroupIds"),
        ({"destinationSecurityGroupIds": "sg-nope"}, "expected sg-… or <region>=sg-…"),
        ({"sourceSecurityGroupIds": "us-west-2=sg-0123456789abcdef0"}, "sources are in the stack's region"),
        ({"destinationRegions": "us-west-2"}, "no VPC for destination region us-west-2"),
        (
            {"destinationRegions": "us-west-2", "destinationVpcs": "us-west-2=vpc-0123456789abcdef0"},
            "no group in destination region us-west-2",
        ),
        ({"destinationVpcs": "us-west-2=vpc-0123456789abcdef0"}, "not in destinationRegions"),
        ({"destinationRegions": "us-west-2", "destinationVpcs": "us-west-2=subnet-1"}, "not a VPC id"),
    ],
)
def test_bad_security_group_and_region_context_is_named(context: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StackSettings.from_context(App(context=context).node, REPO)


@pytest.mark.parametrize("missing", ["destination_security_groups", "source_security_groups"])
def test_the_construct_needs_both_kinds_of_memcached_groups(tmp_path: Path, missing: str) -> None:
    """No group, no populator egress to memcached at all (before: 10/8, 172.16/12, 192.168/16)."""
    with pytest.raises(ValueError, match=f"{missing}: name the"):
        build(props(tmp_path, **{missing: []}))


def test_the_app_names_a_missing_group_in_one_error_line(tmp_path: Path) -> None:
    """`cdk synth` without the groups: `error: …` on stderr, exit 1, no traceback."""
    import os
    import subprocess
    import sys

    dumper, agent = write_artifacts(tmp_path)
    context = {"aslPath": str(asl_path()), "dumperTarball": str(dumper), "agentBundle": str(agent)}
    env = {
        **os.environ,
        "CDK_OUTDIR": str(tmp_path / "out"),
        "CDK_CONTEXT_JSON": json.dumps({**context, "sourceSecurityGroupIds": "sg-0123456789abcdef1"}),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    proc = subprocess.run(
        [sys.executable, "infra/app.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: destination_security_groups:"), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "destinationSecurityGroupIds" in proc.stderr


def test_settings_without_a_checkout_leave_the_files_to_the_package() -> None:
    """An installed package's stack (no `repo`): paths not given take the packaged files."""
    s = StackSettings.from_context(App(context={"dumperTarball": "/abs/d.tar.gz"}).node)
    assert s.paths() == {"dumper_tarball": Path("/abs/d.tar.gz")}


def test_packaged_defaults_are_named_when_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Props without paths take the package's files; a source checkout has none, and says what to do."""
    from cachewarm_infra import assets

    monkeypatch.setattr(assets, "ASSETS_DIR", tmp_path / "assets")
    vpc = ec2.Vpc.from_vpc_attributes(Stack(App(), "S"), "V", vpc_id="vpc-1", availability_zones=["a"])
    with pytest.raises(FileNotFoundError, match=r"warm\.asl\.json.*make dist.*pass the\s+path"):
        CacheWarmerProps(vpc=vpc)
    (tmp_path / "assets" / "statemachine").mkdir(parents=True)
    (tmp_path / "assets" / "statemachine" / "warm.asl.json").write_text("{}")
    p = CacheWarmerProps(
        vpc=vpc,
        lambdas_dir=lambdas_dir(),
        ssm_documents_dir=documents_dir(),
        dumper_tarball=tmp_path / "d",
        agent_bundle=tmp_path / "a",
    )
    assert p.asl_path == tmp_path / "assets" / "statemachine" / "warm.asl.json"
    assert p.instance_type is not None and p.machine_image is not None


def test_settings_reject_bad_tracing() -> None:
    with pytest.raises(ValueError, match="tracing='yes'"):
        StackSettings.from_context(App(context={"tracing": "yes"}).node, REPO)


def test_artifact_url_parameters_are_fixed_at_synth(tmp_path: Path) -> None:
    """A document that names agentBundleUrl / dumperTarballUrl gets the stack's own artifacts written
    into its steps, and the parameters are gone: no caller can point it elsewhere."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for f in documents_dir().glob("*.json"):
        doc = json.loads(f.read_text())
        pattern = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[0-9a-f]{64}\.[a-z.]{1,10}$"
        doc["parameters"]["agentBundleUrl"] = {"type": "String", "allowedPattern": pattern}
        doc["parameters"]["dumperTarballUrl"] = {"type": "String", "allowedPattern": pattern}
        doc["mainSteps"][0]["inputs"]["runCommand"].append(
            "echo '{{ agentBundleUrl }}' '{{dumperTarballUrl}}'"
        )
        (docs / f.name).write_text(json.dumps(doc))
    p = props(tmp_path, ssm_documents_dir=docs)
    warmer = CacheWarmer(Stack.of(p.vpc), "W", p)
    stack = Stack.of(p.vpc)
    for doc in warmer.documents.values():
        content = stack.resolve(doc.content)
        assert not {"agentBundleUrl", "dumperTarballUrl"} & set(content.get("parameters", {}))
        last = content["mainSteps"][0]["inputs"]["runCommand"][-1]
        assert "{{" not in json.dumps(last) and "Fn::" in json.dumps(last), last


def test_missing_teardown_asl(tmp_path: Path) -> None:
    """The teardown machine for stopped warms is not optional: a warm ASL without it is refused."""
    asl = tmp_path / "warm.asl.json"
    asl.write_text(asl_path().read_text())
    with pytest.raises(FileNotFoundError, match=r"teardown\.asl\.json"):
        build(props(tmp_path, asl_path=asl))


def test_teardown_asl_path_can_be_given(tmp_path: Path) -> None:
    asl = tmp_path / "warm.asl.json"
    asl.write_text(asl_path().read_text())
    teardown = REPO / "statemachine" / "teardown.asl.json"
    p = props(tmp_path, asl_path=asl, teardown_asl_path=teardown)
    warmer = CacheWarmer(Stack.of(p.vpc), "W", p)
    assert warmer.teardown_machine is not None


def test_lambda_timeout_longer_than_the_teardown_grace_is_refused(tmp_path: Path) -> None:
    """The teardown machine's first Wait must outlast any Lambda a stopped warm still runs."""
    from aws_cdk import Duration

    with pytest.raises(ValueError, match=r"Wait longer than the Lambda timeout \(600 s\)"):
        build(props(tmp_path, lambda_timeout=Duration.minutes(10)))


def test_the_agent_version_comes_from_the_bundle(tmp_path: Path) -> None:
    """`make dist`'s bundle names the version (its wheel); the documents expect exactly that one."""
    from aws_cdk import Stack as _Stack

    bundle_dir = tmp_path / "v2"
    bundle_dir.mkdir()
    dumper, agent = write_artifacts(bundle_dir, version="2.3.4")
    p = props(tmp_path, dumper_tarball=dumper, agent_bundle=agent)
    warmer = CacheWarmer(_Stack.of(p.vpc), "W", p)
    assert warmer.artifacts.version == "2.3.4"
    for stem in ("dump-agent", "populate-agent", "verify-agent", "install-agent"):
        content = warmer.documents[stem].content
        assert "agentVersion" not in content.get("parameters", {}), stem
        assert "'2.3.4'" in json.dumps(content["mainSteps"]), stem
    import hashlib

    install = json.dumps(warmer.documents["install-agent"].content["mainSteps"])
    assert hashlib.sha256(agent.read_bytes()).hexdigest() in install


def test_a_bundle_without_a_wheel_is_refused(tmp_path: Path) -> None:
    agent = tmp_path / "a.tar.gz"
    agent.write_bytes(b"not a tarball")
    with pytest.raises(ValueError, match="not a gzipped tarball"):
        build(props(tmp_path, agent_bundle=agent))


def test_tracing_off_turns_powertools_tracer_off(tmp_path: Path) -> None:
    from aws_cdk.assertions import Template

    p = props(tmp_path, tracing=False)
    build(p)
    functions = Template.from_stack(Stack.of(p.vpc)).find_resources("AWS::Lambda::Function")
    assert functions
    for fn in functions.values():
        assert fn["Properties"]["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == "true"
        assert fn["Properties"].get("TracingConfig", {}).get("Mode") != "Active"


def test_document_names_follow_the_content_and_the_construct() -> None:
    """A document's name ends in a digest of its content (so version 1 is that content) and of the
    construct's path (two warmers in one stack do not collide); the same input names it the same."""
    from cachewarm_infra.compute import document_name
    from constructs import Construct

    stack = Stack(App(), "Named")
    a, b = Construct(stack, "A"), Construct(stack, "B")
    content = {"schemaVersion": "2.2", "mainSteps": [{"name": "x"}]}
    name = document_name(a, "dump-agent", content)
    assert re.fullmatch(r"Named-dump-agent-[0-9a-f]{12}", name)
    assert document_name(a, "dump-agent", dict(content)) == name
    assert document_name(b, "dump-agent", content) != name
    assert document_name(a, "dump-agent", {**content, "description": "changed"}) != name
