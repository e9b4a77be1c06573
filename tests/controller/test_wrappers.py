"""The wrappers over what moto gets wrong, tested against botocore's Stubber with real response
shapes: multi-attach (moto keeps only the last attachment), SSM command status / online / cancel
(moto reports Success at once, lacks DescribeInstanceInformation and CancelCommand)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from cachewarm_controller.agents import Invocation, SsmAgentRunner, parse_stats
from cachewarm_controller.attach import Attachment, Ec2VolumeAttacher
from cachewarm_controller.errors import (
    AttachmentLimitError,
    NotNitroError,
    PlanError,
    ResourceFailedError,
    TransientError,
)

VOL = "vol-0123456789abcdef0"
SRC = "i-0aaaaaaaaaaaaaaa1"
POP = "i-0bbbbbbbbbbbbbbb2"
# SSM command ids are UUIDs (the Stubber checks the shapes).
C1 = "11111111-1111-4111-8111-111111111111"
C2 = "22222222-2222-4222-8222-222222222222"
C3 = "33333333-3333-4333-8333-333333333333"
C4 = "44444444-4444-4444-8444-444444444444"
C9 = "99999999-9999-4999-8999-999999999999"
CS = "55555555-5555-4555-8555-555555555555"
COTHER = "66666666-6666-4666-8666-666666666666"
T0 = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


@pytest.fixture
def ec2() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


@pytest.fixture
def ssm() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("ssm", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def volume(*attachments: tuple[str, str]) -> dict[str, Any]:
    return {
        "Volumes": [
            {
                "VolumeId": VOL,
                "Size": 100,
                "AvailabilityZone": "us-east-1a",
                "State": "in-use" if attachments else "available",
                "CreateTime": T0,
                "VolumeType": "io2",
                "Iops": 5000,
                "Encrypted": True,
                "MultiAttachEnabled": True,
                "Attachments": [
                    {
                        "VolumeId": VOL,
                        "InstanceId": iid,
                        "Device": "/dev/sdf",
                        "State": state,
                        "AttachTime": T0,
                        "DeleteOnTermination": False,
                    }
                    for iid, state in attachments
                ],
            }
        ]
    }


def attach_response(iid: str) -> dict[str, Any]:
    return {"VolumeId": VOL, "InstanceId": iid, "Device": "/dev/sdf", "State": "attaching", "AttachTime": T0}


def attach_params(iid: str) -> dict[str, str]:
    return {"VolumeId": VOL, "InstanceId": iid, "Device": "/dev/sdf"}


def test_attach_to_two_instances_keeps_both(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response(
        "attach_volume", attach_response(SRC), {"VolumeId": VOL, "InstanceId": SRC, "Device": "/dev/sdf"}
    )
    stub.add_response(
        "attach_volume", attach_response(POP), {"VolumeId": VOL, "InstanceId": POP, "Device": "/dev/sdf"}
    )
    stub.add_response("describe_volumes", volume((SRC, "attached"), (POP, "attached")), {"VolumeIds": [VOL]})
    att = Ec2VolumeAttacher(client)
    att.attach(VOL, SRC, "/dev/sdf")
    att.attach(VOL, POP, "/dev/sdf")
    assert att.attachments([VOL])[VOL] == [
        Attachment(VOL, SRC, "attached", "/dev/sdf"),
        Attachment(VOL, POP, "attached", "/dev/sdf"),
    ]


def test_attach_is_idempotent(ec2: tuple[Any, Stubber]) -> None:
    """A retried attach of an attachment that exists: EC2 refuses it, the wrapper finds it and is fine."""
    client, stub = ec2
    stub.add_client_error("attach_volume", "VolumeInUse", f"{VOL} is already attached to an instance")
    stub.add_response("describe_volumes", volume((SRC, "attaching")), {"VolumeIds": [VOL]})
    Ec2VolumeAttacher(client).attach(VOL, SRC, "/dev/sdf")


def test_volume_in_use_elsewhere_is_an_error(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_client_error("attach_volume", "VolumeInUse", f"{VOL} is already attached to an instance")
    stub.add_response("describe_volumes", volume((SRC, "attached")), {"VolumeIds": [VOL]})
    with pytest.raises(ResourceFailedError, match="VolumeInUse"):
        Ec2VolumeAttacher(client).attach(VOL, POP, "/dev/sdf")


def test_ec2_attachment_limit_error_is_named(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_client_error(
        "attach_volume", "AttachmentLimitExceeded", "The maximum number of attachments has been reached."
    )
    with pytest.raises(AttachmentLimitError, match="16"):
        Ec2VolumeAttacher(client).attach(VOL, POP, "/dev/sdf")


def test_non_nitro_error_is_named(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_client_error(
        "attach_volume",
        "UnsupportedOperation",
        "Multi-Attach is supported only on instances built on the Nitro System.",
    )
    with pytest.raises(NotNitroError, match="Nitro"):
        Ec2VolumeAttacher(client).attach(VOL, POP, "/dev/sdf")


def test_throttled_attach_is_transient(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_client_error("attach_volume", "RequestLimitExceeded", "Request limit exceeded.")
    with pytest.raises(TransientError):
        Ec2VolumeAttacher(client).attach(VOL, POP, "/dev/sdf")


def test_detach_of_a_detached_volume_is_fine(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_client_error("detach_volume", "IncorrectState", f"Volume '{VOL}' is in the 'available' state.")
    stub.add_response(
        "detach_volume",
        {"VolumeId": VOL, "InstanceId": SRC, "Device": "/dev/sdf", "State": "detaching", "AttachTime": T0},
        {"VolumeId": VOL, "InstanceId": SRC, "Force": True},
    )
    att = Ec2VolumeAttacher(client)
    att.detach(VOL, SRC, force=False)
    att.detach(VOL, SRC, force=True)


# ---- SSM --------------------------------------------------------------------------------------------


def test_online_needs_ping_status_online(ssm: tuple[Any, Stubber]) -> None:
    client, stub = ssm
    stub.add_response(
        "describe_instance_information",
        {
            "InstanceInformationList": [
                {"InstanceId": SRC, "PingStatus": "Online", "LastPingDateTime": T0, "PlatformType": "Linux"},
                {"InstanceId": POP, "PingStatus": "ConnectionLost", "LastPingDateTime": T0},
            ]
        },
        {"Filters": [{"Key": "InstanceIds", "Values": [SRC, POP]}]},
    )
    assert SsmAgentRunner(client).online([SRC, POP]) == {SRC}


def command(cid: str, status: str) -> dict[str, Any]:
    return {
        "CommandId": cid,
        "DocumentName": "cachewarm-populate-agent",
        "Status": status,
        "StatusDetails": status,
        "InstanceIds": [POP],
        "RequestedDateTime": T0,
        "Comment": "cachewarm warm-1 populate i-0aaaaaaaaaaaaaaa1",
    }


def test_command_states_look_up_only_the_given_commands(ssm: tuple[Any, Stubber]) -> None:
    """One ListCommands per id: never a listing of the account's commands (other warms, other tools)."""
    client, stub = ssm
    stub.add_response("list_commands", {"Commands": [command(C1, "InProgress")]}, {"CommandId": C1})
    stub.add_response("list_commands", {"Commands": [command(C3, "TimedOut")]}, {"CommandId": C3})
    stub.add_response("list_commands", {"Commands": []}, {"CommandId": C4})
    got = SsmAgentRunner(client).command_states([C1, C3, C4])
    assert got == {C1: "InProgress", C3: "TimedOut", C4: "Undeliverable"}


