"""`cachewarm agent dump|populate`: the dump and populate jobs (volume commands through a fake runner,
status objects in moto S3), and both agents end to end with the real dumper and memcached."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cachewarm.contract.status import Progress
from cachewarm.datapath.dumper import DumperProgress
from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.jobs import (
    DumpJob,
    PopulateJob,
    Publication,
    dumper_node_id,
    manifest_progress,
    progress_from_dumper,
    run_dump,
    run_populate,
)
from cachewarm.node_agent.lifecycle import execute
from cachewarm.node_agent.runner import CommandResult, SubprocessRunner
from cachewarm.node_agent.status import StatusPublisher
from cachewarm.node_agent.volume import Volume

from tests.node_agent.support import (
    BLANK,
    MOUNTED_RW,
    NOT_MOUNTED,
    XFS,
    FakeClock,
    FakeRunner,
    read_status,
    volume,
    where,
)

# ---- the dump job --------------------------------------------------------------------------------


def dumper_line(items: int) -> str:
    return json.dumps(
        {
            "event": "progress",
            "phase": "dump",
            "keys_listed": 100,
            "items": items,
            "bytes": items * 10,
            "files": 2,
        }
    )


def manifest(records: int) -> str:
    """A DONE the format's reader accepts: three files holding `records` records."""
    files = [
        {
            "name": f"n-{i:08d}-0000-{i:016x}.cwd",
            "chunk": i,
            "part": 0,
            "xxh3": f"{i:016x}",
            "records": r,
            "bytes": 333,
        }
        for i, r in enumerate([records - 2, 1, 1])
    ]
    totals = {"files": 3, "records": records, "bytes": 999, "keys_listed": 100}
    return json.dumps(
        {"format": "cachewarm-dump", "version": 1, "node": "n", "files": files, "totals": totals}
    )


def dump_job(tmp_path: Path, r: FakeRunner) -> DumpJob:
    return DumpJob(
        warm_id="warm-1",
        node_id="i-0123456789abcdef0",
        volume=volume(tmp_path, r),
        memcached_host="127.0.0.1",
        memcached_port=11211,
        dumper="/opt/cachewarm/bin/cachewarm-dump",
        threads=4,
        max_items_per_second=1000,
    )


def test_dump_fresh_then_resume_then_already_done(tmp_path: Path, s3: Any) -> None:
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": BLANK})
    job = dump_job(tmp_path, r)
    out = job.out_dir

    def dumper_killed() -> int:
        (out / "keys").mkdir(parents=True)
        (out / "keys" / "META").write_text("{}")
        return 137

    r.stream_lines = [dumper_line(10), "not json", dumper_line(20)]
    r.stream_effect = dumper_killed
    pub = StatusPublisher(s3, where(), interval_s=3600)
    with pytest.raises(AgentError) as e:
        run_dump(job, pub, r, lambda m: None)
    assert e.value.code == ExitCode.WORK_FAILED and "exited 137" in str(e.value)
    assert pub.status.progress == Progress(items=20, bytes=200, files=2, keys_listed=100)
    # Made visible: dump/ before the dumper starts, its first batch at once (the rate limit then
    # holds back the rest: no clock moves here), and what it published once it exits, failed or not.
    dumper = "/opt/cachewarm/bin/cachewarm-dump"
    publish = ["findmnt", "sync", "fsfreeze", "fsfreeze"]
    assert r.commands()[-14:] == ["mount", *publish, dumper, *publish, *publish]
    first = dumper_calls(r)[0]
    assert first == [
        "/opt/cachewarm/bin/cachewarm-dump",
        "--host",
        "127.0.0.1",
        "--port",
        "11211",
        "--out",
        str(out),
        "--node-id",
        "i_0123456789abcdef0",
        "--threads",
        "4",
        "--max-items-per-second",
        "1000",
        "--progress-interval",
        "0.1",
        "--adaptive",  # on AWS the adaptive guard is on unless the input turns it off
    ]

    # Re-run: the volume already holds the XFS; the dumper resumes from keys/META.
    r2 = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS})
    job.volume.runner = r2

    def dumper_finishes() -> int:
        (out / "DONE").write_text(manifest(1234))
        return 0

    r2.stream_effect = dumper_finishes
    run_dump(job, pub, r2, lambda m: None)
    assert "mkfs.xfs" not in r2.commands()
    assert dumper_calls(r2)[0][-1] == "--resume"
    assert pub.status.progress == Progress(items=1234, bytes=999, files=3, keys_listed=100)

    # Third run: DONE is there, the dumper is not started again; a freeze left by a killed run is
    # thawed, and DONE is made visible once more.
    r3 = FakeRunner({"findmnt": (0, f"{job.volume.device} xfs rw\n")})
    job.volume.runner = r3
    run_dump(job, pub, r3, lambda m: None)
    frz = [["fsfreeze", f, str(job.volume.mount)] for f in ("-u", "-f", "-u")]
    sync = ["sync", "-f", str(job.volume.mount)]
    assert r3.calls == [r3.calls[0], frz[0], r3.calls[0], sync, *frz[1:]]


