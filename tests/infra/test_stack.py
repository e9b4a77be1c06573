"""Template tests of the CacheWarm stack (one synth per session, see conftest.py)."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template
from cachewarm_infra.asl import AslTask, discover_function_substitutions, placeholders
from cachewarm_infra.orchestration import POWERTOOLS_VERSION, asg_launch_pattern

from tests.infra.support import REPO, Synth, asl_path, documents_dir, lambdas_dir


@pytest.fixture(scope="module")
def template(synth: Synth) -> Template:
    return Template.from_json(synth.template)


def _statements(synth: Synth) -> list[tuple[str, dict[str, Any]]]:
    """Every IAM statement in the template: (resource logical id, statement)."""
    out = []
    for lid, res in synth.template["Resources"].items():
        props = res.get("Properties", {})
        docs = []
        if res["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            docs.append(props["PolicyDocument"])
        if res["Type"] == "AWS::IAM::Role":
            docs.extend(p["PolicyDocument"] for p in props.get("Policies", []))
        for doc in docs:
            out.extend((lid, st) for st in doc["Statement"])
    return out


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def _machine(synth: Synth, prefix: str = "CacheWarmerStateMachine") -> tuple[str, dict[str, Any]]:
    """(logical id, resource) of the warm state machine, or of the teardown machine with
    prefix="CacheWarmerTeardownStateMachine"."""
    [found] = [
        (k, v) for k, v in synth.resources("AWS::StepFunctions::StateMachine").items() if k.startswith(prefix)
    ]
    return found


def _definition(machine: dict[str, Any]) -> str:
    definition = machine["Properties"]["DefinitionString"]
    return definition if isinstance(definition, str) else "".join(str(p) for p in definition["Fn::Join"][1])


def _controller_statements(synth: Synth) -> dict[str, dict[str, Any]]:
    policies = synth.resources("AWS::IAM::Policy")
    [(_, policy)] = [(k, v) for k, v in policies.items() if k.startswith("CacheWarmerControllerPolicy")]
    return {st["Sid"]: st for st in policy["Properties"]["PolicyDocument"]["Statement"]}


# ---- ASL discovery ------------------------------------------------------------------------------


def test_pascal_to_handler_names() -> None:
    assert AslTask("CheckProgress").handler == "cachewarm_controller.handlers.check_progress"
    assert AslTask("ValidateInput").snake == "validate_input"
    assert AslTask("SSMStartAgents").snake == "ssm_start_agents"
    assert AslTask("Teardown").placeholder == "TeardownFunctionArn"


def test_discovery_finds_each_function_once() -> None:
    text = '{"a": "${CheckProgressFunctionArn}", "b": "${CheckProgressFunctionArn}", "c": "${StatusBucket}"}'
    assert [t.pascal for t in discover_function_substitutions(text)] == ["CheckProgress"]


# ---- Lambdas ------------------------------------------------------------------------------------


def test_one_function_per_asl_placeholder(synth: Synth) -> None:
    tasks = discover_function_substitutions(asl_path().read_text())
    functions = synth.resources("AWS::Lambda::Function")
    handlers = sorted(f["Properties"]["Handler"] for f in functions.values())
    assert handlers == sorted(t.handler for t in tasks)
    for fn in functions.values():
        p = fn["Properties"]
        assert p["Runtime"] == "python3.12"
        assert p["TracingConfig"] == {"Mode": "Active"}
        assert len(p["Layers"]) == 1 and "Ref" in p["Layers"][0]  # the public Powertools layer parameter
        env = p["Environment"]["Variables"]
        for var in ("STATUS_BUCKET", "DUMP_DOCUMENT_NAME", "POPULATE_DOCUMENT_NAME", "KMS_KEY_ID"):
            assert var in env, var
        assert env["POWERTOOLS_SERVICE_NAME"] == "cachewarm"
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "CacheWarm"
        assert "LoggingConfig" in p  # its own log group, with retention (below)


def test_handlers_exist_in_lambda_code(synth: Synth) -> None:
    """Every handler the stack points at is a function in the deployed code (no import at runtime)."""
    handlers_py = lambdas_dir() / "cachewarm_controller" / "handlers.py"
    if not handlers_py.exists():
        pytest.skip("lambdas/cachewarm_controller/handlers.py not written yet")
    source = handlers_py.read_text()
    for task in discover_function_substitutions(asl_path().read_text()):
        assert re.search(rf"^(def {task.snake}\b|{task.snake}\s*=)", source, re.M) or re.search(
            rf"\b{task.snake}\b\s*=", source
        ), f"{handlers_py} has no handler {task.snake} for ${{{task.placeholder}}}"


def test_powertools_layer_pinned_like_pyproject(synth: Synth) -> None:
    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lambdas"]
    assert f"aws-lambda-powertools[tracer]=={POWERTOOLS_VERSION}" in pins
    params = synth.template["Parameters"]
    assert any(
        p.get("Default") == f"/aws/service/powertools/python/x86_64/python3.12/{POWERTOOLS_VERSION}"
        for p in params.values()
    )


def test_log_groups_have_retention(synth: Synth) -> None:
    groups = synth.resources("AWS::Logs::LogGroup")
    # One per function, one per state machine (warm, teardown), one for the agents' command output.
    assert len(groups) == len(synth.resources("AWS::Lambda::Function")) + 3
    assert all(g["Properties"]["RetentionInDays"] == 30 for g in groups.values())


# ---- the state machine --------------------------------------------------------------------------


def test_state_machine_standard_logged_traced(template: Template) -> None:
    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineType": "STANDARD",
            "TracingConfiguration": {"Enabled": True},
            "LoggingConfiguration": {
                "Level": "ALL",
                "IncludeExecutionData": True,
                "Destinations": Match.any_value(),
            },
        },
    )


def test_asl_substitutions_complete(synth: Synth) -> None:
    """The deployed definition is the ASL file verbatim, and every placeholder has a substitution."""
    _, sm = _machine(synth)
    props = sm["Properties"]
    text = _definition(sm)
    assert json.loads(text) == json.loads(asl_path().read_text())
    subs = props["DefinitionSubstitutions"]
    missing = placeholders(text) - set(subs)
    assert not missing, f"ASL placeholders without a substitution: {missing}"
    functions = synth.resources("AWS::Lambda::Function")
    for task in discover_function_substitutions(text):
        ref = subs[task.placeholder]
        assert ref["Fn::GetAtt"][1] == "Arn"
        assert functions[ref["Fn::GetAtt"][0]]["Properties"]["Handler"] == task.handler


def _invoke_statements(synth: Synth) -> dict[str, dict[str, Any]]:
    """The InvokeControllerFunctions statement of each state machine, by the machine's logical id."""
    roles = {
        sm["Properties"]["RoleArn"]["Fn::GetAtt"][0]: lid
        for lid, sm in synth.resources("AWS::StepFunctions::StateMachine").items()
    }
    out = {}
    for policy in synth.resources("AWS::IAM::Policy").values():
        for st in policy["Properties"]["PolicyDocument"]["Statement"]:
            if st.get("Sid") == "InvokeControllerFunctions":
                [role] = policy["Properties"]["Roles"]
                out[roles[role["Ref"]]] = st
    return out


