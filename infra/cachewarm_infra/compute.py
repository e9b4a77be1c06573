"""What runs on the nodes: the build artifacts (S3 assets), the SSM documents that start the agents,
and the populator instances (role, security group, launch template that installs the agent at boot)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_ssm as ssm
from cachewarm.contract import tags
from constructs import Construct

from cachewarm_infra.props import CacheWarmerProps

# The documents the controller needs (a directory may hold more; each becomes one more document).
REQUIRED_DOCUMENTS = ("dump-agent", "populate-agent")
INSTALL_DIR = "/opt/cachewarm"


@dataclass(frozen=True)
class Artifacts:
    """The dumper tarball and the agent bundle, deployed as S3 assets versioned with the stack."""

    dumper: s3_assets.Asset
    agent: s3_assets.Asset

    def parameter_defaults(self) -> dict[str, str]:
        """The SSM document parameters the construct fills with the artifacts' S3 URLs, so the
        documents always install the agent and dumper versioned with this deployment."""
        return {"dumperTarballUrl": self.dumper.s3_object_url, "agentBundleUrl": self.agent.s3_object_url}


def build_artifacts(scope: Construct, dumper_tarball: Path, agent_bundle: Path) -> Artifacts:
    return Artifacts(
        dumper=s3_assets.Asset(scope, "DumperTarball", path=str(dumper_tarball)),
        agent=s3_assets.Asset(scope, "AgentBundle", path=str(agent_bundle)),
    )


def build_documents(
    scope: Construct, documents_dir: Path, artifacts: Artifacts
) -> dict[str, ssm.CfnDocument]:
    """One Command document per `<documents_dir>/<stem>.json`, keyed by `<stem>`."""
    docs: dict[str, ssm.CfnDocument] = {}
    urls = artifacts.parameter_defaults()
    for path in sorted(documents_dir.glob("*.json")):
        try:
            content = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e
        for name, spec in content.get("parameters", {}).items():
            if "allowedPattern" not in spec and "allowedValues" not in spec:
                raise ValueError(f"{path}: parameter {name} has no allowedPattern")
            if name in urls:
                spec["default"] = urls[name]
        docs[path.stem] = ssm.CfnDocument(
            scope,
            f"{_pascal(path.stem)}Document",
            content=content,
            document_type="Command",
            document_format="JSON",
        )
    for needed in REQUIRED_DOCUMENTS:
        if needed not in docs:
            raise FileNotFoundError(f"{documents_dir}/{needed}.json not found")
    return docs


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
    agent_bundle_url: str,
) -> Populator:
    role = iam.Role(
        scope,
        "PopulatorRole",
        assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        description="cachewarm populator instances: SSM agent + the cachewarm agent policy",
        managed_policies=[
            iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore"),
            agent_policy,
        ],
    )
    sg = ec2.SecurityGroup(
        scope,
        "PopulatorSecurityGroup",
        vpc=props.vpc,
        description="cachewarm populators: no inbound; outbound to memcached, S3 and SSM",
        allow_all_outbound=True,
    )
    # Install this deployment's agent at boot, so `cachewarm agent populate` is there when the
    # controller's Run Command arrives (the populate document waits for cloud-init).
    user_data = ec2.UserData.for_linux()
    user_data.add_commands(*install_agent_commands(agent_bundle_url))
    template = ec2.LaunchTemplate(
        scope,
        "PopulatorTemplate",
        user_data=user_data,
        machine_image=props.machine_image,
        instance_type=props.instance_type,
        role=role,
        security_group=sg,
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
    return Populator(role=role, security_group=sg, launch_template=template)


def install_agent_commands(agent_bundle_url: str, dumper_tarball_url: str | None = None) -> list[str]:
    """Shell lines that install the agent (and optionally the dumper) from the deployed artifacts.

    Amazon Linux 2023: Python 3.11 and xfsprogs from the distribution's repositories; the agent's
    dependencies come from the bundle (`DIST_WHEELHOUSE=1 make dist`) or else from PyPI.
    """
    d = INSTALL_DIR
    lines = [
        "set -euo pipefail",
        "exec >>/var/log/cachewarm-install.log 2>&1",
        "dnf install -y -q python3.11 python3.11-pip xfsprogs",
        f"mkdir -p {d}/bin {d}/wheels",
        f"aws s3 cp --only-show-errors '{agent_bundle_url}' {d}/cachewarm-agent.tar.gz",
        f"tar -xzf {d}/cachewarm-agent.tar.gz -C {d}/wheels",
        f"[ -x {d}/venv/bin/python ] || python3.11 -m venv {d}/venv",
        f"{d}/venv/bin/pip install --quiet --upgrade --find-links {d}/wheels cachewarm",
        f"ln -sf {d}/venv/bin/cachewarm /usr/local/bin/cachewarm",
    ]
    if dumper_tarball_url:
        lines += [
            f"aws s3 cp --only-show-errors '{dumper_tarball_url}' {d}/cachewarm-dump.tar.gz",
            f"tar -xzf {d}/cachewarm-dump.tar.gz -C {d}/bin",
        ]
    return [*lines, f"touch {d}/.installed"]


def _pascal(stem: str) -> str:
    """`dump-agent` -> `DumpAgent` (construct ids)."""
    return "".join(part.capitalize() for part in stem.replace("_", "-").split("-"))
