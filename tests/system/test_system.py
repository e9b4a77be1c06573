"""The whole system on one machine: the real ASL under moto's Step Functions interpreter, the real
Lambda handlers in-process (the controller tests' harness), SSM Run Command running the real SSM
documents and agent commands here (localssm.py): the real dumper against real source memcacheds, the
real populator against real destination memcacheds, status objects in moto S3.

Then: the execution SUCCEEDED, the destination replica holds exactly the source replica's live items
(each on the node EVCache's ketama picks), and no tagged AWS resource, status object or agent is left.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from cachewarm import __version__
from cachewarm.contract.replicas import parse_pairs
from cachewarm.datapath.metadump import list_keys
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.routing import EVCACHE_NODE_KEY
from cachewarm.testing.memcached import MemcachedServer
from cachewarm_controller.steps.common import Deps

from tests.controller.support import World
from tests.dumper.dumputil import Item, load
from tests.faults.harness import fetch_all
from tests.ketama_oracle import KetamaRing
from tests.system.localssm import STEMS, LocalAgents, agent_patches
from tests.system.machine import Machine

ITEMS_PER_SOURCE = 1500
WAIT_S = 0.2  # a Wait state's real sleep here (the ASL says interval_seconds)


def _volume_of(device: str) -> str:
    # cachewarm.contract.inputs.ebs_device_path: ".../nvme-Amazon_Elastic_Block_Store_vol0123..."
    return "vol-" + device.rsplit("_vol", 1)[1]


def _items(node: int, now: int) -> list[Item]:
    out = []
    for j in range(ITEMS_PER_SOURCE):
        ttl = [0, 3600, now + 40 * 86400][j % 3]
        key = b"n%d:key:%d" % (node, j) if j % 50 else b"n%d:bin\x00\xff%d" % (node, j)
        out.append(Item(key, b"value-%d-%d-" % (node, j) * (1 + j % 7), (node << 20) | j, ttl))
    # Items that are gone before the warm: not "live", must not appear at the destination.
    out += [Item(b"n%d:expiring:%d" % (node, j), b"x", 0, 1) for j in range(20)]
    return out


def _all_items(srv: MemcachedServer) -> dict[bytes, Any]:
    keys = [k for k, _ in list_keys(srv.host, srv.port)]
    return fetch_all(srv, keys)


@pytest.fixture
def system(world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, dumper_bin: Path) -> World:
    """The controller world with real time and real agents instead of the simulated ones."""
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

    monkeypatch.setenv("CACHEWARM_DUMP", str(dumper_bin))

    # Real agents heartbeat in real time: the controller's clock must be the real one too, and a
    # Wait state really waits (briefly) so CheckProgress does not spin.
    def wait_interval(self: Any, env: Any, wait_seconds: int) -> None:
        time.sleep(WAIT_S)

    monkeypatch.setattr(WaitFunction, "_wait_interval", wait_interval)
    return world


def _run_system(
    world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, memcached: Any, sources: int, dests: int
) -> None:
    now = int(time.time())
    replica = f"sys{sources}to{dests}-{world.serial}"
    ids = world.add_source_nodes(replica, sources)
    src = {i: memcached(memory_mb=64) for i in ids}
    for n, i in enumerate(ids):
        load(src[i], _items(n, now))
    # Distinct loopback addresses, so EVCache's node key (host/ip:11211) tells the nodes apart.
    dst = [memcached(memory_mb=64, host=f"127.0.0.{k + 1}") for k in range(dests)]
    machine = Machine(tmp_path / "machine", _volume_of, attached=lambda v, i: _attached(world, v, i))
    # The destination replica: instances tagged with its name (the controller writes only to those),
    # each reached at its stand-in memcached.
    dst_replica = f"{replica}-dst"
    dst_ids = world.add_source_nodes(dst_replica, dests)
    for res in world.ec2.describe_instances(InstanceIds=dst_ids)["Reservations"]:
        for inst in res["Instances"]:
            machine.add_destination(inst["PrivateIpAddress"], dst[dst_ids.index(inst["InstanceId"])])
    for res in world.ec2.describe_instances(InstanceIds=ids)["Reservations"]:
        for inst in res["Instances"]:
            machine.add_source(inst["InstanceId"], inst["PrivateIpAddress"], src[inst["InstanceId"]])
    agents = LocalAgents(machine, ssm=world.ssm)
    world.deps = Deps(
        ec2=world.ec2,
        s3=world.deps.s3,
        agents=agents,
        attacher=world.attacher,
        # The stack pairs these two replicas (replicaPairs).
        settings=dataclasses.replace(
            world.deps.settings, replica_pairs=parse_pairs(f"{replica}->{dst_replica}")
        ),
        statuses=None,  # the agents' own status objects in moto S3, through the real S3Store
        clock=time.time,
        sleep=lambda s: time.sleep(min(s, WAIT_S)),
    )
    time.sleep(2.1)  # the 1-second items expire: what is live now is what must arrive
    expected: dict[bytes, Any] = {}
    for s in src.values():
        expected.update(_all_items(s))
    assert len(expected) == sources * ITEMS_PER_SOURCE
    inp = world.make_input(
        source={"replica": replica},
        destination={"replica": dst_replica},
        polling={
            "interval_seconds": 5,
            "stale_after_seconds": 120,
            "max_revives": 0,
            # Short: a 5 s interval over the default 24 h could overflow the execution history.
            "deadline_hours": 1,
        },
    )
    with agent_patches(monkeypatch, machine):
        ex = world.run(inp, timeout_s=240)
        leaked_agents = agents.join_all(timeout=30)
    assert ex.status == "SUCCEEDED", f"{ex.desc}\n{agents.describe()}"
    assert leaked_agents == [], leaked_agents
    assert all(r.exit_code == 0 for c in agents.commands.values() for r in c.runs.values()), agents.describe()
    _check_commands(agents, machine, ids)
    # The verify agents compared every live item of every source node with the destination.
    verified = ex.outputs("Verify")[-1]["verify"]
    assert verified["ready"] and verified["sampled"] == sources, verified
    assert (verified["checked_keys"], verified["differences"]) == (sources * ITEMS_PER_SOURCE, 0), verified
    # Every volume was mounted read-write once (by its source node: `writers` below) and otherwise only
    # ro,norecovery. Not necessarily rw first: a populator may mount the fresh XFS between the source's
    # mkfs and its mount (harmless: the populator remounts every round).
    for dev in machine.devices.values():
        assert dev.fstype == "xfs" and dev.mounts.count("rw,noatime") == 1, dev.mounts
        assert set(dev.mounts) == {"rw,noatime", "ro,norecovery"}, dev.mounts
    # The destination holds exactly the live items, each on its ketama node, value/flags intact.
    ring = KetamaRing([Node(d.host, d.port) for d in dst], EVCACHE_NODE_KEY, 160, None)
    got: dict[bytes, Any] = {}
    for idx, d in enumerate(dst):
        here = _all_items(d)
        wrong = [k for k in here if ring.index_for(k) != idx]
        assert not wrong, f"{len(wrong)} keys on the wrong node {d.address}, e.g. {wrong[:3]}"
        assert not set(here) & set(got)
        got.update(here)
    assert set(got) == set(expected), (len(set(expected) - set(got)), len(set(got) - set(expected)))
    for k, it in expected.items():
        g = got[k]
        assert (g.value, g.flags) == (it.value, it.flags), k
        assert (g.ttl == -1) == (it.ttl == -1), k
    # Teardown's unmount document unmounted each volume on its source node (a production cache node):
    # nothing of the warm stays mounted there.
    for dev in machine.devices.values():
        assert len(dev.writers) == 1 and dev.writers <= set(dev.unmounted_on), (dev, agents.unmounts)
    assert all(not machine.hosts[i].mounts for i in ids), {i: machine.hosts[i].mounts for i in ids}
    assert {m for _, m in agents.unmounts} == {f"/mnt/cachewarm/{world.warm_id}"}
    # Nothing tagged left: volumes, instances, status objects, attachments.
    inv = world.inventory()
    assert inv.empty, inv.describe()
    assert world.status_objects() == []
    assert all(not a for a in world.attacher.table.values()), world.attacher.table


def _attached(world: World, volume_id: str, instance_id: str) -> bool:
    atts = world.attacher.attachments([volume_id])[volume_id]
    return any(a.instance_id == instance_id and a.state == "attached" for a in atts)


def _check_commands(agents: LocalAgents, machine: Machine, sources: list[str]) -> None:
    """One command per job, none repeated: the stats survey and the install each in one command; a
    dump and a populate per source node (no revive), each node verified on its populator against
    its own memcached; the unmount on every host of a volume."""
    on = {doc: sorted(r.instance_id for r in agents.runs(doc)) for doc in STEMS.values()}
    populators = on["populate-agent"]
    assert on["dump-agent"] == sorted(sources), agents.describe()
    assert len(set(populators)) == len(sources) and not set(populators) & set(sources), populators
    assert on["memcached-stats"] == sorted(sources)
    assert on["install-agent"] == sorted(sources + populators)
    assert sum(c.document in ("memcached-stats", "install-agent") for c in agents.commands.values()) == 2
    assert on["verify-agent"] == populators
    for r in agents.runs("verify-agent"):
        node = r.argv[r.argv.index("--node-id") + 1]
        source = machine.hosts[node].memcached
        assert source is not None and r.argv[r.argv.index("--source") + 1] == source.address, r.argv
    assert sorted(set(on["unmount"])) == sorted(sources + populators), agents.unmounts
    assert all(machine.hosts[i].agent_version == __version__ for i in sources + populators)


def test_one_source_node_to_one_destination_node(
    system: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, memcached: Any
) -> None:
    _run_system(system, monkeypatch, tmp_path, memcached, sources=1, dests=1)


def test_three_source_nodes_to_two_destination_nodes_ketama(
    system: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, memcached: Any
) -> None:
    _run_system(system, monkeypatch, tmp_path, memcached, sources=3, dests=2)