def dumper_calls(r: FakeRunner) -> list[list[str]]:
    return [c for c in r.calls if c[0].endswith("cachewarm-dump")]


def test_dump_exit_zero_without_done_is_a_failure(tmp_path: Path, s3: Any) -> None:
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS})
    with pytest.raises(AgentError, match="DONE is missing"):
        run_dump(dump_job(tmp_path, r), StatusPublisher(s3, where(), interval_s=3600), r, lambda m: None)


def test_publication_after_each_batch_at_most_once_per_interval(tmp_path: Path) -> None:
    clock = FakeClock()
    r = FakeRunner({"findmnt": MOUNTED_RW})
    pub = Publication(volume(tmp_path, r, clock), interval_s=1.0, log=lambda m: None)

    def line(t: float, files: int) -> int:
        clock.t = t
        pub.on_progress(DumperProgress("progress", files=files))
        return r.commands().count("findmnt")  # findmnt + freeze + thaw per publication

    assert line(0.0, 0) == 0  # nothing published yet
    assert line(0.5, 2) == 1  # a batch: visible at once
    assert line(1.0, 3) == 1  # another within the interval: waits
    assert line(1.2, 3) == 1
    assert line(1.6, 3) == 2  # the interval has passed
    assert line(9.0, 3) == 2  # nothing new: no freeze
    pub.publish()  # after the dumper exits: always
    assert (pub.count, pub.visible_files) == (3, 3)
    assert "made files visible 3 times" in pub.summary()


def test_dump_job_asks_for_progress_lines_often(tmp_path: Path) -> None:
    job = dump_job(tmp_path, FakeRunner())
    for interval, expect in [(1.0, "0.1"), (0.1, "0.05"), (30.0, "0.1")]:
        job.publish_interval_s = interval
        argv = job.argv(False)
        assert argv[argv.index("--progress-interval") + 1] == expect


def test_dumper_node_id_and_progress_parsing() -> None:
    assert dumper_node_id("i-0abc") == "i_0abc"
    assert dumper_node_id("10.0.1.7:11211") == "10.0.1.7_11211"
    assert dumper_node_id("x" * 100) == "x" * 64
    assert progress_from_dumper('{"event": "start"}') is None
    assert progress_from_dumper("[1,2]") is None
    assert progress_from_dumper(dumper_line(3)) == Progress(3, 30, 2, 100)
    guarded = json.loads(dumper_line(3)) | {"probe_p99_us": 410, "probe_baseline_us": 300, "backed_off_ms": 7}
    p = progress_from_dumper(json.dumps(guarded))
    assert p is not None and (p.probe_p99_us, p.probe_baseline_us, p.backed_off_ms) == (410, 300, 7)


