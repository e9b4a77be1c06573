"""The construct and the stack settings refuse bad inputs with errors naming the problem (no synth)."""

from __future__ import annotations

import json
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
    base: dict[str, Any] = {
        "asl_path": asl_path(),
        "lambdas_dir": lambdas_dir(),
        "ssm_documents_dir": documents_dir(),
        "dumper_tarball": dumper,
        "agent_bundle": agent,
        "vpc": ec2.Vpc.from_vpc_attributes(stack, "V", vpc_id="vpc-1", availability_zones=["us-east-1a"]),
        "machine_image": ec2.MachineImage.latest_amazon_linux2023(),
        "instance_type": ec2.InstanceType("c6i.large"),
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
