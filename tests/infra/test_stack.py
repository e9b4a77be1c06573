"""Template tests of the CacheWarm stack (one synth per session, see conftest.py)."""

from __future__ import annotations

import json
import re
import tomllib

import pytest
from aws_cdk.assertions import Match, Template
from cachewarm_infra.asl import AslTask, discover_function_substitutions, placeholders
from cachewarm_infra.orchestration import POWERTOOLS_VERSION

from tests.infra.support import (
    REPO,
    Synth,
    _as_list,
    _controller_statements,
    _definition,
    _invoke_statements,
    _machine,
    _statements,
    asl_path,
    documents_dir,
    lambdas_dir,
)


@pytest.fixture(scope="module")
def template(synth: Synth) -> Template:
    return Template.from_json(synth.template)


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
        assert "POWERTOOLS_TRACE_DISABLED" not in p["Environment"]["Variables"]  # Tracer on
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
    fixed = synth.warmer.artifacts.parameter_defaults()
    for f in files:
        want = json.loads(f.read_text())
        got = [c for c in contents if c.get("description") == want.get("description")]
        assert got, f"{f.name} not deployed"
        if not fixed.keys() & want.get("parameters", {}).keys():
            assert got[0]["mainSteps"] == want["mainSteps"]
        # The artifacts and the version are written in at synth, their parameters gone.
        assert not fixed.keys() & got[0].get("parameters", {}).keys(), f.name
        assert not any("{{ " + n in json.dumps(got[0]["mainSteps"]) for n in fixed), f.name
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
    [agent_policy] = [
        p
        for k, p in synth.resources("AWS::IAM::ManagedPolicy").items()
        if k.startswith("CacheWarmerAgentPolicy")
    ]
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


def test_install_document_runs_only_this_deployments_artifacts(synth: Synth) -> None:
    """The script, bundle and dumper URLs and SHA-256s and the version are fixed at synth: the
    document takes no parameter, so SendCommand on it cannot run another script."""
    [doc] = [
        d for k, d in synth.resources("AWS::SSM::Document").items() if k.startswith("CacheWarmerInstallAgent")
    ]
    content = doc["Properties"]["Content"]
    assert "parameters" not in content
    steps = json.dumps(content["mainSteps"])
    a = synth.warmer.artifacts
    for value in (a.agent_sha256, a.dumper_sha256, a.installer_sha256, f"'{a.version}'"):
        assert value in steps, value
    assert "{{" not in steps
    assert "Fn::Sub" in steps or "Fn::Join" in steps  # the asset URLs, resolved by CloudFormation


def test_populator_role_is_the_ssm_agent_channel_plus_agent_policy(synth: Synth) -> None:
    """No AmazonSSMManagedInstanceCore (Parameter Store read on *): the SSM agent's Run Command
    channel and the agent policy, nothing else."""
    roles = synth.resources("AWS::IAM::Role")
    [role] = [r for k, r in roles.items() if k.startswith("CacheWarmerPopulatorRole")]
    arns = role["Properties"]["ManagedPolicyArns"]
    assert sorted(a["Ref"] for a in arns) == sorted(synth.resources("AWS::IAM::ManagedPolicy"))
    assert "arn:" not in json.dumps(arns)  # no AWS-managed policy
    [ssm_agent] = [p for k, p in synth.resources("AWS::IAM::ManagedPolicy").items() if "SsmAgent" in k]
    actions = {
        a for st in ssm_agent["Properties"]["PolicyDocument"]["Statement"] for a in _as_list(st["Action"])
    }
    assert {a.split(":")[0] for a in actions} == {"ssm", "ec2messages", "ssmmessages"}
    assert {a for a in actions if a.startswith("ssm:")} == {"ssm:UpdateInstanceInformation"}
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
        r"s3:ListAllMyBuckets|"
        r"ec2messages:\w+|ssmmessages:\w+|"
        r"xray:\w+|logs:(CreateLogDelivery|GetLogDelivery|UpdateLogDelivery|DeleteLogDelivery|ListLogDeliveries|"
        r"PutResourcePolicy|DescribeResourcePolicies|DescribeLogGroups))$"
    )
    for lid, st in _statements(synth):
        if st["Effect"] == "Allow" and "*" in _as_list(st["Resource"]):
            for action in _as_list(st["Action"]):
                assert allowed.match(action), f"{lid}: {action} on Resource *"


def test_ec2_mutations_are_tag_scoped(synth: Synth) -> None:
    s = _controller_statements(synth)
    stack_tag = synth.template["Resources"][next(k for k in synth.resources("AWS::Lambda::Function"))][
        "Properties"
    ]["Environment"]["Variables"]["STACK_TAG"]
    req = {
        "StringEquals": {
            "aws:RequestTag/cachewarm:managed": "true",
            "aws:RequestTag/cachewarm:stack": stack_tag,
        }
    }
    res = {
        "StringEquals": {
            "aws:ResourceTag/cachewarm:managed": "true",
            "aws:ResourceTag/cachewarm:stack": stack_tag,
        }
    }
    assert s["CreateTaggedVolumes"]["Action"] == "ec2:CreateVolume"
    assert s["CreateTaggedVolumes"]["Condition"] == req
    assert s["LaunchTaggedPopulators"]["Action"] == "ec2:RunInstances"
    assert s["LaunchTaggedPopulators"]["Condition"]["StringEquals"] == req["StringEquals"]
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
    assert s["GrantKeyToEbs"]["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}
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
    stack_tag = next(iter(synth.resources("AWS::Lambda::Function").values()))["Properties"]["Environment"][
        "Variables"
    ]["STACK_TAG"]
    assert populators["Condition"] == {
        "StringEquals": {
            "ssm:resourceTag/cachewarm:managed": "true",
            "ssm:resourceTag/cachewarm:stack": stack_tag,
        }
    }
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
    [agent_policy] = [
        p
        for k, p in synth.resources("AWS::IAM::ManagedPolicy").items()
        if k.startswith("CacheWarmerAgentPolicy")
    ]
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
        "AWS::EC2::SecurityGroupEgress",
        "AWS::Events::EventBus",
        "AWS::Events::EventBusPolicy",
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
        "AWS::SNS::Topic",
        "AWS::SNS::TopicPolicy",
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
