"""What runs on the nodes: the build artifacts (S3 assets, with checksums and the agent's version),
the SSM documents that install and run the agents, and the populator instances (role, security
group, launch template that installs the agent at boot with the same script as the documents)."""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from cachewarm_infra import assets, wheelhouse
from cachewarm_infra.contract import inputs, tags
from cachewarm_infra.props import CacheWarmerProps

# The documents the controller needs (a directory may hold more; each becomes one more document).
REQUIRED_DOCUMENTS = (
    "dump-agent",
    "populate-agent",
    "verify-agent",
    "install-agent",
    "unmount",
    "memcached-stats",
)
INSTALL_DIR = "/opt/cachewarm"
# The one installer: the populators' user data and the install-agent document both run it.
INSTALL_SCRIPT = assets.INSTALL_SCRIPT
_WHEEL = re.compile(r"(?:^|/)cachewarm-([0-9][0-9A-Za-z.+]*)-[^/]*\.whl$")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bundle_version(agent_bundle: Path) -> str:
    """The cachewarm version in the agent bundle (`make dist` puts the wheel in it)."""
    try:
        with tarfile.open(agent_bundle, "r:gz") as tar:
            names = tar.getnames()
    except (tarfile.TarError, OSError) as e:
        raise ValueError(f"{agent_bundle}: not a gzipped tarball ({e}); build it with `make dist`") from e
    versions = {m.group(1) for n in names if (m := _WHEEL.search(n))}
    if len(versions) != 1:
        raise ValueError(f"{agent_bundle}: expected one cachewarm wheel, found {sorted(versions) or 'none'}")
    version = versions.pop()
    if not inputs.matches(inputs.VERSION, version):
        raise ValueError(f"{agent_bundle}: version {version!r} does not match {inputs.VERSION}")
    return version


@dataclass(frozen=True)
class Artifacts:
    """The dumper tarball, the agent bundle and the install script, deployed as S3 assets versioned
    with the stack, with their checksums and the agent's version (read at synth time)."""

    dumper: s3_assets.Asset
    agent: s3_assets.Asset
    installer: s3_assets.Asset
    dumper_sha256: str
    agent_sha256: str
    installer_sha256: str
    version: str

    def parameter_defaults(self) -> dict[str, str]:
        """The SSM document parameters the construct fills in, so the documents always install and
        expect the agent and dumper versioned with this deployment."""
        return {
            "dumperTarballUrl": self.dumper.s3_object_url,
            "dumperTarballSha256": self.dumper_sha256,
            "agentBundleUrl": self.agent.s3_object_url,
            "agentBundleSha256": self.agent_sha256,
            "installScriptUrl": self.installer.s3_object_url,
            "installScriptSha256": self.installer_sha256,
            "agentVersion": self.version,
        }


def build_artifacts(scope: Construct, dumper_tarball: Path, agent_bundle: Path) -> Artifacts:
    return Artifacts(
        dumper=s3_assets.Asset(scope, "DumperTarball", path=str(dumper_tarball)),
        agent=s3_assets.Asset(scope, "AgentBundle", path=str(agent_bundle)),
        installer=s3_assets.Asset(scope, "InstallScript", path=str(INSTALL_SCRIPT)),
        dumper_sha256=sha256_of(dumper_tarball),
        agent_sha256=sha256_of(agent_bundle),
        installer_sha256=sha256_of(INSTALL_SCRIPT),
        version=_checked_bundle_version(agent_bundle),
    )


def _checked_bundle_version(agent_bundle: Path) -> str:
    """The bundle's version, once its lock is shown complete (the nodes install from it alone)."""
    version = bundle_version(agent_bundle)
    wheelhouse.check_bundle(agent_bundle)
    return version