def test_find_sent_matches_instance_document_window_and_comment(ssm: tuple[Any, Stubber]) -> None:
    client, stub = ssm
    mine = {**command(C2, "InProgress"), "Comment": "cachewarm w-1 populate i-1 #2"}
    stub.add_response(
        "list_commands",
        {"Commands": [command(C1, "Success"), mine]},
        {
            "InstanceId": POP,
            "Filters": [
                {"key": "InvokedAfter", "value": ANY},
                {"key": "DocumentName", "value": "cachewarm-populate-agent"},
            ],
        },
    )
    since = int(T0.timestamp() * 1000)
    found = SsmAgentRunner(client).find_sent(
        "cachewarm-populate-agent", POP, since, "cachewarm w-1 populate i-1 #2"
    )
    assert found == C2


def test_invocations_give_each_instances_status_exit_and_output(ssm: tuple[Any, Stubber]) -> None:
    client, stub = ssm

    def inv(iid: str, status: str, code: int, out: str) -> dict[str, Any]:
        plugin = {"Name": "installAgent", "Status": status, "ResponseCode": code, "Output": out}
        return {"CommandId": C1, "InstanceId": iid, "Status": status, "CommandPlugins": [plugin]}

    stub.add_response(
        "list_command_invocations",
        {"CommandInvocations": [inv(SRC, "Success", 0, "installed 0.1.0"), inv(POP, "Failed", 126, "wrong")]},
        {"CommandId": C1, "Details": True},
    )
    got = SsmAgentRunner(client).invocations(C1)
    assert got[SRC] == Invocation(SRC, "Success", 0, "installed 0.1.0")
    assert got[POP] == Invocation(POP, "Failed", 126, "wrong")


