"""Scale: a 300-node warm polled every 2 minutes for 9 hours stays far below Step Functions'
25,000-event history limit, because per-node work happens inside the Lambdas (no per-node Map)."""

from __future__ import annotations

from typing import Any

from tests.controller.support import AMI, SimNode

HISTORY_LIMIT = 25_000
NODES = 300
HOURS = 9
INTERVAL_S = 120


def add_replica(world: Any, name: str, count: int) -> list[str]:
    ids: list[str] = []
    per_az = count // len(world.subnets)
    for subnet in world.subnets.values():
        resp = world.ec2.run_instances(
            ImageId=AMI,
            InstanceType="r5.large",
            MinCount=per_az,
            MaxCount=per_az,
            SubnetId=subnet,
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": [{"Key": "cachewarm:replica", "Value": name}]}
            ],
        )
        ids.extend(i["InstanceId"] for i in resp["Instances"])
    return ids


def test_300_nodes_9_hours_stays_well_under_the_history_limit(world: Any) -> None:
    nodes = add_replica(world, "big-a", NODES)
    assert len(nodes) == NODES
    # Every node's populate finishes after ~9 h; one node goes silent once and is revived.
    world.agents.default = SimNode(finish_after_s=HOURS * 3600, items=5_000_000, files=2_000)
    world.agents.nodes[nodes[7]] = SimNode(finish_after_s=HOURS * 3600, silent_attempts=1)
    body = world.make_input(
        source={
            "replica": "big-a",
            "node_stats": {n: {"items": 5_000_000, "bytes": 40 * 1024**3} for n in nodes},
        },
        polling={"interval_seconds": INTERVAL_S, "stale_after_seconds": 900, "max_revives": 3},
        verify={"sample_nodes": 32},
    )
    start = world.clock()
    ex = world.run(body, timeout_s=170)
    assert ex.status == "SUCCEEDED", (ex.entered()[-8:], ex.events[-1])
    events = len(ex.events)
    polls = len(ex.outputs("CheckProgress"))
    hours = (world.clock() - start) / 3600
    print(f"\n300-node warm: {events} history events, {polls} polls over {hours:.1f} simulated hours")
    assert hours >= HOURS
    assert polls >= HOURS * 3600 // INTERVAL_S
    # ~9 events per poll (Wait 2 + Task 5 + Choice 2) + a fixed ~60 for the rest.
    assert events < 9 * polls + 200
    assert events < HISTORY_LIMIT // 5  # "well under": less than a fifth of the limit
    last = ex.outputs("CheckProgress")[-1]["progress"]
    assert last["nodes_done"] == NODES and last["done"]
    assert ex.outputs("Plan")[0]["plan"]["nodes"] == NODES
    revived = [r for p in ex.outputs("CheckProgress") for r in p["progress"]["revived"]]
    assert [r["node"] for r in revived] == [nodes[7]]
    # State stays far below 256 KiB: the per-node plan lives in S3; what is carried is the input
    # (here with 300 supplied node stats) plus small step summaries.
    assert max(len(e.get("stateExitedEventDetails", {}).get("output", "")) for e in ex.events) < 64_000
    inv = world.inventory()
    assert inv.empty, inv.describe()
    assert world.status_objects() == []
