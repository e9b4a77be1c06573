"""Teardown (both state machines): stop the agents, unmount on both hosts, detach, terminate the
populators, delete the volumes and the S3 transport's bucket (every object, every unfinished multipart
upload, then the bucket), then the warm's S3 objects — from any stage, one bounded pass at a
time, touching only what this execution created.

- EC2 resources are the ones this execution's plan recorded (plus those its ClientTokens recover,
  `ownership`): never anything found by a tag. An execution without a plan created nothing in EC2.
- The plan and the S3 objects are the warm id's owner's (its claim names this execution); the claim
  itself stays, so a late duplicate start ends as a duplicate.
- The teardown machine acts only for an ended execution of this stack's warm machine
  (`ended_target`: DescribeExecution, before anything is touched).
- A volume is detached from a source node of the plan only after the unmount command succeeded there;
  it is never force-detached from a running source node that may still have it mounted read-write. If
  the unmount keeps failing, teardown gives up naming the node (the alarm and the runbook take over).
  An instance outside the plan that holds one of its volumes is never sent a command nor detached
  from: it blocks the volume's deletion, and the give-up message names it.
- Populators only ever mount read-only: they are unmounted too, then terminated (which detaches).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError
from cachewarm.contract import inputs
from cachewarm.contract.status import ROLES

from cachewarm_controller import transport
from cachewarm_controller.agents import RUNNING_COMMAND_STATES
from cachewarm_controller.attach import LIVE_STATES
from cachewarm_controller.awsutil import chunks, error_code
from cachewarm_controller.budget import TEARDOWN_CALLS_PER_PASS
from cachewarm_controller.errors import InvalidInputError, WaitTimedOutError
from cachewarm_controller.events import TeardownEvent, parse_event
from cachewarm_controller.history import TEARDOWN_MAX_PASSES
from cachewarm_controller.ownership import (
    live_instances,
    live_volumes,
    populator_ids,
    recover_populators,
    recover_volumes,
    volume_ids,
)
from cachewarm_controller.plan import TeardownState, WarmPlan
from cachewarm_controller.steps.common import Deps, backoff_seconds, populator_region, routed
from cachewarm_controller.steps.inventory import Inventory, describe_instances

# A detach stuck in `detaching` this many passes after a successful unmount is forced.
FORCE_DETACH_AFTER = 3
# Passes after which a populator is terminated even if its (read-only) unmount never answered.
UNMOUNT_TRIES = 3


@dataclass(frozen=True)
class TeardownTarget:
    execution_arn: str
    warm_id: str | None
    status_prefix: str
    mount_dir: str
    # A cross-region S3 warm's populator region (s3.destination_region, when not the execution's).
    populator_region: str | None = None


@dataclass
class _Calls:
    """The pass's budget of mutating calls."""

    left: int = TEARDOWN_CALLS_PER_PASS

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def _owner_plan(target: TeardownTarget, deps: Deps) -> tuple[bool, WarmPlan | None]:
    """(this execution owns the warm id's S3 objects, its plan if it has one)."""
    if target.warm_id is None:
        return False, None
    claim = deps.s3.read_claim(target.status_prefix, target.warm_id) or {}
    owns = claim.get("execution_arn") == target.execution_arn
    plan = deps.s3.load_plan(target.status_prefix, target.warm_id) if owns else None
    if plan is not None and plan.execution_arn != target.execution_arn:
        plan = None  # not this execution's: nothing of it is ours
    return owns, plan


def _with_warm_id(target: TeardownTarget, deps: Deps) -> TeardownTarget:
    """The warm id this execution claimed, when its input named none (an Auto Scaling launch): its
    claim recorded it (`ClaimWarmId`). None: the execution never owned a warm id."""
    if target.warm_id is not None:
        return target
    return replace(target, warm_id=deps.s3.execution_warm_id(target.status_prefix, target.execution_arn))


