"""The node agents with S3 as the transport (issue 25): `agent dump --to-s3` on a source node and
`agent populate --from-s3` on a populator, against moto's S3 in server mode (real HTTP) with real
memcacheds and the real dumper; only the volume's commands are faked (the S3 path has none)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from cachewarm.datapath import format as df
from cachewarm.datapath.s3transport import S3Location, make_client
from cachewarm.datapath.s3upload import GuardSignal, S3Uploader
from cachewarm.datapath.writer import DirWriter
from cachewarm.node_agent.cli import agent_group
from cachewarm.node_agent.errors import ExitCode
from cachewarm.node_agent.jobs import DumpJob, PopulateJob
from cachewarm.node_agent.lifecycle import execute
from cachewarm.node_agent.runner import SubprocessRunner
from cachewarm.node_agent.s3 import (
    S3Options,
    S3PopulateJob,
    local_volume,
    parse_from_s3,
    run_dump_to_s3,
    run_populate_from_s3,
)
from cachewarm.node_agent.status import StatusPublisher
from cachewarm.testing.populating import records
from click.testing import CliRunner

from tests.node_agent.support import FakeRunner, read_status, where
from tests.volume.conftest import BUCKET, LocalS3, local_s3  # noqa: F401  (the fixture)

NODE = "i-0123456789abcdef0"


@pytest.fixture
def client(local_s3: LocalS3, monkeypatch: pytest.MonkeyPatch) -> Any:  # noqa: F811
    for k, v in local_s3.env().items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    return make_client(local_s3.url)


@pytest.fixture
def loc(request: pytest.FixtureRequest) -> S3Location:
    return S3Location(BUCKET, f"agents/{request.node.name.replace('[', '_').replace(']', '')}")


def keys(client: Any, loc: S3Location) -> list[str]:
    r = client.list_objects_v2(Bucket=loc.bucket, Prefix=loc.prefix + "/")
    return [o["Key"][len(loc.prefix) + 1 :] for o in r.get("Contents", [])]


def fill(memcached: Any, n: int) -> Any:
    from pymemcache.client.base import Client

    srv = memcached()
    c = Client(("127.0.0.1", srv.port))
    for i in range(n):
        c.set(f"k{i}", f"value-{i}".encode() * 20, expire=0, flags=i % 7, noreply=False)
    return srv


def dump_job(tmp_path: Path, port: int, dumper: Path, runner: Any) -> DumpJob:
    return DumpJob(
        warm_id="warm-1",
        node_id=NODE,
        volume=local_volume(str(tmp_path / "src"), runner),
        memcached_host="127.0.0.1",
        memcached_port=port,
        dumper=str(dumper),
        threads=2,
        # Small files: the upload runs while the dump writes them.
        extra_args=["--data-file-size", "65536"],
    )


def populate_job(tmp_path: Path, port: int, source: str | None = None) -> PopulateJob:
    return PopulateJob(
        warm_id="warm-1",
        node_id=NODE,
        volume=local_volume(str(tmp_path / "pop"), FakeRunner()),
        destinations=f"127.0.0.1:{port}",
        state_dir=tmp_path / "state",
        source_timeout_s=60,
        poll_s=0.05,
        source=source,
        accept_no_recheck=source is None,
    )


def test_dump_to_s3_then_populate_from_s3_end_to_end(
    tmp_path: Path, client: Any, loc: S3Location, memcached: Any, dumper_bin: Path
) -> None:
    from pymemcache.client.base import Client

    src, dst = fill(memcached, 2000), memcached()
    runner = FakeRunner()
    runner.stream = SubprocessRunner().stream  # type: ignore[method-assign]
    job = dump_job(tmp_path, src.port, dumper_bin, runner)
    logs: list[str] = []
    rc = execute(
        lambda: StatusPublisher(client, where("dump"), interval_s=3600),
        lambda st: run_dump_to_s3(job, S3Options(loc), st, runner, logs.append, use_volume=False),
    )
    assert rc == ExitCode.OK, logs
    assert runner.commands() == [dumper_bin.name] or all(c != "mount" for c in runner.commands())
    published = keys(client, loc)
    assert published[-1] == f"{NODE}/DONE" or f"{NODE}/DONE" in published
    assert all(k.startswith(f"{NODE}/") for k in published)  # one prefix per source node
    manifest = df.read_manifest(job.out_dir / "DONE")
    assert len(manifest.files) > 1 and len(published) == len(manifest.files) + 1
    assert read_status(client, where("dump"))["state"] == "done"

    s3loc, node = parse_from_s3(f"s3://{loc.bucket}/{loc.prefix}/{NODE}")
    pjob = populate_job(tmp_path, dst.port, source=f"127.0.0.1:{src.port}")  # the re-check on the source
    plogs: list[str] = []
    rc = execute(
        lambda: StatusPublisher(client, where("populate"), interval_s=3600),
        lambda st: run_populate_from_s3(S3PopulateJob(pjob, s3loc, node), st, log=plogs.append),
    )
    assert rc == ExitCode.OK, plogs
    d = Client(("127.0.0.1", dst.port))
    for i in range(2000):
        assert d.get(f"k{i}") == f"value-{i}".encode() * 20, i
    body = read_status(client, where("populate"))
    assert body["state"] == "done" and body["progress"]["items"] == 2000
    # No second copy of the dump on the populator's disk: applied files were deleted.
    assert not [n for n in pjob.source_dir.iterdir() if df.parse_name(n.name)]
    assert f"{len(manifest.files)} deleted once applied" in plogs[-1]

    # Run again (a restart after the end): nothing is fetched, nothing is lost.
    plogs.clear()
    rc = execute(
        lambda: StatusPublisher(client, where("populate"), interval_s=3600),
        lambda st: run_populate_from_s3(S3PopulateJob(pjob, s3loc, node), st, log=plogs.append),
    )
    assert rc == ExitCode.OK and plogs[-1].startswith("downloaded 0 files (0 bytes"), plogs


def test_dump_to_s3_a_rerun_skips_what_is_up(
    tmp_path: Path, client: Any, loc: S3Location, memcached: Any, dumper_bin: Path
) -> None:
    src = fill(memcached, 500)
    runner = FakeRunner()
    runner.stream = SubprocessRunner().stream  # type: ignore[method-assign]
    job = dump_job(tmp_path, src.port, dumper_bin, runner)
    pub = StatusPublisher(client, where("dump"), interval_s=3600)
    first = run_dump_to_s3(job, S3Options(loc), pub, runner, lambda m: None, use_volume=False)
    again = run_dump_to_s3(job, S3Options(loc), pub, runner, lambda m: None, use_volume=False)
    assert first.report.files > 0 and again.report.files == 0
    assert again.report.skipped == first.report.files and again.report.done_already


def test_the_upload_holds_while_the_guard_backs_off(tmp_path: Path, client: Any, loc: S3Location) -> None:
    """No part is sent while the dumper's guard backs off; the bytes/s limit starts afresh after."""
    w = DirWriter(tmp_path / "dump")
    w.write(0, 0, records(50, prefix=b"a:", size=200))
    w.write(1, 0, records(50, prefix=b"b:", size=200))
    w.done()
    guard = GuardSignal(backing_off=True)
    guard.running.set()
    sent: list[bool] = []
    held = {"n": 0}

    def fake_sleep(s: float) -> None:
        held["n"] += 1
        if held["n"] == 5:
            guard.backing_off = False  # the guard recovers after five polls

    up = S3Uploader(client, tmp_path / "dump", loc, NODE, hold=guard.hold, sleep=fake_sleep)
    real = client.upload_part

    def upload_part(**kw: Any) -> Any:
        sent.append(guard.backing_off)
        return real(**kw)

    client.upload_part = upload_part
    up.finish()
    assert sent and not any(sent)  # every part went after the back-off ended
    assert held["n"] == 5 and up.report.held_s > 0
    # Once the dumper has ended, the guard no longer holds the upload.
    guard.backing_off, guard.running = True, threading.Event()
    assert not guard.hold()