def build_documents(
    scope: Construct,
    documents_dir: Path,
    artifacts: Artifacts,
    names: Mapping[str, str] | None = None,
    transport_bucket_prefix: str | None = None,
) -> dict[str, ssm.CfnDocument]:
    """One Command document per `<documents_dir>/<stem>.json`, keyed by `<stem>`.

    Each is named `<stack name>-<stem>-<12 hex of its content's SHA-256>` (or as `names` says: a
    destination region's copies take the home stack's names), so a change of content is a new
    document and a document's version 1 is always this content: the controller runs
    `DOCUMENT_VERSION` (1) of each, never whatever an `ssm:UpdateDocument` made the default. With
    `transport_bucket_prefix`, the S3 transport's parameters admit only this stack's buckets."""
    docs: dict[str, ssm.CfnDocument] = {}
    fixed = artifacts.parameter_defaults()
    for path in sorted(documents_dir.glob("*.json")):
        try:
            content = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e
        for name, spec in content.get("parameters", {}).items():
            if "allowedPattern" not in spec and "allowedValues" not in spec:
                raise ValueError(f"{path}: parameter {name} has no allowedPattern")
        content = fix_at_synth(path, content, fixed)
        if transport_bucket_prefix:
            content = only_our_transport_buckets(path, content, transport_bucket_prefix)
        name = names[path.stem] if names and path.stem in names else document_name(scope, path.stem, content)
        docs[path.stem] = ssm.CfnDocument(
            scope,
            f"{_pascal(path.stem)}Document",
            name=name,
            content=content,
            document_type="Command",
            document_format="JSON",
        )
    for needed in REQUIRED_DOCUMENTS:
        if needed not in docs:
            raise FileNotFoundError(f"{documents_dir}/{needed}.json not found")
    return docs


# Every document the stack makes is version 1 of its name (build_documents): what SendCommand runs.
DOCUMENT_VERSION = "1"


