"""Volume attachments behind a small interface.

moto keeps only the last attachment of a multi-attach volume (and detaches the wrong one), so the
end-to-end tests use an in-memory attacher; `Ec2VolumeAttacher` itself is tested against botocore's
Stubber with real EC2 response shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from botocore.exceptions import ClientError

from cachewarm_controller.awsutil import chunks, error_code, is_throttling
from cachewarm_controller.errors import (
    AttachmentLimitError,
    NotNitroError,
    ResourceFailedError,
    TransientError,
)
from cachewarm_controller.model import MULTI_ATTACH_LIMIT

LIVE_STATES = frozenset({"attaching", "attached", "busy"})
# What EC2 answers to an AttachVolume of a volume already attached to that instance.
ALREADY_ATTACHED_CODES = frozenset({"VolumeInUse", "InvalidVolume.InUse", "IncorrectState"})


@dataclass(frozen=True)
class Attachment:
    volume_id: str
    instance_id: str
    state: str  # attaching | attached | detaching | detached | busy
    device: str


class VolumeAttacher(Protocol):
    def attachments(self, volume_ids: Sequence[str]) -> dict[str, list[Attachment]]: ...

    def attach(self, volume_id: str, instance_id: str, device: str) -> None: ...

    def detach(self, volume_id: str, instance_id: str, force: bool) -> None: ...


class Ec2VolumeAttacher:
    """The real thing: idempotent attach/detach, EC2's multi-attach errors named."""

    def __init__(self, ec2: Any) -> None:
        self._ec2 = ec2

    def attachments(self, volume_ids: Sequence[str]) -> dict[str, list[Attachment]]:
        out: dict[str, list[Attachment]] = {v: [] for v in volume_ids}
        for batch in chunks(list(volume_ids), 200):
            resp = self._ec2.describe_volumes(VolumeIds=list(batch))
            for vol in resp["Volumes"]:
                out[vol["VolumeId"]] = [
                    Attachment(vol["VolumeId"], a["InstanceId"], a["State"], a.get("Device", ""))
                    for a in vol.get("Attachments", [])
                ]
        return out

    def attach(self, volume_id: str, instance_id: str, device: str) -> None:
        """One AttachVolume (the step checked the attachments and the 16-instance limit before); an
        attachment that already exists is fine (a retried step)."""
        try:
            self._ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device=device)
        except ClientError as exc:
            if error_code(exc) in ALREADY_ATTACHED_CODES:
                current = self.attachments([volume_id])[volume_id]
                if any(a.instance_id == instance_id and a.state in LIVE_STATES for a in current):
                    return
            raise self._named(exc, volume_id, instance_id) from exc

    def detach(self, volume_id: str, instance_id: str, force: bool) -> None:
        try:
            self._ec2.detach_volume(VolumeId=volume_id, InstanceId=instance_id, Force=force)
        except ClientError as exc:
            # Already detached / gone: teardown is idempotent.
            if error_code(exc) in {"IncorrectState", "InvalidAttachment.NotFound", "InvalidVolume.NotFound"}:
                return
            if is_throttling(exc):
                raise TransientError(str(exc)) from exc
            raise

    @staticmethod
    def _named(exc: ClientError, volume_id: str, instance_id: str) -> Exception:
        code, msg = error_code(exc), str(exc)
        lowered = msg.lower()
        if is_throttling(exc):
            return TransientError(msg)
        if code == "AttachmentLimitExceeded" or "maximum number of attachments" in lowered:
            return AttachmentLimitError(
                f"cannot attach {volume_id} to {instance_id}: attachment limit reached (io2 multi-attach "
                f"allows at most {MULTI_ATTACH_LIMIT} Nitro instances per volume; the instance may also "
                f"be at its own EBS attachment limit): {msg}"
            )
        if "nitro" in lowered or "multi-attach" in lowered or "multiattach" in lowered:
            return NotNitroError(
                f"cannot multi-attach {volume_id} to {instance_id}: io2 multi-attach needs a Nitro-based "
                f"instance in the volume's AZ: {msg}"
            )
        return ResourceFailedError(f"attach {volume_id} to {instance_id} failed: {code}: {msg}")


def non_nitro_types(ec2: Any, instance_types: Sequence[str]) -> list[str]:
    """The instance types among `instance_types` that are not Nitro-based (multi-attach needs Nitro)."""
    wanted = sorted(set(instance_types))
    bad: list[str] = []
    for batch in chunks(wanted, 100):
        resp = ec2.describe_instance_types(InstanceTypes=list(batch))
        for it in resp["InstanceTypes"]:
            # Bare-metal types report no hypervisor but run on the Nitro system.
            if it.get("Hypervisor") != "nitro" and not it.get("BareMetal", False):
                bad.append(it["InstanceType"])
    return bad


def require_nitro(ec2: Any, instance_types: dict[str, str]) -> None:
    """`instance_types` maps instance (or launch template) -> type; raise NotNitroError naming them."""
    bad = set(non_nitro_types(ec2, list(instance_types.values())))
    if bad:
        who = ", ".join(f"{k} ({t})" for k, t in sorted(instance_types.items()) if t in bad)
        raise NotNitroError(
            f"io2 multi-attach needs Nitro-based instances; not Nitro: {who}. "
            "Use a Nitro type (e.g. m5, r6i, c7g)."
        )