def test_parse_from_s3_and_cli_usage(tmp_path: Path) -> None:
    assert parse_from_s3(f"s3://b-1/warm-1/{NODE}") == (S3Location("b-1", "warm-1"), NODE)
    assert parse_from_s3(f"s3://b-1/{NODE}") == (S3Location("b-1", ""), NODE)
    base = [
        "--warm-id",
        "warm-1",
        "--node-id",
        NODE,
        "--mount",
        str(tmp_path),
        "--status-bucket",
        "bkt",
        "--status-prefix",
        "warms",
    ]
    cases = {
        "--from-s3 reads S3, not a volume": [
            "populate",
            *base,
            "--to",
            "127.0.0.1:1",
            "--device",
            "/dev/xvdf",
            "--from-s3",
            f"s3://bkt/w/{NODE}",
        ],
        "must end in --node-id": [
            "populate",
            *base,
            "--to",
            "127.0.0.1:1",
            "--from-s3",
            "s3://bkt/w/i-01234567",
        ],
        "--device is required (only --from-s3": ["populate", *base, "--to", "127.0.0.1:1"],
        "--device is required (only --to-s3": ["dump", *base, "--memcached", "127.0.0.1:1"],
        "go with --to-s3": [
            "dump",
            *base,
            "--memcached",
            "127.0.0.1:1",
            "--device",
            "/dev/x",
            "--upload-rate",
            "5",
        ],
    }
    for why, argv in cases.items():
        res = CliRunner().invoke(agent_group, argv)
        assert res.exit_code == ExitCode.USAGE and why in res.output, (why, res.output)
    res = CliRunner().invoke(
        agent_group, ["dump", *base, "--memcached", "127.0.0.1:1", "--to-s3", "s3://bkt/"]
    )
    assert res.exit_code == ExitCode.USAGE and "--to-s3" in res.output