def test_state_machine_may_invoke_exactly_its_functions(synth: Synth) -> None:
    stmts = _invoke_statements(synth)
    sm, _ = _machine(synth)
    invoked = {r["Fn::GetAtt"][0] for r in _as_list(stmts[sm]["Resource"])}
    assert invoked == set(synth.resources("AWS::Lambda::Function"))
    assert stmts[sm]["Action"] == "lambda:InvokeFunction"


# ---- SSM documents ------------------------------------------------------------------------------


def test_ssm_documents_deployed_from_files(synth: Synth) -> None:
    docs = synth.resources("AWS::SSM::Document")
    files = sorted(documents_dir().glob("*.json"))
    assert len(docs) == len(files)
    contents = [d["Properties"]["Content"] for d in docs.values()]
    for f in files:
        want = json.loads(f.read_text())
        got = [c for c in contents if c.get("description") == want.get("description")]
        assert got, f"{f.name} not deployed"
        assert got[0]["mainSteps"] == want["mainSteps"]
    for d in docs.values():
        assert d["Properties"]["DocumentType"] == "Command"
        for name, spec in d["Properties"]["Content"].get("parameters", {}).items():
            assert "allowedPattern" in spec or "allowedValues" in spec, name


# ---- storage ------------------------------------------------------------------------------------