def test_done_status_carries_the_harm_report(tmp_path: Path) -> None:
    """Issue 22: the node's final status says what the source's clients felt (DONE's source_protection)."""
    done = tmp_path / "DONE"
    body = json.loads(manifest(10))
    done.write_text(json.dumps(body))
    assert manifest_progress(done).probe_p99_us == 0  # no guard ran: nothing measured
    body["source_protection"] = {
        "adaptive": True,
        "probe_p99_before_us": 180,
        "probe_window_p99_median_us": 240,
        "backed_off_ms": 3500,
    }
    done.write_text(json.dumps(body))
    p = manifest_progress(done)
    assert (p.items, p.probe_p99_us, p.probe_baseline_us, p.backed_off_ms) == (10, 240, 180, 3500)


def test_dump_agent_with_the_real_dumper(tmp_path: Path, s3: Any, memcached: Any, dumper_bin: Path) -> None:
    """End to end on this machine: real memcached and cachewarm-dump; only mkfs/mount are faked."""
    from pymemcache.client.base import Client

    srv = memcached()
    client = Client(("127.0.0.1", srv.port))
    for i in range(500):
        client.set(f"key-{i}", b"v" * 100, noreply=False)
    fake = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": BLANK})
    real = SubprocessRunner()
    fake.stream = real.stream  # type: ignore[method-assign]
    job = DumpJob(
        warm_id="warm-1",
        node_id="i-0123456789abcdef0",
        volume=volume(tmp_path, fake),
        memcached_host="127.0.0.1",
        memcached_port=srv.port,
        dumper=str(dumper_bin),
        threads=2,
    )

    def factory() -> StatusPublisher:
        return StatusPublisher(s3, where(), interval_s=0.05)

    assert execute(factory, lambda st: run_dump(job, st, fake, lambda m: None)) == ExitCode.OK
    body = read_status(s3, where())
    assert body["state"] == "done" and body["progress"]["items"] == 500
    assert (job.out_dir / "DONE").exists()
    assert fake.commands()[:4] == ["findmnt", "blkid", "mkfs.xfs", "mkdir"]


# ---- the populate job ----------------------------------------------------------------------------


@dataclass
class FakeProgress:
    items: int
    bytes: int
    files_consumed: int


@dataclass
class FakeSummary:
    records: int
    bytes: int
    files: int

    def to_json(self) -> str:
        return "{}"


def populate_job(tmp_path: Path, r: FakeRunner, clock: FakeClock | None = None) -> PopulateJob:
    return PopulateJob(
        warm_id="warm-1",
        node_id="i-0123456789abcdef0",
        volume=volume(tmp_path, r, clock),
        destinations="10.0.0.1:11211,10.0.0.2:11211",
        max_items_per_second=500,
        state_dir=tmp_path / "state",
        source_timeout_s=600,
    )


def test_populate_waits_for_the_dump_dir_and_runs_the_populator(tmp_path: Path, s3: Any) -> None:
    clock = FakeClock()
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS})
    job = populate_job(tmp_path, r, clock)
    umounts = 0

    def umount_creates_dump_dir() -> None:
        nonlocal umounts
        umounts += 1
        if umounts == 2:
            job.source_dir.mkdir(parents=True)

    original_run = r.run

    def run(argv: Sequence[str]) -> CommandResult:
        if argv[0] == "umount":
            umount_creates_dump_dir()
        return original_run(argv)

    r.run = run  # type: ignore[method-assign]
    seen: dict[str, Any] = {}

    def fake_populate(config: Any, on_progress: Callable[[Any], None]) -> FakeSummary:
        seen["config"] = config
        on_progress(FakeProgress(items=7, bytes=70, files_consumed=1))
        seen["mid"] = pub.status.progress
        config.remounter.refresh()
        return FakeSummary(records=9, bytes=90, files=2)

    pub = StatusPublisher(s3, where("populate"), interval_s=3600)
    run_populate(job, pub, fake_populate, log=lambda m: None)
    cfg = seen["config"]
    assert cfg.source_dir == job.source_dir
    assert [n.address for n in cfg.destinations] == ["10.0.0.1:11211", "10.0.0.2:11211"]
    assert cfg.state_file == tmp_path / "state" / "warm-1" / "i-0123456789abcdef0.populate-state.json"
    assert cfg.mode == "add" and cfg.max_items_per_second == 500
    assert seen["mid"] == Progress(items=7, bytes=70, files=1, keys_listed=0)
    assert pub.status.progress == Progress(items=9, bytes=90, files=2, keys_listed=0)
    mounts = [c for c in r.calls if c[0] == "mount"]
    assert mounts and all(c[:5] == ["mount", "-t", "xfs", "-o", "ro,norecovery"] for c in mounts)
    assert "mkfs.xfs" not in r.commands()
    assert umounts == 3  # two while waiting for dump/, one by the populator's own refresh


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        ("PopulateError", ExitCode.WORK_FAILED),
        ("DestinationUnreachable", ExitCode.UNREACHABLE),
        ("DumpDataError", ExitCode.DATA),
        ("VolumeError", ExitCode.VOLUME),
    ],
)
def test_populate_failure_ends_with_its_kinds_code(
    tmp_path: Path, s3: Any, kind: str, code: ExitCode
) -> None:
    from cachewarm.datapath import populate as pop

    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS})
    job = populate_job(tmp_path, r)
    job.source_dir.mkdir(parents=True)

    def fails(config: Any, on_progress: Any) -> Any:
        raise getattr(pop, kind)("SERVER_ERROR out of memory from 10.0.0.1:11211")

    with pytest.raises(AgentError) as e:
        run_populate(job, StatusPublisher(s3, where("populate"), interval_s=3600), fails, log=lambda m: None)
    assert e.value.code == code and "SERVER_ERROR" in str(e.value)