def _ours(plan: WarmPlan | None, deps: Deps, calls: _Calls) -> tuple[Inventory, Inventory, bool]:
    """What this execution created and still exists: (here: volumes and same-region populators,
    there: a cross-region warm's populators, plan changed). Resources the plan requested but did not
    record are recovered by their ClientTokens first."""
    if plan is None:
        return Inventory(), Inventory(), False
    there = deps.in_region(plan.populator_region).ec2 if plan.populator_region else deps.ec2
    changed = recover_volumes(deps.ec2, plan, deps.settings.stack_tag, calls.take)
    changed = recover_populators(there, plan) or changed
    here = Inventory(volumes=live_volumes(deps.ec2, volume_ids(plan)))
    far = Inventory(instances=live_instances(there, populator_ids(plan)))
    if plan.populator_region is None:
        here.instances, far = far.instances, Inventory()
    return here, far, changed


def _cancel_agents(plan: WarmPlan, target: TeardownTarget, deps: Deps, calls: _Calls) -> bool:
    """Cancel every agent command of the plan not known to have finished; True when none is left."""
    statuses = deps.status_reader().read_statuses(
        target.status_prefix, plan.warm_id, plan.status_writers(target.populator_region)
    )
    changed = False
    left = False
    for row in plan.nodes:
        for role in (*ROLES, "verify"):
            run = getattr(row, role)
            if not run.command_id or run.cancelled:
                continue
            st = statuses.get((role, row.node_id)) if role != "verify" else None
            if st is not None and st.state in ("done", "failed") and st.heartbeat_ms >= run.sent_ms:
                continue  # the agent said it ended
            if not calls.take():
                left = True
                continue
            deps.agents.cancel([run.command_id])
            run.cancelled = True
            changed = True
    if changed:
        deps.s3.save_plan(target.status_prefix, plan)
    return not left


