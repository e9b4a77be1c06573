"""The stack outputs a deployment of `CacheWarmer` gives its operators: what the start input, the
events, the source nodes and the runbook need (docs/deploy.md lists them; a test keeps that list,
the other docs and these outputs equal). `CacheWarmStack` adds them; so can any app's stack."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import CfnOutput
from constructs import Construct

if TYPE_CHECKING:
    from cachewarm_infra.construct import CacheWarmer

# Output name -> the SSM document (stem) it names.
DOCUMENT_OUTPUTS = {
    "DumpDocumentName": "dump-agent",
    "PopulateDocumentName": "populate-agent",
    "VerifyDocumentName": "verify-agent",
    "InstallDocumentName": "install-agent",
    "UnmountDocumentName": "unmount",
    "MemcachedStatsDocumentName": "memcached-stats",
}


def add_outputs(scope: Construct, w: CacheWarmer) -> list[CfnOutput]:
    """Every output, in `scope` (a stack, or a construct of one: ids are the output names there)."""

    def out(name: str, value: str, description: str | None = None) -> CfnOutput:
        return CfnOutput(scope, name, value=value, description=description)

    outputs = [
        out("StateMachineArn", w.state_machine.state_machine_arn, "start a warm here"),
        out(
            "TeardownStateMachineArn",
            w.teardown_machine.state_machine_arn,
            "tears down stopped or timed-out warms",
        ),
        out("StatusBucketName", w.status_bucket.bucket_name, "status objects and the controller's state"),
        out("AlarmTopicArn", w.alarm_topic.topic_arn, "every alarm notifies it"),
        out(
            "WarmEventBusName",
            w.event_bus.event_bus_name,
            "put Replica Deployed events here (not the default bus)",
        ),
        out(
            "PopulatorLaunchTemplateId",
            w.launch_template_id,
            "populator.launch_template_id of every start input",
        ),
        out(
            "SourceNodePolicyArn",
            w.agent_policy.managed_policy_arn,
            "attach to the source memcached nodes' instance role (agent needs it)",
        ),
        out("AgentBundleUrl", w.agent_asset.s3_object_url, "cachewarm wheel(s)"),
        out("DumperTarballUrl", w.dumper_asset.s3_object_url, "cachewarm-dump"),
        out("AgentVersion", w.artifacts.version, "cachewarm --version to expect"),
        out("AgentOutputLogGroup", w.agent_logs.log_group_name, "SSM command output"),
        out(
            "PopulatorSecurityGroupId",
            w.populator_sg.security_group_id,
            "allow memcached's port from it on the source and destination nodes",
        ),
        out("DashboardName", w.dashboard.dashboard_name, "CloudWatch dashboard"),
    ]
    outputs += [
        out(name, w.document_name(stem), f"SSM document {stem}") for name, stem in DOCUMENT_OUTPUTS.items()
    ]
    return outputs