def test_status_bucket_encrypted_private_tls(synth: Synth, template: Template) -> None:
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {
                        "ServerSideEncryptionByDefault": {
                            "SSEAlgorithm": "aws:kms",
                            "KMSMasterKeyID": Match.any_value(),
                        }
                    }
                ]
            },
            "LoggingConfiguration": Match.object_like({"LogFilePrefix": "status-bucket/"}),
        },
    )
    for bucket in synth.resources("AWS::S3::Bucket").values():
        p = bucket["Properties"]
        assert p["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert "BucketEncryption" in p
    policies = synth.resources("AWS::S3::BucketPolicy")
    assert len(policies) == 2
    for pol in policies.values():
        deny = [
            s
            for s in pol["Properties"]["PolicyDocument"]["Statement"]
            if s["Effect"] == "Deny"
            and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
        ]
        assert deny, "bucket does not enforce TLS"


def test_kms_key_rotates(template: Template) -> None:
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_artifacts_are_assets_the_agents_may_read(synth: Synth) -> None:
    manifest = json.loads((synth.outdir / "CacheWarmTest.assets.json").read_text())
    packaged = {f["source"]["path"] for f in manifest["files"].values()}
    assert any(p.endswith(".tar.gz") for p in packaged)
    [agent_policy] = synth.resources("AWS::IAM::ManagedPolicy").values()
    read = next(
        s for s in agent_policy["Properties"]["PolicyDocument"]["Statement"] if s["Sid"] == "ReadArtifacts"
    )
    assert read["Action"] == "s3:GetObject"
    assert len(read["Resource"]) == 3  # dumper, agent bundle, install script


# ---- populators ---------------------------------------------------------------------------------


def test_launch_template_hardened(template: Template) -> None:
    template.has_resource_properties(
        "AWS::EC2::LaunchTemplate",
        {
            "LaunchTemplateData": Match.object_like(
                {
                    "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1},
                    "InstanceType": {"Ref": "PopulatorInstanceType"},
                    "ImageId": {"Ref": Match.string_like_regexp("SsmParameterValue.*al2023")},
                    "IamInstanceProfile": Match.any_value(),
                    "InstanceInitiatedShutdownBehavior": "terminate",
                    "BlockDeviceMappings": [
                        Match.object_like(
                            {"Ebs": Match.object_like({"Encrypted": True, "KmsKeyId": Match.any_value()})}
                        )
                    ],
                }
            )
        },
    )
    template.resource_count_is("AWS::IAM::InstanceProfile", 1)


def _asset_key(synth: Synth, output: str) -> str:
    """The S3 object key in a `s3://<bucket>/<key>` stack output."""
    value = json.dumps(synth.template["Outputs"][output]["Value"])
    [key] = re.findall(r"/([0-9a-f]{64}\.[a-z.]+)", value)
    return key


def test_populators_install_this_deployments_agent_at_boot(synth: Synth) -> None:
    """User data runs the same install script as the install-agent document, checksum checked."""
    [lt] = synth.resources("AWS::EC2::LaunchTemplate").values()
    user_data = json.dumps(lt["Properties"]["LaunchTemplateData"]["UserData"])
    assert "dnf install -y -q python3.11 python3.11-pip xfsprogs" in user_data
    assert "install-agent.sh" in user_data and "sha256sum -c" in user_data
    assert _asset_key(synth, "AgentBundleUrl") in user_data
    assert _asset_key(synth, "DumperTarballUrl") not in user_data  # populators never dump
    warmer = synth.warmer
    assert f"--version '{warmer.artifacts.version}'" in user_data
    assert warmer.artifacts.agent_sha256 in user_data and warmer.artifacts.installer_sha256 in user_data


def test_install_document_defaults_are_this_deployments_artifacts(synth: Synth) -> None:
    [doc] = [
        d for k, d in synth.resources("AWS::SSM::Document").items() if k.startswith("CacheWarmerInstallAgent")
    ]
    params = doc["Properties"]["Content"]["parameters"]
    a = synth.warmer.artifacts
    assert params["agentBundleSha256"]["default"] == a.agent_sha256
    assert params["dumperTarballSha256"]["default"] == a.dumper_sha256
    assert params["installScriptSha256"]["default"] == a.installer_sha256
    assert params["agentVersion"]["default"] == a.version == "0.1.0"
    for name in ("agentBundleUrl", "dumperTarballUrl", "installScriptUrl"):
        assert "Fn::Sub" in json.dumps(params[name]["default"]), name


def test_populator_role_is_ssm_core_plus_agent_policy(synth: Synth) -> None:
    roles = synth.resources("AWS::IAM::Role")
    [role] = [r for k, r in roles.items() if k.startswith("CacheWarmerPopulatorRole")]
    arns = role["Properties"]["ManagedPolicyArns"]
    assert len(arns) == 2
    assert "AmazonSSMManagedInstanceCore" in json.dumps(arns)
    assert {"Ref": next(iter(synth.resources("AWS::IAM::ManagedPolicy")))} in arns
    assert "Policies" not in role["Properties"]
    # Nothing else is attached to the populator role.
    for pol in synth.resources("AWS::IAM::Policy").values():
        assert {"Ref": next(k for k in roles if k.startswith("CacheWarmerPopulatorRole"))} not in pol[
            "Properties"
        ].get("Roles", [])


def test_populator_security_group_has_no_ingress(synth: Synth) -> None:
    [sg] = synth.resources("AWS::EC2::SecurityGroup").values()
    assert "SecurityGroupIngress" not in sg["Properties"]
    assert not synth.resources("AWS::EC2::SecurityGroupIngress")


# ---- IAM ----------------------------------------------------------------------------------------


def test_no_wildcard_actions_anywhere(synth: Synth) -> None:
    for lid, st in _statements(synth):
        for action in _as_list(st["Action"]):
            assert "*" not in action, f"{lid}: wildcard action {action}"
        assert st["Effect"] in ("Allow", "Deny")
        assert "NotAction" not in st and "NotResource" not in st, lid


def test_star_resources_only_for_unscopable_reads(synth: Synth) -> None:
    """`Resource: "*"` only on actions IAM cannot scope (Describe/List, X-Ray, log delivery)."""
    allowed = re.compile(
        r"^(ec2:Describe\w+|autoscaling:Describe\w+|ssm:(Describe|List|Get)\w+|ssm:CancelCommand|"
        r"xray:\w+|logs:(CreateLogDelivery|GetLogDelivery|UpdateLogDelivery|DeleteLogDelivery|ListLogDeliveries|"
        r"PutResourcePolicy|DescribeResourcePolicies|DescribeLogGroups))$"
    )
    for lid, st in _statements(synth):
        if st["Effect"] == "Allow" and "*" in _as_list(st["Resource"]):
            for action in _as_list(st["Action"]):
                assert allowed.match(action), f"{lid}: {action} on Resource *"


def test_ec2_mutations_are_tag_scoped(synth: Synth) -> None:
    s = _controller_statements(synth)
    req = {"StringEquals": {"aws:RequestTag/cachewarm:managed": "true"}}
    res = {"StringEquals": {"aws:ResourceTag/cachewarm:managed": "true"}}
    assert s["CreateTaggedVolumes"]["Action"] == "ec2:CreateVolume"
    assert s["CreateTaggedVolumes"]["Condition"] == req
    assert s["LaunchTaggedPopulators"]["Action"] == "ec2:RunInstances"
    assert s["LaunchTaggedPopulators"]["Condition"] == req
    assert s["DeleteOurVolumes"]["Condition"] == res
    assert s["TerminateOurPopulators"]["Condition"] == res
    assert s["AttachOurVolumes"]["Condition"] == res
    assert ":volume/*" in json.dumps(s["AttachOurVolumes"]["Resource"])
    assert s["TagOnCreateOnly"]["Condition"] == {
        "StringEquals": {"ec2:CreateAction": ["CreateVolume", "RunInstances"]}
    }
    assert s["PassPopulatorRole"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}
    }
    assert s["GrantKeyToEbs"]["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}
    # Every ec2 mutation the controller may do appears only in these statements.
    mutating = {"ec2:CreateVolume", "ec2:DeleteVolume", "ec2:TerminateInstances", "ec2:CreateTags"}
    for sid, st in s.items():
        hit = mutating & set(_as_list(st["Action"]))
        if hit:
            assert "Condition" in st, f"{sid}: {hit} without a tag condition"


def test_run_instances_only_from_our_launch_template(synth: Synth) -> None:
    st = _controller_statements(synth)["LaunchFromTemplate"]
    lt = next(iter(synth.resources("AWS::EC2::LaunchTemplate")))
    assert lt in json.dumps(st["Resource"])
    assert ":instance/" not in json.dumps(st["Resource"])


def test_send_command_only_our_documents_to_tagged_instances(synth: Synth) -> None:
    """Documents: only this stack's (no AWS-RunShellScript). Instances: only populators it launched
    (cachewarm:managed=true) and nodes the platform tagged cachewarm:replica — tags the controller
    cannot set itself (CreateTags only inside its own Create/Run calls)."""
    st = _controller_statements(synth)
    docs = json.dumps(st["RunOurDocuments"]["Resource"])
    for lid in synth.resources("AWS::SSM::Document"):
        assert lid in docs
    assert "document/*" not in docs and "AWS-RunShellScript" not in json.dumps(synth.template)
    assert ":instance/" not in docs
    populators, replicas = st["CommandsToOurPopulators"], st["CommandsToReplicaNodes"]
    assert populators["Condition"] == {"StringEquals": {"ssm:resourceTag/cachewarm:managed": "true"}}
    assert replicas["Condition"] == {"Null": {"ssm:resourceTag/cachewarm:replica": "false"}}
    for sendable in (populators, replicas):
        assert sendable["Action"] == "ssm:SendCommand" and ":instance/" in json.dumps(sendable["Resource"])
    sends = [s for _, s in _statements(synth) if "ssm:SendCommand" in _as_list(s["Action"])]
    assert len(sends) == 3
    tagging = st["TagOnCreateOnly"]["Condition"]["StringEquals"]["ec2:CreateAction"]
    assert sorted(tagging) == ["CreateVolume", "RunInstances"]


def test_command_output_goes_to_a_log_group_of_the_stack(synth: Synth) -> None:
    fns = synth.resources("AWS::Lambda::Function")
    groups = synth.resources("AWS::Logs::LogGroup")
    [agent_logs] = [k for k in groups if k.startswith("CacheWarmerAgentOutputLogs")]
    for fn in fns.values():
        assert fn["Properties"]["Environment"]["Variables"]["AGENT_LOG_GROUP"] == {"Ref": agent_logs}
    [agent_policy] = synth.resources("AWS::IAM::ManagedPolicy").values()
    output = next(
        s for s in agent_policy["Properties"]["PolicyDocument"]["Statement"] if s["Sid"] == "CommandOutput"
    )
    assert agent_logs in json.dumps(output["Resource"]) and "logs:PutLogEvents" in output["Action"]


def test_every_variable_the_handlers_require_is_set(synth: Synth) -> None:
    from cachewarm_controller.handlers import REQUIRED_ENV

    docs = synth.resources("AWS::SSM::Document")
    for fn in synth.resources("AWS::Lambda::Function").values():
        env = fn["Properties"]["Environment"]["Variables"]
        assert set(REQUIRED_ENV) <= set(env), set(REQUIRED_ENV) - set(env)
        for name in REQUIRED_ENV:
            if name.endswith("_DOCUMENT_NAME"):
                assert env[name]["Ref"] in docs, name


def test_subnet_ids_reach_the_controller(synth: Synth) -> None:
    """The SubnetIds parameter is used: the controller's default populator subnet per AZ."""
    for fn in synth.resources("AWS::Lambda::Function").values():
        env = fn["Properties"]["Environment"]["Variables"]
        assert env["POPULATOR_SUBNET_IDS"] == {"Fn::Join": [",", {"Ref": "SubnetIds"}]}
    handlers = (lambdas_dir() / "cachewarm_controller" / "handlers.py").read_text()
    assert "POPULATOR_SUBNET_IDS" in handlers


# ---- triggers -----------------------------------------------------------------------------------


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

    return bool(EventPattern.load(json.dumps(pattern)).matches_event(event))


def test_replica_deployed_rule_pattern_and_target(synth: Synth) -> None:
    p = _rule(synth, "CacheWarmerReplicaDeployedRule")
    assert p["EventPattern"] == {
        "source": ["cachewarm"],
        "detail-type": ["Replica Deployed"],
        "detail": {
            "warm_id": [{"exists": True}],
            "source": {"replica": [{"exists": True}]},
            "destination": {"endpoints": [{"exists": True}]},
        },
    }
    [target] = p["Targets"]
    sm, _ = _machine(synth)
    assert target["Arn"] == {"Ref": sm}
    assert "DeadLetterConfig" in target and target["RetryPolicy"]["MaximumRetryAttempts"] == 4
    assert target["InputTransformer"]["InputPathsMap"] == {
        "detail-warm_id": "$.detail.warm_id",
        "detail-source-replica": "$.detail.source.replica",
        "detail-destination": "$.detail.destination",
    }


def test_documented_event_starts_a_valid_warm(synth: Synth) -> None:
    """infra/examples/replica-deployed-event.json matches the rule, and the transformed input passes
    the controller's own input validation."""
    event = json.loads((REPO / "infra" / "examples" / "replica-deployed-event.json").read_text())
    p = _rule(synth, "CacheWarmerReplicaDeployedRule")
    assert _matches(p["EventPattern"], event)
    for missing in ("warm_id", "source", "destination"):
        broken = {**event, "detail": {k: v for k, v in event["detail"].items() if k != missing}}
        assert not _matches(p["EventPattern"], broken), missing
    no_endpoints = {**event, "detail": {**event["detail"], "destination": {"replica": "users-v2"}}}
    assert not _matches(p["EventPattern"], no_endpoints)
    rendered = render_transformer(p["Targets"][0], event, "lt-0123456789abcdef0")
    assert rendered == {
        "warm_id": "users-v2-20261122",
        "source": {"replica": "users-v1"},
        "destination": event["detail"]["destination"],
        "populator": {"launch_template_id": "lt-0123456789abcdef0"},
    }
    model = pytest.importorskip("cachewarm_controller.model")
    assert model.parse_input(rendered).warm_id == "users-v2-20261122"


def test_documented_console_input_is_valid() -> None:
    model = pytest.importorskip("cachewarm_controller.model")
    doc = json.loads((REPO / "infra" / "examples" / "start-input.json").read_text())
    assert model.parse_input(doc).destination.endpoints[0] == "10.0.1.21:11211"


def test_documented_put_events_entry_is_the_event() -> None:
    [entry] = json.loads((REPO / "infra" / "examples" / "put-replica-deployed.json").read_text())
    event = json.loads((REPO / "infra" / "examples" / "replica-deployed-event.json").read_text())
    assert (entry["Source"], entry["DetailType"]) == (event["source"], event["detail-type"])
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
    assert set(subs) == {"TeardownFunctionArn"}
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
        "source": "aws.states",
        "detail-type": "Step Functions Execution Status Change",
        "detail": {"status": status, "stateMachineArn": arn, "input": '{"warm_id": "w-1"}'},
    }
    assert _matches(pattern, event) is matches
    other = {**event, "detail": {**event["detail"], "stateMachineArn": arn + "-other"}}
    assert not _matches(pattern, other)


