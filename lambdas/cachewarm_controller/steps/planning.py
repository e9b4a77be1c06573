"""ValidateInput, ClaimWarmId, SurveyReplicas and Plan: the states before anything is created in EC2.

ClaimWarmId makes one execution the owner of a warm id, atomically (an S3 conditional write); every
later step runs only in the owner. SurveyReplicas asks the candidate source nodes' memcached for its
`stats` through an SSM document and returns at once: the state machine waits between its passes.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError
from cachewarm.contract import inputs, tags, warm_ids

from cachewarm_controller.agents import FAILED_COMMAND_STATES, RUNNING_COMMAND_STATES, parse_stats
from cachewarm_controller.attach import require_nitro
from cachewarm_controller.awsutil import chunks, tag_value
from cachewarm_controller.budget import COMMANDS_PER_PASS
from cachewarm_controller.errors import InvalidInputError, PlanError
from cachewarm_controller.history import history_problem, passes
from cachewarm_controller.model import WarmInput, parse_input, volume_size_gib
from cachewarm_controller.ownership import new_nonce
from cachewarm_controller.plan import NodePlan, Probe, Survey, WarmPlan
from cachewarm_controller.steps.common import Deps, Warm, pass_result, populator_clients, populator_region
from cachewarm_controller.steps.inventory import (
    candidate_sources,
    checked_endpoints,
    describe_instances,
    destination_endpoints,
    destination_pending,
    source_of_instances,
)
from cachewarm_controller.steps.pairs import allowed_sources

# ---- ValidateInput --------------------------------------------------------------------------------


def validate(raw: object, deps: Deps, region: str | None = None) -> WarmInput:
    """Reject bad input before anything exists, naming the field. An input without `warm_id` whose
    destination is an Auto Scaling group (the launch trigger's) gets one derived from the group.
    Given destination endpoints must each be a node of the destination replica in this account and
    the stack's VPC (`checked_endpoints`): a free-form address is refused here. `region` is the
    controller's: a cross-region S3 warm names the destination region's launch template (the one the
    stack deployed there, by id) and endpoints in that region's fixed VPC."""
    if isinstance(raw, dict) and "warm_id" not in raw:
        asg = (
            (raw.get("destination") or {}).get("asg_name")
            if isinstance(raw.get("destination"), dict)
            else None
        )
        if isinstance(asg, str) and inputs.matches(inputs.ASG_NAME, asg) and deps.autoscaling is not None:
            warm_id = warm_ids.warm_id_of_group(deps.autoscaling, asg)
            if warm_id is None:
                raise InvalidInputError(f"destination.asg_name {asg!r}: no such Auto Scaling group")
            raw = {**raw, "warm_id": warm_id}
    inp = parse_input(raw)
    problem = history_problem(inp)
    if problem:
        raise InvalidInputError(f"invalid input: {problem}")
    # A cross-region warm's populators launch from the destination region's own template (the
    # stack's app deployed it there) into its fixed VPC; its endpoints are checked there.
    remote = region is not None and populator_region(inp.s3.destination_region if inp.s3 else None, region)
    if remote and remote not in deps.settings.destination_regions:
        allowed = ", ".join(deps.settings.destination_regions) or "none"
        raise InvalidInputError(
            f"s3.destination_region: {remote} is not one of this stack's destination regions ({allowed}); "
            "deploy the stack with it in destinationRegions (docs/transport-s3.md, Cross-region)"
        )
    far = deps.settings.remote_regions.get(remote) if remote else None
    if remote and far is None:
        raise InvalidInputError(
            f"s3.destination_region: {remote}: this controller was deployed without that region's "
            "resources (DESTINATION_REGION_SETTINGS); deploy the app's stacks again"
        )
    ours = far.launch_template_id if far else deps.settings.launch_template_id
    if ours and inp.populator.launch_template_id != ours:
        given = inp.populator.launch_template_id or f"name {inp.populator.launch_template_name!r}"
        where = f" in {remote}" if remote else ""
        raise InvalidInputError(
            f"populator.launch_template_id: {given} is not this stack's populator template{where} "
            f"({ours}); populators launch only from it"
        )
    _check_volume_key(inp.volume.kms_key_id, deps.settings.kms_key_id)
    settings = deps.settings
    allowed_sources(inp, settings.replica_pairs)
    if inp.source.instance_ids:
        source_of_instances(
            inp,
            deps.ec2,
            settings.replica_pairs,
            settings.memcached_security_groups,
            settings.vpc_id,
            error=InvalidInputError,
        )
    key = settings.kms_key_id
    if inp.s3 is not None and not (key and settings.controller_role_arn):
        raise InvalidInputError(
            "transport: s3 needs the stack's KMS key and the controller's role (KMS_KEY_ID, "
            "CONTROLLER_ROLE_ARN): deploy the stack, which sets both"
        )
    if inp.s3 is not None and inp.s3.kms_key_id and inp.s3.kms_key_id not in _key_names(key):
        raise InvalidInputError(
            f"s3.kms_key_id: {inp.s3.kms_key_id} is not this stack's key ({key or 'none set'}); the S3 "
            "transport encrypts every dump with the stack's key only (leave the field out)"
        )
    if inp.destination.endpoints:
        if far is not None and remote:
            checked_endpoints(inp, deps.in_region(remote).ec2, settings.memcached_security_groups, far.vpc_id)
        else:
            checked_endpoints(inp, deps.ec2, settings.memcached_security_groups, settings.vpc_id)
    return inp


def _key_names(key_arn: str | None) -> tuple[str, ...]:
    """The stack's key as an input may name it: its ARN or its id (`arn:...:key/<id>`), no alias (an
    alias can be pointed at another key)."""
    return (key_arn, key_arn.rsplit("/", 1)[-1]) if key_arn else ()


def _check_volume_key(given: str | None, ours: str | None) -> None:
    """The volumes holding a replica's data are encrypted with the stack's key only: an input naming
    another key (or any key, when the stack has none configured) is refused. The stack's key may be
    named by its ARN or its key id."""
    if given is None:
        return
    if ours is None:
        raise InvalidInputError(
            f"volume.kms_key_id: {given} refused: this stack has no key configured (KMS_KEY_ID), so no "
            "key named in an input can be checked; leave volume.kms_key_id out"
        )
    if given not in (ours, ours.rsplit("/", 1)[-1]):
        raise InvalidInputError(
            f"volume.kms_key_id: {given} is not this stack's key ({ours}); the volumes holding a "
            "replica's data are encrypted with the stack's key only"
        )


# ---- ClaimWarmId ----------------------------------------------------------------------------------


def claim(warm: Warm, deps: Deps) -> dict[str, Any]:
    """Make this execution the warm id's owner unless another execution already is. A retry of this
    step after a lost response finds its own claim and is the owner still."""
    body = {"warm_id": warm.warm_id, "execution_arn": warm.execution_arn, "claimed_ms": deps.now_ms()}
    if deps.s3.claim(warm.prefix, warm.warm_id, body):
        owner = warm.execution_arn
    else:
        owner = str((deps.s3.read_claim(warm.prefix, warm.warm_id) or {}).get("execution_arn", ""))
    if owner == warm.execution_arn:
        # Before anything is created: the teardown machine finds this execution's plan from its ARN.
        deps.s3.save_execution(warm.prefix, warm.execution_arn, warm.warm_id)
    return {"owned": owner == warm.execution_arn, "owner": owner}


# ---- SurveyReplicas -------------------------------------------------------------------------------


def _require_replica_tag(nodes: list[dict[str, Any]], what: str) -> None:
    """The controller may run commands only on instances tagged cachewarm:replica (its IAM says so)."""
    untagged = sorted(n["InstanceId"] for n in nodes if tag_value(n, tags.REPLICA) is None)
    if untagged:
        raise PlanError(
            f"{what} {', '.join(untagged[:10])} lack the tag {tags.REPLICA}: the controller may send "
            "commands only to instances the platform tagged as replica nodes (docs/runbook.md §4)"
        )


def survey(warm: Warm, state: dict[str, int], deps: Deps) -> dict[str, Any]:
    """First pass: find the candidate source nodes and ask the ones without supplied stats for their
    memcached `stats` (one SSM command per 50 nodes). Later passes: collect the answers. Ready when
    every candidate has stats and the destination is complete."""
    inp = warm.inp
    found = deps.s3.load_survey(warm.prefix, warm.warm_id)
    if found is None:
        settings = deps.settings
        candidates = candidate_sources(
            inp, deps.ec2, settings.replica_pairs, settings.memcached_security_groups, settings.vpc_id
        )
        supplied = inp.source.node_stats or {}
        ask = [n for nodes in candidates.values() for n in nodes if n["InstanceId"] not in supplied]
        _require_replica_tag(ask, "source candidates")
        batches = list(chunks(sorted(n["InstanceId"] for n in ask), inputs.SSM_MAX_TARGETS))
        if len(batches) > COMMANDS_PER_PASS:
            raise PlanError(f"{len(ask)} source candidates to ask for stats: name the source replica")
        found = Survey(
            execution_arn=warm.execution_arn,
            candidates={name: sorted(n["InstanceId"] for n in nodes) for name, nodes in candidates.items()},
            stats={k: v for k, v in supplied.items()},
        )
        deps.s3.save_survey(warm.prefix, warm.warm_id, found)  # before sending: a retry sends nothing twice
        for batch in batches:
            cid = deps.agents.send(
                deps.settings.documents.stats,
                list(batch),
                {"port": str(inp.source.memcached_port)},
                f"cachewarm {warm.warm_id} stats",
            )
            found.probes.append(Probe(command_id=cid, instance_ids=list(batch)))
        deps.s3.save_survey(warm.prefix, warm.warm_id, found)
    pending = _collect_stats(found, deps)
    if pending is None:
        deps.s3.save_survey(warm.prefix, warm.warm_id, found)
        pending = [i for p in found.probes for i in p.instance_ids if i not in found.stats]
    pending += destination_pending(inp, deps.autoscaling)
    return pass_result(
        state,
        ready=not pending,
        progressed=False,
        limit=passes("SurveyReplicas", inp),
        what="source stats / destination",
        pending=pending,
        candidates=sum(len(v) for v in found.candidates.values()),
    )


def _collect_stats(found: Survey, deps: Deps) -> list[str] | None:
    """Read the probes' answers into `found`; None when something was added (save it), else the
    nodes still pending."""
    added = False
    for probe in found.probes:
        if all(i in found.stats for i in probe.instance_ids):
            continue
        for iid, inv in deps.agents.invocations(probe.command_id).items():
            if iid in found.stats or inv.status in RUNNING_COMMAND_STATES:
                continue
            if inv.status in FAILED_COMMAND_STATES or inv.status != "Success":
                raise PlanError(f"memcached stats on {iid} failed ({inv.status}): {inv.output[:300]}")
            found.stats[iid] = parse_stats(iid, inv.output)
            added = True
    return None if added else [i for p in found.probes for i in p.instance_ids if i not in found.stats]


# ---- Plan -----------------------------------------------------------------------------------------


def _check_launch_template(inp: WarmInput, ec2: Any) -> str:
    """The template exists and launches a Nitro type; returns its instance type."""
    pop = inp.populator
    ref: dict[str, Any] = (
        {"LaunchTemplateId": pop.launch_template_id}
        if pop.launch_template_id
        else {"LaunchTemplateName": pop.launch_template_name}
    )
    try:
        versions = ec2.describe_launch_template_versions(**ref, Versions=[pop.launch_template_version])
    except ClientError as exc:
        raise PlanError(
            f"populator launch template {ref} version {pop.launch_template_version}: {exc}"
        ) from exc
    data = versions["LaunchTemplateVersions"][0].get("LaunchTemplateData", {})
    itype = data.get("InstanceType")
    if not itype:
        raise PlanError(f"populator launch template {ref} sets no InstanceType (a Nitro type is required)")
    require_nitro(ec2, {f"launch template {next(iter(ref.values()))}": itype})
    return str(itype)


def _populator_subnets(inp: WarmInput, deps: Deps) -> dict[str, str]:
    """AZ -> populator subnet: the stack's SubnetIds (one per AZ), overridden by the input's."""
    wanted = sorted(set(deps.settings.populator_subnet_ids) | set(inp.populator.subnet_ids.values()))
    by_az: dict[str, str] = {}
    if wanted:
        for sub in deps.ec2.describe_subnets(SubnetIds=wanted)["Subnets"]:
            if sub["SubnetId"] in deps.settings.populator_subnet_ids:
                by_az.setdefault(sub["AvailabilityZone"], sub["SubnetId"])
            for az, sid in inp.populator.subnet_ids.items():
                if sid == sub["SubnetId"] and sub["AvailabilityZone"] != az:
                    raise PlanError(
                        f"populator.subnet_ids.{az}: {sid} is in {sub['AvailabilityZone']}, not {az} "
                        "(multi-attach volumes are single-AZ)"
                    )
    return {**by_az, **inp.populator.subnet_ids}


def _check_remote_destination(inp: WarmInput, region: str) -> None:
    if inp.destination.asg_name is not None:
        raise PlanError(
            f"destination.asg_name: a cross-region warm ({region}) finds its destination by "
            "destination.replica or destination.endpoints (Auto Scaling groups are looked up in the "
            "controller's region)"
        )


def _s3_populator_subnets(warm: Warm, ec2: Any, vpc_id: str | None) -> list[tuple[str, str]]:
    """(subnet, AZ) of the S3 transport's populator subnets, in the input's order; each must exist in
    the populators' region (`ec2` is that region's client) and, when known, its VPC."""
    spec = warm.inp.s3
    assert spec is not None  # WarmInput: transport s3 has s3
    region = spec.destination_region or warm.region
    subnets = ec2.describe_subnets(Filters=[{"Name": "subnet-id", "Values": list(spec.subnet_ids)}])[
        "Subnets"
    ]
    found = {s["SubnetId"]: s["AvailabilityZone"] for s in subnets}
    missing = [s for s in spec.subnet_ids if s not in found]
    if missing:
        raise PlanError(f"s3.subnet_ids: {', '.join(missing)} not found in {region}")
    elsewhere = sorted(s["SubnetId"] for s in subnets if vpc_id and s.get("VpcId") != vpc_id)
    if elsewhere:
        raise PlanError(
            f"s3.subnet_ids: {', '.join(elsewhere)} not in {vpc_id}, the populators' VPC in {region}"
        )
    return [(s, found[s]) for s in spec.subnet_ids]


def _summary(p: WarmPlan) -> dict[str, Any]:
    return {
        "source_replica": p.source_replica,
        "nodes": len(p.nodes),
        "azs": sorted({r.az for r in p.nodes}),
        "items": sum(r.items for r in p.nodes),
        "bytes": sum(r.bytes for r in p.nodes),
        "volume_gib": sum(r.size_gib for r in p.nodes),
        "destination_endpoints": len(p.destination_endpoints),
    }


def plan(warm: Warm, deps: Deps) -> dict[str, Any]:
    """One row per source node: AZ, subnet, address, data size, volume size. Saved to S3, once: a
    repeated Plan keeps the first (its nonce makes every ClientToken of the execution)."""
    inp = warm.inp
    existing = deps.s3.load_plan(inp.status_prefix, inp.warm_id)
    if existing is not None and existing.execution_arn == warm.execution_arn:
        return _summary(existing)
    found = deps.s3.load_survey(warm.prefix, warm.warm_id)
    if found is None or found.execution_arn != warm.execution_arn:
        raise PlanError(f"no survey of this execution for warm {warm.warm_id} (SurveyReplicas did not run?)")
    totals = {
        name: sum(found.stats[i].items for i in ids if i in found.stats)
        for name, ids in sorted(found.candidates.items())
    }
    replica = max(sorted(totals), key=lambda r: totals[r])
    ids = found.candidates[replica]
    if len(ids) > inputs.MAX_SOURCE_NODES:
        raise PlanError(f"{len(ids)} source nodes: one warm takes at most {inputs.MAX_SOURCE_NODES}")
    described = describe_instances(deps.ec2, ids)
    nodes = [described[i] for i in ids if i in described]
    gone = sorted(set(ids) - described.keys())
    if gone:
        raise PlanError(f"source nodes gone since the survey: {', '.join(gone[:10])}")
    _require_replica_tag(nodes, "source nodes")
    require_nitro(deps.ec2, {n["InstanceId"]: n["InstanceType"] for n in nodes})
    remote = warm.populator_region
    pop_ec2 = populator_clients(warm, deps).ec2
    # The destination replica lives where its populators run: the stack's VPC, or the destination
    # region's fixed VPC (never any VPC of that region).
    vpc = deps.settings.vpc_id
    if remote is not None:
        _check_remote_destination(inp, remote)
        far = deps.settings.remote_regions.get(remote)
        if far is None:
            raise PlanError(f"no settings for destination region {remote} (DESTINATION_REGION_SETTINGS)")
        vpc = far.vpc_id
    _check_launch_template(inp, pop_ec2)
    subnets = _populator_subnets(inp, deps)
    s3_subnets = _s3_populator_subnets(warm, pop_ec2, vpc) if inp.transport == "s3" else []
    groups = deps.settings.memcached_security_groups
    if remote is not None and inp.destination.endpoints:
        checked_endpoints(inp, pop_ec2, groups, vpc)
    endpoints = destination_endpoints(inp, pop_ec2, set(ids), groups, vpc)
    rows = []
    for n in sorted(nodes, key=lambda n: n["InstanceId"]):
        az = n["Placement"]["AvailabilityZone"]
        st = found.stats.get(n["InstanceId"])
        if st is None:
            raise PlanError(f"no memcached stats for source node {n['InstanceId']}")
        rows.append(
            NodePlan(
                node_id=n["InstanceId"],
                az=az,
                subnet_id=subnets.get(az, n.get("SubnetId", "")),
                instance_type=n["InstanceType"],
                private_ip=n.get("PrivateIpAddress", ""),
                items=st.items,
                bytes=st.bytes,
                size_gib=volume_size_gib(st.bytes, inp.volume.headroom, inp.volume.iops),
            )
        )
        if s3_subnets:  # the populator goes to the destination's subnets, one after another
            rows[-1].subnet_id, rows[-1].az = s3_subnets[(len(rows) - 1) % len(s3_subnets)]
        if not rows[-1].subnet_id:
            raise PlanError(f"source node {n['InstanceId']} has no subnet; give populator.subnet_ids.{az}")
    result = WarmPlan(
        warm_id=inp.warm_id,
        execution_arn=warm.execution_arn,
        nonce=new_nonce(),
        populator_region=remote,
        volume_iops=inp.volume.iops,
        volume_kms_key_id=inp.volume.kms_key_id or deps.settings.kms_key_id,
        source_replica=replica or None,
        started_ms=deps.now_ms(),
        destination_endpoints=endpoints,
        nodes=rows,
    )
    deps.s3.save_plan(inp.status_prefix, result)
    return _summary(result)