def test_dump_to_s3_onto_a_scratch_volume(
    tmp_path: Path, client: Any, loc: S3Location, memcached: Any, dumper_bin: Path
) -> None:
    """With --device the source formats and mounts it as on the volume path (a scratch disk for the
    dump), but never freezes it: nothing reads it but the uploader."""
    from tests.node_agent.support import BLANK, NOT_MOUNTED, volume

    src = fill(memcached, 300)
    runner = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": BLANK})
    runner.stream = SubprocessRunner().stream  # type: ignore[method-assign]
    job = dump_job(tmp_path, src.port, dumper_bin, runner)
    job.volume = volume(tmp_path, runner)
    pub = StatusPublisher(client, where("dump"), interval_s=3600)
    up = run_dump_to_s3(job, S3Options(loc), pub, runner, lambda m: None, use_volume=True)
    assert runner.commands()[:4] == ["findmnt", "blkid", "mkfs.xfs", "mkdir"]
    assert "fsfreeze" not in runner.commands()
    assert up.report.files >= 1 and f"{NODE}/DONE" in keys(client, loc)


def test_a_stopped_upload_aborts_its_multipart_upload(tmp_path: Path, client: Any, loc: S3Location) -> None:
    """An interrupted agent stops the upload between parts: nothing half-published, no upload left."""
    from cachewarm.datapath.s3transport import S3TransportError

    w = DirWriter(tmp_path / "dump")
    w.write(0, 0, records(50, prefix=b"a:", size=200))
    w.done()
    up = S3Uploader(client, tmp_path / "dump", loc, NODE)
    up.stop.set()
    with pytest.raises(S3TransportError, match="stopped"):
        up.finish()
    assert keys(client, loc) == []
    assert not client.list_multipart_uploads(Bucket=loc.bucket, Prefix=loc.prefix).get("Uploads")
