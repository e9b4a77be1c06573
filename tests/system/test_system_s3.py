"""The whole system on one machine with S3 as the transport (issue 25): the real ASL under moto's Step
Functions interpreter, the real handlers, the real SSM documents run here (localssm.py) — the real
`agent dump --to-s3` (the real dumper, the upload) on each source node and the real `agent populate
--from-s3` (range GETs, the populator loop) on each populator — against real memcacheds, the bytes
going over HTTP to moto's S3 server (a ThreadedMotoServer in this process, so the controller's in-process
calls reach the same buckets), behind tests/faults/s3proxy.py answering a few requests `503 SlowDown`.

Then: the execution SUCCEEDED; no volume was created, nothing was attached; the destination holds
exactly the source's live items, each on its ketama node; the bucket CreateTransport made is gone
(no object, no unfinished multipart upload, no bucket), and nothing tagged is left in the account.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from cachewarm.contract.replicas import parse_pairs
from cachewarm.contract.status import instance_arn
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.routing import EVCACHE_NODE_KEY
from cachewarm_controller import transport
from cachewarm_controller.steps.common import Deps

from tests.controller.support import ACCOUNT, REGION, World
from tests.dumper.dumputil import load
from tests.faults.s3proxy import Faults, s3_proxy
from tests.ketama_oracle import KetamaRing
from tests.system.localssm import LocalAgents, agent_patches
from tests.system.machine import Machine
from tests.system.test_system import ITEMS_PER_SOURCE, WAIT_S, _all_items, _items, _volume_of, system

__all__ = ["system"]  # the fixture, imported from the volume path's system test

pytestmark = pytest.mark.memcached_versions("1.6.18", "1.6.45")


@pytest.fixture(autouse=True)
def moto_reads_bucket_policies_as_denies(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto 5.2.5 turns every conditional Deny of a bucket policy into a denial (it lacks the context
    keys): the bucket's policy is evaluated in tests/controller/test_s3_transport_input.py instead."""
    from moto.iam.access_control import PermissionResult
    from moto.s3.models import FakeBucket

    monkeypatch.setattr(FakeBucket, "get_permission", lambda self, action, resource: PermissionResult.NEUTRAL)