def teardown(target: TeardownTarget, state: Mapping[str, Any], deps: Deps) -> dict[str, Any]:
    """One pass; `state` is the previous pass's output (counters only: the rest is in S3). Complete
    when nothing this execution created is left."""
    passes = int(state.get("passes", 0)) + 1
    waits = int(state.get("waits", 0))
    calls = _Calls()
    target = _with_warm_id(target, deps)
    owns, plan = _owner_plan(target, deps)
    # Only the owner wrote anything to S3, so only the owner has a teardown memory there.
    mem = deps.s3.load_teardown(target.status_prefix, str(target.warm_id)) if owns else TeardownState()
    before = mem.model_dump_json()
    region = plan.populator_region if plan is not None else target.populator_region
    if not mem.cancelled:
        mem.cancelled = plan is None or _cancel_agents(plan, target, routed(deps, region, plan), calls)
    if plan is not None and not mem.cancelled and calls.left <= 0:
        # The pass's calls all went to cancelling agents: nothing else moves before they are stopped.
        if owns and mem.model_dump_json() != before:
            deps.s3.save_teardown(target.status_prefix, str(target.warm_id), mem)
        if passes >= TEARDOWN_MAX_PASSES:
            raise WaitTimedOutError(
                f"teardown of {target.warm_id} incomplete after {passes} passes: agents still being cancelled"
            )
        return {
            "complete": False,
            "passes": passes,
            "waits": waits,
            "wait_seconds": 0,
            "deleted_volumes": 0,
            "terminated": 0,
            "volumes_left": len(volume_ids(plan)),
            "instances_left": len(populator_ids(plan)),
            "buckets_left": 0,
            "transport_objects": 0,
            "blocked": [],
        }
    inv, remote, recovered = _ours(plan, deps, calls)
    if plan is not None and recovered:
        deps.s3.save_plan(target.status_prefix, plan)
    # A cross-region warm's populators are terminated in their region (no volumes there: they read S3).
    there = deps.in_region(region).ec2 if region else None
    warm_id = target.warm_id
    # The S3 transport's bucket: emptied once the agents are stopped (a running dump still uploads).
    emptied = _delete_buckets(target, deps, calls) if mem.cancelled else None
    buckets_left = emptied.left if emptied is not None else ["(agents not yet stopped)"]
    if inv.empty and remote.empty and not buckets_left:
        objects = deps.s3.delete_warm(target.status_prefix, target.warm_id) if owns and target.warm_id else 0
        return {
            "complete": True,
            "passes": passes,
            "waits": waits,
            "wait_seconds": 0,
            "deleted_objects": objects,
            "transport_objects": emptied.objects if emptied else 0,
        }

    assert plan is not None  # without a plan nothing is left (above)
    ours = {i["InstanceId"]: i for i in inv.instances}
    populators = set(populator_ids(plan))
    sources_of_plan = {r.node_id for r in plan.nodes}
    vol_ids = [v["VolumeId"] for v in inv.volumes]
    atts = deps.attacher.attachments(vol_ids) if vol_ids else {}
    live = [(v, a) for v, al in atts.items() for a in al if a.state in LIVE_STATES or a.state == "detaching"]
    # Only the plan's own hosts are unmounted and detached from; any other holder is named, not touched.
    hosts = sorted({a.instance_id for _, a in live} & (populators | sources_of_plan))
    done = _unmount_results(mem, deps)
    answered = dict(done)  # what the latest answers said, for the give-up message
    sent_to = {i for iids in mem.unmount.values() for i in iids}
    # Unmount once the agents are stopped (a running dumper keeps the file system busy); a failed
    # unmount (each tries for 2 minutes on the node) is sent again, until teardown gives up.
    resend = [i for i in hosts if i in done and done[i] != "ok"]
    todo = [i for i in hosts if i not in sent_to] + resend
    if mem.cancelled and todo and warm_id is not None:
        mount = inputs.mount_point(target.mount_dir, warm_id)
        for batch in chunks(todo, inputs.SSM_MAX_TARGETS):
            if not calls.take():
                break
            cid = deps.agents.send(
                deps.settings.documents.unmount, list(batch), {"mount": mount}, f"cachewarm {warm_id} unmount"
            )
            mem.unmount[cid] = list(batch)
            for i in batch:
                mem.unmount_tries[i] = mem.unmount_tries.get(i, 0) + 1
                done.pop(i, None)
                mem.unmount_results.pop(i, None)
    not_ours = set(hosts) - ours.keys()
    sources = sorted({a.instance_id for _, a in live if a.instance_id in not_ours})
    source_state = (
        {i: d["State"]["Name"] for i, d in describe_instances(deps.ec2, sources).items()} if sources else {}
    )
    blocked: list[str] = []
    for vol, a in live:
        iid = a.instance_id
        if iid in ours:
            continue  # live populators are terminated below (which detaches)
        if iid not in sources_of_plan and iid not in populators:
            blocked.append(f"{vol} on {iid}: not an instance of this warm (teardown never touches it)")
            continue
        running = source_state.get(iid, "terminated") in ("pending", "running", "stopping")
        if running and done.get(iid) != "ok":
            why = answered.get(iid) or ("unmount sent" if iid in sent_to else "unmount not sent yet")
            blocked.append(f"{vol} on source {iid}: {why}")
            continue  # never detach (let alone force) a volume a running source may have mounted
        key = f"{vol}/{iid}"
        if a.state == "detaching":
            mem.stuck[key] = mem.stuck.get(key, 0) + 1
            if mem.stuck[key] < FORCE_DETACH_AFTER:
                continue
        if calls.take():
            # Forced only when stuck after a successful unmount, or when the node is not running.
            deps.attacher.detach(vol, iid, force=a.state == "detaching" or not running)
    # A populator only mounted read-only: once its unmount answered (or it holds no attachment),
    # terminate it; after UNMOUNT_TRIES + 1 passes without an answer, terminate it anyway.
    to_terminate = [
        iid
        for iid, i in ours.items()
        if i["State"]["Name"] != "shutting-down"
        and (iid not in hosts or iid in done or passes > UNMOUNT_TRIES + 1)
    ]
    for batch in chunks(to_terminate, 500):
        if calls.take():
            deps.ec2.terminate_instances(InstanceIds=list(batch))
    far = [i["InstanceId"] for i in remote.instances if i["State"]["Name"] != "shutting-down"]
    for batch in chunks(far, 500):
        if there is not None and calls.take():
            there.terminate_instances(InstanceIds=list(batch))
    to_terminate += far
    deleted = 0
    for v in inv.volumes:
        if v["State"] == "available" and not atts.get(v["VolumeId"]) and calls.take():
            deps.ec2.delete_volume(VolumeId=v["VolumeId"])
            deleted += 1
    if owns and mem.model_dump_json() != before:
        deps.s3.save_teardown(target.status_prefix, str(target.warm_id), mem)
    if passes >= TEARDOWN_MAX_PASSES:
        raise WaitTimedOutError(
            f"teardown of {warm_id or target.execution_arn} incomplete after {passes} passes; left: "
            f"{inv.describe()}"
            + (f"; in {target.populator_region}: {remote.describe()}" if not remote.empty else "")
            + (f"; buckets: {', '.join(buckets_left)}" if buckets_left else "")
            + (f"; still mounted: {'; '.join(blocked[:5])}" if blocked else "")
        )
    progressed = calls.left < TEARDOWN_CALLS_PER_PASS
    return {
        "complete": False,
        "passes": passes,
        "waits": waits + (0 if progressed else 1),
        "wait_seconds": backoff_seconds(0 if progressed else waits),
        "deleted_volumes": deleted,
        "terminated": len(to_terminate),
        "volumes_left": len(inv.volumes) - deleted,
        "instances_left": len(inv.instances) + len(remote.instances),
        "buckets_left": len(buckets_left),
        "transport_objects": emptied.objects if emptied else 0,
        "blocked": blocked[:3],
    }