def test_cancel_ignores_finished_commands(ssm: tuple[Any, Stubber]) -> None:
    client, stub = ssm
    stub.add_client_error("cancel_command", "InvalidCommandId", "")
    stub.add_response("cancel_command", {}, {"CommandId": C2})
    SsmAgentRunner(client).cancel([C1, C2])


def test_send_passes_parameters_as_lists_and_output_to_the_stacks_log_group(ssm: tuple[Any, Stubber]) -> None:
    client, stub = ssm
    stub.add_response(
        "send_command",
        {"Command": command(C9, "Pending")},
        {
            "DocumentName": "doc",
            "InstanceIds": [SRC, POP],
            "Parameters": {"warmId": ["w-1"], "mode": ["add"]},
            "Comment": "cachewarm w-1",
            "TimeoutSeconds": 600,
            "CloudWatchOutputConfig": {
                "CloudWatchLogGroupName": "agent-logs",
                "CloudWatchOutputEnabled": True,
            },
        },
    )
    runner = SsmAgentRunner(client, log_group="agent-logs")
    assert runner.send("doc", [SRC, POP], {"warmId": "w-1", "mode": "add"}, "cachewarm w-1") == C9
    with pytest.raises(ValueError, match=r"1\.\.50"):
        runner.send("doc", [f"i-0{n:016x}" for n in range(51)], {}, "too many")


def test_send_runs_the_pinned_version_of_the_regions_own_document(ssm: tuple[Any, Stubber]) -> None:
    """DocumentVersion is always sent (an UpdateDocument that makes another version the default does
    not change what runs); a destination region's runner names that region's copy."""
    client, stub = ssm
    stub.add_response(
        "send_command",
        {"Command": command(C9, "Pending")},
        {
            "DocumentName": "far-doc",
            "DocumentVersion": "1",
            "InstanceIds": [POP],
            "Parameters": {},
            "Comment": "cachewarm w-1",
            "TimeoutSeconds": 600,
        },
    )
    runner = SsmAgentRunner(client, document_version="1", document_names={"doc": "far-doc"})
    assert runner.send("doc", [POP], {}, "cachewarm w-1") == C9


def test_parse_stats_reads_the_documents_output_and_rejects_garbage() -> None:
    got = parse_stats(SRC, "curr_items 123456\nbytes 987654321\n")
    assert (got.items, got.bytes) == (123456, 987654321)
    with pytest.raises(PlanError, match="no memcached stats"):
        parse_stats(SRC, "ERROR\r\n")
