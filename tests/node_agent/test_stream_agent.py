"""`cachewarm agent stream`: the stream mode on a source node (real dumper and memcached; the status
object in moto S3, published as the node's `populate` object)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cachewarm.node_agent.cli import agent_group
from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.lifecycle import execute
from cachewarm.node_agent.runner import SubprocessRunner
from cachewarm.node_agent.status import StatusPublisher
from cachewarm.node_agent.stream import StreamJob, run_stream
from cachewarm.testing.populating import fetch
from click.testing import CliRunner

from tests.datapath.test_warm import put
from tests.node_agent.support import BUCKET, read_status, where


def job(tmp_path: Path, src: Any, to: str, dumper: Path) -> StreamJob:
    return StreamJob(
        warm_id="warm-1",
        node_id="i-0123456789abcdef0",
        memcached_host="127.0.0.1",
        memcached_port=src.port,
        destinations=to,
        dumper=str(dumper),
        threads=2,
        state_dir=tmp_path / "state",
    )


def test_stream_agent_warms_then_a_rerun_is_done(
    tmp_path: Path, s3: Any, memcached: Any, dumper_bin: Path
) -> None:
    src, dst = memcached(), memcached()
    put(src, [(b"k%d" % i, i, 0, b"v%d" % i) for i in range(2000)])
    j = job(tmp_path, src, dst.address, dumper_bin)

    def factory() -> StatusPublisher:
        return StatusPublisher(s3, where("populate"), interval_s=0.05)

    runs: list[dict[str, Any]] = []
    for _ in range(2):  # the second run finds DONE: the same summary, nothing written again
        assert (
            execute(factory, lambda st: runs.append(run_stream(j, st, SubprocessRunner(), lambda m: None)))
            == 0
        )
        body = read_status(s3, where("populate"))
        assert body["state"] == "done" and body["progress"]["items"] == 2000
    assert runs[0]["stored"] == runs[1]["stored"] == 2000 and runs[1]["already_present"] == 0
    assert (j.workdir / "DONE").exists() and not list(j.workdir.glob("*.cwd"))  # no data files
    got = fetch(dst, [b"k%d" % i for i in range(2000)])
    assert all(got[b"k%d" % i].value == b"v%d" % i and got[b"k%d" % i].flags == i for i in range(2000))


def test_stream_agent_fails_when_the_destination_cannot_hold_an_item(
    tmp_path: Path, s3: Any, memcached: Any, dumper_bin: Path
) -> None:
    src, dst = memcached(max_item_size="4m"), memcached(max_item_size="1m")
    put(src, [(b"big", 0, 0, b"b" * (2 << 20)), (b"small", 0, 0, b"s")])
    pub = StatusPublisher(s3, where("populate"), interval_s=3600)
    with pytest.raises(AgentError, match="never sent") as e:
        run_stream(job(tmp_path, src, dst.address, dumper_bin), pub, SubprocessRunner(), lambda m: None)
    assert e.value.code == ExitCode.WORK_FAILED
    assert fetch(dst, [b"small"])[b"small"].value == b"s"


def test_stream_agent_refuses_hostile_flags() -> None:
    base = [
        "stream",
        "--warm-id",
        "warm-1",
        "--node-id",
        "i-0123456789abcdef0",
        "--memcached",
        "10.0.0.1:11211",
    ]
    tail = ["--status-bucket", BUCKET, "--status-prefix", "warms"]
    for bad in ["10.0.0.1:11211;id", "$(id):1", "a b:1", "10.0.0.1:11211\n"]:
        res = CliRunner().invoke(agent_group, [*base, "--to", bad, *tail])
        assert res.exit_code == ExitCode.USAGE and "Invalid value" in res.output, (bad, res.output)