def _delete_buckets(target: TeardownTarget, deps: Deps, calls: _Calls) -> transport.Emptied:
    """Empty and delete this execution's S3 transport bucket — the one its record names (never one
    found by listing or by tags) — within the pass's call budget; `left` names what is still there."""
    out = transport.Emptied()
    recorded = deps.s3.transport_bucket(target.status_prefix, target.execution_arn)
    name = transport.recorded_bucket(recorded, deps.settings.transport_bucket_prefix)
    account = target.execution_arn.split(":")[4]
    for bucket in transport.find_buckets(deps.s3.s3, name, account):
        one = transport.delete_bucket(deps.s3.s3, bucket, max(calls.left, 0), account)
        calls.left -= one.calls
        out.objects += one.objects
        out.uploads += one.uploads
        out.calls += one.calls
        out.left += one.left
    if recorded is not None and not out.left:
        deps.s3.forget_transport(target.status_prefix, target.execution_arn)
    return out


def _unmount_results(mem: TeardownState, deps: Deps) -> dict[str, str]:
    """Per instance whose latest unmount answered: "ok", or "failed (...): <output>". Only commands
    with an instance still waiting for its answer are read again."""
    latest = {i: cid for cid, iids in mem.unmount.items() for i in iids}  # later commands win
    for cid, iids in mem.unmount.items():
        waiting = [i for i in iids if latest[i] == cid and i not in mem.unmount_results]
        if not waiting:
            continue
        for iid, inv in deps.agents.invocations(cid).items():
            if iid in waiting and inv.status not in RUNNING_COMMAND_STATES:
                ok = inv.status == "Success"
                mem.unmount_results[iid] = "ok" if ok else f"failed ({inv.status}): {inv.output[-200:]}"
    return dict(mem.unmount_results)


