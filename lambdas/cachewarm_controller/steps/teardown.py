"""Teardown (both state machines): stop the agents, unmount, detach, terminate the populators,
delete the volumes, then the warm's S3 objects — from any stage, found by the warm-id tag."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cachewarm.contract import inputs

from cachewarm_controller.agents import FAILED_COMMAND_STATES
from cachewarm_controller.attach import LIVE_STATES
from cachewarm_controller.awsutil import chunks
from cachewarm_controller.errors import InvalidInputError, WaitTimedOutError
from cachewarm_controller.steps.common import Deps, backoff_seconds
from cachewarm_controller.steps.inventory import inventory

# Teardown force-detaches after this many polite tries (a hung mount must not keep a volume alive).
FORCE_DETACH_AFTER = 3


def teardown(
    warm_id: str,
    status_prefix: str,
    attempt: int,
    max_attempts: int,
    deps: Deps,
    mount_dir: str = inputs.DEFAULT_MOUNT_DIR,
) -> dict[str, Any]:
    """Idempotent, from any stage: stop agents, unmount on the source nodes, detach, terminate
    populators, delete volumes, and (once nothing is left) the warm's S3 objects. Everything is found
    by the warm-id tag; the plan (if any) only names the commands to cancel."""
    warm = deps.s3.load_plan(status_prefix, warm_id)
    if warm is not None:
        live = [c for r in warm.nodes for c in (r.dump.command_id, r.populate.command_id) if c]
        if live:
            running = deps.agents.statuses(live, warm.started_ms)
            deps.agents.cancel([c for c in live if running.get(c) not in FAILED_COMMAND_STATES | {"Success"}])
    inv = inventory(deps.ec2, warm_id)
    if inv.empty:
        # Nothing (left) in EC2: the warm's S3 objects go last, so a crash before here retries cleanly.
        objects = deps.s3.delete_warm(status_prefix, warm_id)
        return {"complete": True, "attempt": attempt + 1, "wait_seconds": 0, "deleted_objects": objects}
    if attempt + 1 >= max_attempts:
        raise WaitTimedOutError(
            f"teardown of {warm_id} incomplete after {max_attempts} tries; left: {inv.describe()}"
        )
    force = attempt >= FORCE_DETACH_AFTER
    vol_ids = [v["VolumeId"] for v in inv.volumes]
    atts = deps.attacher.attachments(vol_ids) if vol_ids else {}
    if warm is not None and attempt == 0:
        # The source nodes are production cache nodes: unmount there before the detach, so no dead
        # mount is left behind (populators are terminated, nothing to clean on them).
        sources = {r.node_id for r in warm.nodes}
        mounted = sorted({a.instance_id for al in atts.values() for a in al if a.instance_id in sources})
        if mounted:
            deps.agents.unmount(
                mounted, inputs.mount_point(mount_dir, warm_id), f"cachewarm {warm_id} teardown"
            )
    for vol, alist in atts.items():
        for a in alist:
            if a.state in LIVE_STATES or (force and a.state == "detaching"):
                deps.attacher.detach(vol, a.instance_id, force)
    to_terminate = [i["InstanceId"] for i in inv.instances if i["State"]["Name"] != "shutting-down"]
    for batch in chunks(to_terminate, 500):
        deps.ec2.terminate_instances(InstanceIds=list(batch))
    deleted = 0
    for v in inv.volumes:
        if v["State"] == "available" and not atts.get(v["VolumeId"]):
            deps.ec2.delete_volume(VolumeId=v["VolumeId"])
            deleted += 1
    # Not complete yet: the next pass (after a backoff) confirms nothing is left.
    return {
        "complete": False,
        "attempt": attempt + 1,
        "wait_seconds": backoff_seconds(attempt),
        "deleted_volumes": deleted,
        "terminated": len(to_terminate),
        "volumes_left": len(inv.volumes) - deleted,
        "instances_left": len(inv.instances),
    }


@dataclass(frozen=True)
class TeardownTarget:
    warm_id: str
    status_prefix: str
    mount_dir: str


def teardown_target(event: dict[str, Any]) -> TeardownTarget:
    """What to tear down, from the state machine's state or from an EventBridge 'Step Functions
    Execution Status Change' event (whose detail.input is the execution input): a rule on ABORTED /
    TIMED_OUT executions can run the same teardown, since no Catch runs for those. The values are
    checked here too: that input may never have passed ValidateInput."""
    body: Any = event
    if "detail" in event and isinstance(event["detail"], dict) and "input" in event["detail"]:
        body = json.loads(event["detail"]["input"] or "{}")
    inp = body.get("input", body) if isinstance(body, dict) else {}
    inp = inp if isinstance(inp, dict) else {}
    warm_id = inp.get("warm_id")
    if not isinstance(warm_id, str) or not inputs.matches(inputs.WARM_ID, warm_id):
        raise InvalidInputError(f"teardown needs a valid warm_id, got {warm_id!r}")
    prefix = str(inp.get("status_prefix") or inputs.DEFAULT_STATUS_PREFIX)
    mount_dir = inp.get("mount_dir") or inputs.DEFAULT_MOUNT_DIR
    if not isinstance(mount_dir, str) or not inputs.matches(inputs.MOUNT_DIR, mount_dir):
        mount_dir = inputs.DEFAULT_MOUNT_DIR
    return TeardownTarget(warm_id, prefix, mount_dir)