def test_populate_times_out_waiting_for_the_dump_dir(tmp_path: Path, s3: Any) -> None:
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS})
    job = populate_job(tmp_path, r)
    with pytest.raises(AgentError) as e:
        run_populate(job, StatusPublisher(s3, where("populate"), interval_s=3600), log=lambda m: None)
    assert e.value.code == ExitCode.TIMEOUT


def test_dump_then_populate_agents_end_to_end(
    tmp_path: Path, s3: Any, memcached: Any, dumper_bin: Path
) -> None:
    """Both agents on this machine (mounts faked, the volume is a directory): every item arrives,
    both status objects end `done`, and the populator really remounted read-only between rounds."""
    from pymemcache.client.base import Client

    src, dst = memcached(), memcached()
    source = Client(("127.0.0.1", src.port))
    for i in range(300):
        source.set(f"k{i}", f"value-{i}".encode() * 10, noreply=False)
    dump_runner = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": BLANK})
    dump_runner.stream = SubprocessRunner().stream  # type: ignore[method-assign]
    dump = DumpJob(
        warm_id="warm-1",
        node_id="i-0123456789abcdef0",
        volume=volume(tmp_path, dump_runner),
        memcached_host="127.0.0.1",
        memcached_port=src.port,
        dumper=str(dumper_bin),
        threads=2,
    )
    assert (
        execute(
            lambda: StatusPublisher(s3, where("dump"), interval_s=3600),
            lambda st: run_dump(dump, st, dump_runner, lambda m: None),
        )
        == ExitCode.OK
    )
    pop_runner = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS})
    job = PopulateJob(
        warm_id="warm-1",
        node_id="i-0123456789abcdef0",
        volume=Volume(dump.volume.device, dump.volume.mount, pop_runner),
        destinations=f"127.0.0.1:{dst.port}",
        state_dir=tmp_path / "state",
        source=f"127.0.0.1:{src.port}",  # the re-check on the source
    )
    assert (
        execute(
            lambda: StatusPublisher(s3, where("populate"), interval_s=3600),
            lambda st: run_populate(job, st, log=lambda m: None),
        )
        == ExitCode.OK
    )
    dest = Client(("127.0.0.1", dst.port))
    assert all(dest.get(f"k{i}") == f"value-{i}".encode() * 10 for i in range(300))
    assert read_status(s3, where("dump"))["state"] == "done"
    body = read_status(s3, where("populate"))
    assert body["state"] == "done" and body["progress"]["items"] == 300
    mounts = [c for c in pop_runner.calls if c[0] == "mount"]
    assert all("ro,norecovery" in c for c in mounts)
    assert job.state_file.exists()