def teardown_target(event: Mapping[str, Any] | TeardownEvent) -> TeardownTarget:
    """What the warm machine's own Teardown tears down: its execution (`execution_arn`, which
    ValidateInput took from the context, and the validated `input`)."""
    ev = event if isinstance(event, TeardownEvent) else parse_event(dict(event), TeardownEvent)
    return _target_of(_execution_arn(ev.target_arn), ev.execution_input)


# Every status after which an execution runs no step again.
ENDED_STATUSES = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})


def ended_target(
    event: Mapping[str, Any] | TeardownEvent, warm_machine_arn: str, executions: Any
) -> TeardownTarget:
    """What the teardown machine tears down: the execution its event names (an EventBridge 'Step
    Functions Execution Status Change' event, `detail.executionArn`; the rule sends ABORTED /
    TIMED_OUT / FAILED ones, since no Catch runs for the first two and the third may have failed
    outside one) — only when DescribeExecution says it is an execution of this stack's warm machine
    (`warm_machine_arn`, from the teardown machine's definition) and has ended. Anything else is
    refused (InvalidInputError) before anything is touched. The input read is the one
    DescribeExecution returns, not the event's copy; it may never have passed ValidateInput."""
    ev = event if isinstance(event, TeardownEvent) else parse_event(dict(event), TeardownEvent)
    arn = _execution_arn(ev.target_arn)
    prefix = warm_machine_arn.replace(":stateMachine:", ":execution:", 1) + ":"
    if not arn.startswith(prefix):
        raise InvalidInputError(
            f"teardown refused: {arn} is not an execution of this stack's warm machine {warm_machine_arn}"
        )
    if executions is None:
        raise InvalidInputError("teardown refused: this controller cannot describe executions")
    try:
        desc = executions.describe_execution(executionArn=arn)
    except ClientError as exc:
        raise InvalidInputError(f"teardown refused: cannot describe {arn}: {error_code(exc)}") from exc
    machine, status = desc.get("stateMachineArn"), desc.get("status")
    if machine != warm_machine_arn:
        raise InvalidInputError(
            f"teardown refused: {arn} is an execution of {machine}, not of this stack's warm machine "
            f"{warm_machine_arn}"
        )
    if status not in ENDED_STATUSES:
        raise InvalidInputError(
            f"teardown refused: {arn} is {status}; the teardown machine tears down only an execution "
            "that has ended (a running warm tears itself down)"
        )
    try:
        inp = json.loads(desc.get("input") or "{}")
    except ValueError:
        inp = {}
    return _target_of(arn, inp if isinstance(inp, dict) else {})


def _execution_arn(value: object) -> str:
    if not isinstance(value, str) or ":execution:" not in value:
        raise InvalidInputError(f"teardown needs the execution's ARN, got {value!r}")
    return value


def _target_of(execution_arn: str, inp: Mapping[str, Any]) -> TeardownTarget:
    """The target from the execution's input, read leniently: without a valid warm id the warm id its
    claim recorded is looked up (`_with_warm_id`)."""
    warm_id = inp.get("warm_id")
    if not isinstance(warm_id, str) or not inputs.matches(inputs.WARM_ID, warm_id):
        warm_id = None
    prefix = inp.get("status_prefix")
    if not isinstance(prefix, str) or not inputs.matches(inputs.STATUS_PREFIX, prefix):
        prefix = inputs.DEFAULT_STATUS_PREFIX
    mount_dir = inp.get("mount_dir")
    if not isinstance(mount_dir, str) or not inputs.matches(inputs.MOUNT_DIR, mount_dir):
        mount_dir = inputs.DEFAULT_MOUNT_DIR
    s3 = inp.get("s3")
    far = s3.get("destination_region") if isinstance(s3, dict) else None
    if not isinstance(far, str) or not inputs.matches(inputs.AWS_REGION, far):
        far = None
    region = populator_region(far, execution_arn.split(":")[3])
    return TeardownTarget(execution_arn, warm_id, prefix, mount_dir, region)