def document_name(scope: Construct, stem: str, content: Mapping[str, Any]) -> str:
    """`<stack name>-<stem>-<12 hex>`: the SHA-256 of the content as the template holds it (tokens
    such as the artifacts' bucket rendered as CloudFormation intrinsics) and of the construct's path
    (two in one stack), so the same deployment always names it the same and any change of content
    names a new document."""
    stack = Stack.of(scope)
    rendered = json.dumps([scope.node.path, stack.resolve(content)], sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(rendered.encode()).hexdigest()[:12]
    # SSM: 3-128 of [A-Za-z0-9_.-]; stack names are [A-Za-z0-9-], at most 128.
    return f"{stack.stack_name[:96]}-{stem}-{digest}"


TRANSPORT_PARAMETERS = ("toS3", "fromS3")


def only_our_transport_buckets(path: Path, content: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The documents admit any stack's transport bucket name (the contract's pattern); the deployed
    ones admit only this stack's: its prefix in place of the prefix's shape. A command naming any
    other bucket — another account's, another stack's — is refused by SSM before the agent runs."""
    if not re.fullmatch(inputs.TRANSPORT_PREFIX_SHAPE, prefix):
        raise ValueError(f"transport bucket prefix {prefix!r} does not match {inputs.TRANSPORT_PREFIX_SHAPE}")
    params = content.get("parameters", {})
    narrowed = dict(params)
    for name in TRANSPORT_PARAMETERS:
        if name not in params:
            continue
        pattern = params[name]["allowedPattern"]
        if pattern.count(inputs.TRANSPORT_PREFIX_SHAPE) != 1:
            raise ValueError(f"{path}: {name}'s allowedPattern does not name the transport bucket's prefix")
        narrowed[name] = {
            **params[name],
            "allowedPattern": pattern.replace(inputs.TRANSPORT_PREFIX_SHAPE, prefix),
        }
    return {**content, "parameters": narrowed} if params else content


def fix_at_synth(path: Path, content: dict[str, Any], fixed: Mapping[str, str]) -> dict[str, Any]:
    """The artifacts' URLs and SHA-256s and the agent version written into the document's steps, and
    their parameters removed: whoever may SendCommand the document cannot point it at another script,
    bundle or version — it installs and runs this deployment's, and nothing else."""
    params = content.get("parameters", {})
    values = {name: fixed[name] for name in params if name in fixed}
    content = {**content, "parameters": {k: v for k, v in params.items() if k not in values}}
    if not content["parameters"]:
        del content["parameters"]

    def sub(node: Any) -> Any:
        if isinstance(node, str):
            for name, value in values.items():
                node = re.sub(r"\{\{\s*" + name + r"\s*\}\}", lambda _m, v=value: v, node)
            return node
        if isinstance(node, list):
            return [sub(x) for x in node]
        if isinstance(node, dict):
            return {k: sub(v) for k, v in node.items()}
        return node

    content["mainSteps"] = sub(content["mainSteps"])
    left = sorted(n for n in values if re.search(r"\{\{\s*" + n + r"\s*\}\}", json.dumps(content)))
    if left:
        raise ValueError(f"{path}: {left} still referenced after fixing them at synth")
    return content


@dataclass(frozen=True)
class Populator:
    """The populator instances' identity, network and launch template."""

    role: iam.Role
    security_group: ec2.SecurityGroup
    launch_template: ec2.LaunchTemplate

    @property
    def launch_template_id(self) -> str:
        # A LaunchTemplate created here always has an id (None only for imported templates).
        lt_id = self.launch_template.launch_template_id
        assert lt_id is not None
        return lt_id


def build_populator(
    scope: Construct,
    props: CacheWarmerProps,
    *,
    agent_policy: iam.IManagedPolicy,
    key: kms.IKey,
    artifacts: Artifacts,
) -> Populator:
    role = iam.Role(
        scope,
        "PopulatorRole",
        assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        description="cachewarm populators: the SSM agent (Run Command only) + the cachewarm agent policy",
        managed_policies=[ssm_agent_policy(scope), agent_policy],
    )
    sg = populator_security_group(
        scope,
        props.vpc,
        [*props.destination_security_groups, *props.source_security_groups],
        props.memcached_port,
    )
    template = populator_launch_template(
        scope, props, role=role, security_group=sg, key=key, artifacts=artifacts
    )
    return Populator(role=role, security_group=sg, launch_template=template)


def populator_security_group(
    scope: Construct, vpc: ec2.IVpc, memcached_groups: Sequence[ec2.ISecurityGroup], memcached_port: int
) -> ec2.SecurityGroup:
    """No inbound rule; outbound to memcached of the named groups only, and HTTPS."""
    sg = ec2.SecurityGroup(
        scope,
        "PopulatorSecurityGroup",
        vpc=vpc,
        description="cachewarm populators: no inbound; outbound to memcached, and HTTPS for S3/SSM/KMS/logs",
        allow_all_outbound=False,
    )
    _limit_egress(sg, memcached_groups, memcached_port)
    return sg


def populator_launch_template(
    scope: Construct,
    props: CacheWarmerProps,
    *,
    role: iam.IRole,
    security_group: ec2.ISecurityGroup,
    key: kms.IKey,
    artifacts: Artifacts,
    instance_type: ec2.InstanceType | None = None,
    machine_image: ec2.IMachineImage | None = None,
) -> ec2.LaunchTemplate:
    """The populators' template: this deployment's agent installed at boot (so `cachewarm agent
    populate` is there when the controller's Run Command arrives; InstallAgents waits for cloud-init
    and checks the version), IMDSv2 only, an encrypted root volume, shutdown = terminate."""
    user_data = ec2.UserData.for_linux()
    user_data.add_commands(*install_agent_commands(artifacts))
    template = ec2.LaunchTemplate(
        scope,
        "PopulatorTemplate",
        user_data=user_data,
        machine_image=machine_image or props.machine_image,
        instance_type=instance_type or props.instance_type,
        role=role,
        security_group=security_group,
        require_imdsv2=True,
        http_put_response_hop_limit=1,
        detailed_monitoring=True,
        instance_initiated_shutdown_behavior=ec2.InstanceInitiatedShutdownBehavior.TERMINATE,
        block_devices=[
            ec2.BlockDevice(
                device_name=props.root_device_name,
                volume=ec2.BlockDeviceVolume.ebs(
                    props.root_volume_gb,
                    encrypted=True,
                    kms_key=key,
                    volume_type=ec2.EbsDeviceVolumeType.GP3,
                    delete_on_termination=True,
                ),
            )
        ],
    )
    Tags.of(template).add(tags.MANAGED, "true")
    return template


def ssm_agent_policy(scope: Construct) -> iam.ManagedPolicy:
    """What the SSM agent needs to take Run Command (and nothing of AmazonSSMManagedInstanceCore's
    Parameter Store, inventory, patching or association rights): register the instance, and the
    message channels the commands arrive on (those APIs have no resource-level permissions). In the
    stack's region (a destination region's populators have a role and policy of their own there)."""
    stack = Stack.of(scope)
    return iam.ManagedPolicy(
        scope,
        "PopulatorSsmAgentPolicy",
        description="cachewarm populators: the SSM agent's Run Command channel only",
        statements=[
            iam.PolicyStatement(
                sid="RegisterThisInstance",
                actions=["ssm:UpdateInstanceInformation"],
                resources=[stack.format_arn(service="ec2", resource="instance", resource_name="*")],
            ),
            iam.PolicyStatement(
                sid="RunCommandChannel",
                actions=[
                    "ec2messages:AcknowledgeMessage",
                    "ec2messages:DeleteMessage",
                    "ec2messages:FailMessage",
                    "ec2messages:GetEndpoint",
                    "ec2messages:GetMessages",
                    "ec2messages:SendReply",
                    "ssmmessages:CreateControlChannel",
                    "ssmmessages:CreateDataChannel",
                    "ssmmessages:OpenControlChannel",
                    "ssmmessages:OpenDataChannel",
                ],
                resources=["*"],
            ),
        ],
    )


def _limit_egress(
    sg: ec2.SecurityGroup, memcached_groups: Sequence[ec2.ISecurityGroup], memcached_port: int
) -> None:
    """A populator opens connections only to memcached of the named groups (the destination replicas',
    and the sources' Verify reads) and to HTTPS (the AWS endpoints it needs: S3 for the artifacts and
    status, SSM, KMS, Logs) — never to any other memcached of the network: memcached has no
    authentication, so an open port is a read or a `flush_all` away."""
    if not memcached_groups:
        raise ValueError(
            "the populators' memcached peers are not named: give the destination replicas' security "
            "groups (context destinationSecurityGroupIds, prop destination_security_groups) and the "
            "sources' (sourceSecurityGroupIds / source_security_groups); populators may reach only them"
        )
    port = ec2.Port.tcp(memcached_port)
    seen: set[str] = set()
    for group in memcached_groups:
        if group.security_group_id in seen:  # one group for sources and destinations: one rule
            continue
        seen.add(group.security_group_id)
        sg.add_egress_rule(group, port, "memcached of the replicas (populate, verify)")
    sg.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS: S3, SSM, KMS, CloudWatch Logs")


def install_agent_commands(artifacts: Artifacts) -> list[str]:
    """The populators' user data: Amazon Linux 2023 packages (Python 3.11, xfsprogs), then the
    install script — the same one the install-agent document runs — for the agent alone (populators
    never dump). Its log: /var/log/cachewarm-install.log."""
    a = artifacts
    return [
        "set -euo pipefail",
        "exec >>/var/log/cachewarm-install.log 2>&1",
        "dnf install -y -q python3.11 python3.11-pip xfsprogs",
        "WORK=$(mktemp -d /tmp/cachewarm-install.XXXXXX)",
        f"aws s3 cp --only-show-errors '{a.installer.s3_object_url}' \"$WORK/install-agent.sh\"",
        f"printf '%s  %s\\n' '{a.installer_sha256}' \"$WORK/install-agent.sh\" | sha256sum -c --quiet -",
        f'CACHEWARM_PYTHON=python3.11 CACHEWARM_ROOT={INSTALL_DIR} bash "$WORK/install-agent.sh" '
        f"--agent-bundle '{a.agent.s3_object_url}' --agent-sha256 '{a.agent_sha256}' --version '{a.version}'",
        'rm -rf "$WORK"',
    ]


def _pascal(stem: str) -> str:
    """`dump-agent` -> `DumpAgent` (construct ids)."""
    return "".join(part.capitalize() for part in stem.replace("_", "-").split("-"))