def test_teardown_machine_arn_is_an_output(synth: Synth) -> None:
    teardown, _ = _machine(synth, "CacheWarmerTeardownStateMachine")
    assert synth.template["Outputs"]["TeardownStateMachineArn"]["Value"] == {"Ref": teardown}


def test_asg_example_rule(synth: Synth) -> None:
    [rule] = [r for k, r in _rules(synth).items() if k.startswith("CacheWarmerAsgLaunchRule")]
    event = json.loads((REPO / "infra" / "examples" / "asg-launch-event.json").read_text())
    assert _matches(rule["Properties"]["EventPattern"], event)
    other = {**event, "detail": {**event["detail"], "AutoScalingGroupName": "web-frontend"}}
    assert not _matches(rule["Properties"]["EventPattern"], other)
    assert rule["Properties"]["EventPattern"] == {
        "source": ["aws.autoscaling"],
        "detail-type": ["EC2 Instance Launch Successful"],
        "detail": {"AutoScalingGroupName": ["memcached-replica-b"]},
    }


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


# ---- observability ------------------------------------------------------------------------------


def test_alarms(synth: Synth) -> None:
    teardown, _ = _machine(synth, "CacheWarmerTeardownStateMachine")
    [stopped] = [
        a["Properties"]
        for lid, a in synth.resources("AWS::CloudWatch::Alarm").items()
        if lid.startswith("CacheWarmerStoppedWarmTeardownFailedAlarm")
    ]
    assert stopped["MetricName"] == "ExecutionsFailed"
    assert stopped["Dimensions"] == [{"Name": "StateMachineArn", "Value": {"Ref": teardown}}]
    assert len(synth.resources("AWS::CloudWatch::Alarm")) == 6
    alarms = {
        a["Properties"]["MetricName"]: a["Properties"]
        for lid, a in synth.resources("AWS::CloudWatch::Alarm").items()
        if not lid.startswith("CacheWarmerStoppedWarmTeardownFailedAlarm")
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


# ---- outputs ------------------------------------------------------------------------------------


def test_outputs(synth: Synth) -> None:
    assert {
        "StateMachineArn",
        "StatusBucketName",
        "PopulatorLaunchTemplateId",
        "SourceNodePolicyArn",
        "AgentBundleUrl",
        "DumperTarballUrl",
        "DumpDocumentName",
        "PopulateDocumentName",
        "InstallDocumentName",
        "AgentVersion",
        "AgentOutputLogGroup",
        "PopulatorSecurityGroupId",
    } <= set(synth.template["Outputs"])
    assert {"VpcId", "SubnetIds", "PopulatorInstanceType"} <= set(synth.template["Parameters"])


def test_every_resource_type_is_tested(synth: Synth) -> None:
    """A new resource type must come with a test (update this list and add one)."""
    assert {r["Type"] for r in synth.template["Resources"].values()} == {
        "AWS::CloudWatch::Alarm",
        "AWS::CloudWatch::Dashboard",
        "AWS::EC2::LaunchTemplate",
        "AWS::EC2::SecurityGroup",
        "AWS::Events::Rule",
        "AWS::IAM::InstanceProfile",
        "AWS::IAM::ManagedPolicy",
        "AWS::IAM::Policy",
        "AWS::IAM::Role",
        "AWS::KMS::Key",
        "AWS::Lambda::Function",
        "AWS::Logs::LogGroup",
        "AWS::S3::Bucket",
        "AWS::S3::BucketPolicy",
        "AWS::SQS::Queue",
        "AWS::SQS::QueuePolicy",
        "AWS::SSM::Document",
        "AWS::StepFunctions::StateMachine",
    }


# ---- cdk-nag ------------------------------------------------------------------------------------


def test_cdk_nag_aws_solutions_clean(synth: Synth) -> None:
    assert synth.nag_report is not None, "cdk-nag did not run"
    problems = [
        f"{v['ruleName']} at {c['constructPath']}"
        for plugin in synth.nag_report["pluginReports"]
        for v in plugin["violations"]
        for c in v["violatingConstructs"]
    ]
    assert not problems, "\n".join(problems)
    assert synth.nag_error is None, synth.nag_error


def test_every_nag_acknowledgement_has_a_written_reason(synth: Synth) -> None:
    acks = synth.warmer.nag_acknowledgements
    assert acks
    for path, rule, reason in acks:
        assert rule.startswith("AwsSolutions-"), rule
        assert len(reason) > 40 and reason.endswith("."), f"{path} {rule}: give a real reason"


def test_lambda_code_asset_is_the_lambdas_dir(synth: Synth) -> None:
    """One code asset for every function: the lambdas/ directory without caches or tests (plus the
    contract package it imports: test_lambda_asset.py)."""
    keys = {json.dumps(f["Properties"]["Code"]) for f in synth.resources("AWS::Lambda::Function").values()}
    assert len(keys) == 1
    manifest = json.loads((synth.outdir / "CacheWarmTest.assets.json").read_text())
    dirs = [
        synth.outdir / f["source"]["path"]
        for f in manifest["files"].values()
        if f["source"].get("packaging") == "zip"
    ]
    code = [d for d in dirs if (d / "cachewarm_controller").is_dir()]
    assert len(code) == 1
    files = {p.relative_to(code[0]).as_posix() for p in code[0].rglob("*") if p.is_file()}
    assert "cachewarm_controller/handlers.py" in files
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