def _run_s3_system(world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, memcached: Any) -> None:
    sources, dests = 2, 2
    now = int(time.time())
    replica = f"s3sys-{world.serial}"
    ids = world.add_source_nodes(replica, sources)
    src = {i: memcached(memory_mb=64) for i in ids}
    for n, i in enumerate(ids):
        load(src[i], _items(n, now))
    dst = [memcached(memory_mb=64, host=f"127.0.0.{k + 1}") for k in range(dests)]
    machine = Machine(tmp_path / "machine", _volume_of)
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
        # As the stack sets them: the S3 transport needs its key and the controller's role.
        settings=dataclasses.replace(
            world.deps.settings,
            kms_key_id="arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            controller_role_arn="arn:aws:iam::123456789012:role/cachewarm-controller",
            replica_pairs=parse_pairs(f"{replica}->{dst_replica}"),
        ),
        statuses=None,
        clock=time.time,
        sleep=lambda s: time.sleep(min(s, WAIT_S)),
    )
    time.sleep(2.1)  # the 1-second items expire: what is live now is what must arrive
    expected: dict[bytes, Any] = {}
    for s in src.values():
        expected.update(_all_items(s))
    assert len(expected) == sources * ITEMS_PER_SOURCE
    seen: dict[str, Any] = {}

    def bucket_during_the_warm() -> None:  # before the first poll: the agents are at work
        names = [b["Name"] for b in world.s3.list_buckets()["Buckets"] if world.warm_id in b["Name"]]
        seen["buckets"] = names

    world.before["CheckProgress"] = bucket_during_the_warm
    inp = world.make_input(
        source={"replica": replica},
        destination={"replica": dst_replica},
        transport="s3",
        s3={"subnet_ids": [world.subnets["us-east-1b"]], "upload_bytes_per_second": 50_000_000},
        polling={"interval_seconds": 5, "stale_after_seconds": 120, "max_revives": 0, "deadline_hours": 1},
    )
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    throttling = Faults(seed=world.serial, slowdown=0.02)
    try:
        with s3_proxy(f"http://{host}:{port}", throttling) as endpoint, agent_patches(monkeypatch, machine):
            # The agents' S3 clients (node_agent/s3.py) take the endpoint from the environment.
            monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
            ex = world.run(inp, timeout_s=240)
            leaked_agents = agents.join_all(timeout=30)
            monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    finally:
        server.stop()
    # The agents' uploads and range GETs went over HTTP (a PUT per part and DONE, GETs per object).
    assert (
        throttling.requests.get("PUT", 0) >= 2 * sources and throttling.requests.get("GET", 0) >= sources
    ), throttling.requests
    assert ex.status == "SUCCEEDED", f"{ex.desc}\n{agents.describe()}"
    assert leaked_agents == [], leaked_agents
    assert all(r.exit_code == 0 for c in agents.commands.values() for r in c.runs.values()), agents.describe()
    (bucket,) = seen["buckets"]
    assert transport.NAME_PATTERN.fullmatch(bucket) and bucket.startswith(
        f"{transport.BUCKET_PREFIX}{world.warm_id}-"
    )
    # The agents ran the S3 path: no volume, the bucket's prefixes.
    dumps, pops = agents.runs("dump-agent"), agents.runs("populate-agent")
    assert sorted(r.instance_id for r in dumps) == sorted(ids) and len(pops) == sources
    for r in dumps + pops:
        assert "--device" not in r.argv, r.argv
        assert r.argv[r.argv.index("--s3-region") + 1] == "us-east-1"
    # Each pair's own prefix, dumps/<source ARN>/<its populator's ARN>: what the IAM of each reaches.
    pairs = {}
    for r in pops:
        node = r.argv[r.argv.index("--node-id") + 1]
        source, populator = instance_arn(REGION, ACCOUNT, node), instance_arn(REGION, ACCOUNT, r.instance_id)
        pairs[node] = f"s3://{bucket}/dumps/{source}/{populator}"
        assert r.argv[r.argv.index("--from-s3") + 1] == f"{pairs[node]}/{node}"
    for r in dumps:
        assert r.argv[r.argv.index("--to-s3") + 1] == pairs[r.instance_id]
        assert r.argv[r.argv.index("--upload-rate") + 1] == "50000000"
    assert world.attacher.calls == [] and machine.devices == {}
    verified = ex.outputs("Verify")[-1]["verify"]
    assert (verified["checked_keys"], verified["differences"]) == (sources * ITEMS_PER_SOURCE, 0), verified
    # The destination holds exactly the live items, each on its ketama node, value/flags intact.
    ring = KetamaRing([Node(d.host, d.port) for d in dst], EVCACHE_NODE_KEY, 160, None)
    got: dict[bytes, Any] = {}
    for idx, d in enumerate(dst):
        here = _all_items(d)
        wrong = [k for k in here if ring.index_for(k) != idx]
        assert not wrong, f"{len(wrong)} keys on the wrong node {d.address}, e.g. {wrong[:3]}"
        got.update(here)
    assert set(got) == set(expected), (len(set(expected) - set(got)), len(set(got) - set(expected)))
    for k, it in expected.items():
        g = got[k]
        assert (g.value, g.flags) == (it.value, it.flags), k
        assert (g.ttl == -1) == (it.ttl == -1), k
    # Nothing left: the bucket (objects, uploads, the bucket itself), instances, status objects.
    assert [b["Name"] for b in world.s3.list_buckets()["Buckets"] if b["Name"] == bucket] == []
    torn = ex.outputs("Teardown")
    assert sum(p["teardown"].get("transport_objects", 0) for p in torn) >= 2 * sources  # data + DONE
    inv = world.inventory()
    assert inv.empty, inv.describe()
    assert world.status_objects() == []


def test_two_source_nodes_to_two_destination_nodes_through_s3(
    system: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, memcached: Any
) -> None:
    _run_s3_system(system, monkeypatch, tmp_path, memcached)
