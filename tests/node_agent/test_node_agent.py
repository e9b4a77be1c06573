"""`cachewarm agent dump|populate`: volume commands through a fake runner, status objects in moto S3."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from cachewarm.node_agent.cli import PATTERNS, agent_group, execute
from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.jobs import (
    DumpJob,
    PopulateJob,
    dumper_node_id,
    progress_from_dumper,
    run_dump,
    run_populate,
)
from cachewarm.node_agent.runner import CommandResult, SubprocessRunner
from cachewarm.node_agent.status import Progress, StatusLocation, StatusPublisher
from cachewarm.node_agent.volume import Volume
from click.testing import CliRunner
from moto import mock_aws

BUCKET = "cachewarm-status-test"


@dataclass
class FakeRunner:
    """Answers commands from a script: `answers[argv[0]]` is a result or a list consumed in order."""

    answers: dict[str, Any] = field(default_factory=dict)
    calls: list[list[str]] = field(default_factory=list)
    stream_lines: list[str] = field(default_factory=list)
    stream_effect: Callable[[], int] = lambda: 0

    def run(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        ans = self.answers.get(argv[0], (0, ""))
        if isinstance(ans, list):
            ans = ans.pop(0) if len(ans) > 1 else ans[0]
        rc, out = ans
        return CommandResult(tuple(argv), rc, out, "boom" if rc else "")

    def stream(self, argv: Sequence[str], on_line: Callable[[str], None]) -> CommandResult:
        self.calls.append(list(argv))
        for line in self.stream_lines:
            on_line(line)
        rc = self.stream_effect()
        return CommandResult(tuple(argv), rc, "", "dumper: SERVER_ERROR out of memory" if rc else "")

    def commands(self) -> list[str]:
        return [c[0] for c in self.calls]


@dataclass
class FakeClock:
    t: float = 0.0
    sleeps: int = 0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps += 1
        self.t += s


def volume(tmp_path: Path, runner: FakeRunner, clock: FakeClock | None = None) -> Volume:
    device = tmp_path / "dev-nvme1n1"
    device.write_bytes(b"")
    clock = clock or FakeClock()
    return Volume(str(device), tmp_path / "mnt", runner, sleep=clock.sleep, clock=clock.now, poll_s=5)


NOT_MOUNTED = (1, "")
BLANK = (2, "")  # blkid -p: no signature
XFS = (0, "xfs\n")


# ---- volume: source (read-write) ------------------------------------------------------------------


def test_source_formats_a_blank_device_then_mounts_rw(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": BLANK})
    v = volume(tmp_path, r)
    assert v.prepare_source() is True
    assert r.calls == [
        [
            "findmnt",
            "--noheadings",
            "--raw",
            "--output",
            "SOURCE,FSTYPE,OPTIONS",
            "--mountpoint",
            str(v.mount),
        ],
        ["blkid", "-p", "-o", "value", "-s", "TYPE", v.device],
        ["mkfs.xfs", "-q", "-K", "-L", "cachewarm", v.device],
        ["mkdir", "-p", str(v.mount)],
        ["mount", "-t", "xfs", "-o", "rw,noatime", v.device, str(v.mount)],
    ]


def test_source_reuses_its_xfs_on_rerun(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS})
    assert volume(tmp_path, r).prepare_source() is False
    assert "mkfs.xfs" not in r.commands()
    assert r.calls[-1][:5] == ["mount", "-t", "xfs", "-o", "rw,noatime"]


def test_source_already_mounted_does_nothing(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": (0, "/dev/nvme1n1 xfs rw,noatime,attr2\n")})
    volume(tmp_path, r).prepare_source()
    assert r.commands() == ["findmnt"]


def test_source_refuses_a_foreign_file_system(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": (0, "ext4\n")})
    with pytest.raises(AgentError) as e:
        volume(tmp_path, r).prepare_source()
    assert e.value.code == ExitCode.VOLUME and "ext4" in str(e.value) and "refusing" in str(e.value)
    assert "mkfs.xfs" not in r.commands() and "mount" not in r.commands()


def test_source_mount_failure_is_a_volume_error(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS, "mount": (32, "")})
    with pytest.raises(AgentError) as e:
        volume(tmp_path, r).prepare_source()
    assert e.value.code == ExitCode.VOLUME and "cannot mount" in str(e.value) and "exited 32" in str(e.value)


def test_source_refuses_a_read_only_mount(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": (0, "/dev/nvme1n1 xfs ro,norecovery\n")})
    with pytest.raises(AgentError, match="read-only"):
        volume(tmp_path, r).prepare_source()


# ---- volume: populator (read-only) ----------------------------------------------------------------


def test_reader_waits_for_the_source_fs_then_mounts_ro_norecovery(tmp_path: Path) -> None:
    clock = FakeClock()
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": [BLANK, BLANK, XFS]})
    v = volume(tmp_path, r, clock)
    v.prepare_reader(timeout_s=600)
    assert clock.sleeps == 2
    assert "mkfs.xfs" not in r.commands()
    assert r.calls[-1] == ["mount", "-t", "xfs", "-o", "ro,norecovery", v.device, str(v.mount)]


def test_reader_times_out_without_a_file_system(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": BLANK})
    with pytest.raises(AgentError) as e:
        volume(tmp_path, r).prepare_reader(timeout_s=30)
    assert e.value.code == ExitCode.TIMEOUT and "no file system" in str(e.value)
    assert "mount" not in r.commands()


def test_reader_refuses_a_read_write_mount(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": (0, "/dev/nvme1n1 xfs rw,noatime\n")})
    with pytest.raises(AgentError, match="read-only"):
        volume(tmp_path, r).prepare_reader(timeout_s=1)


def test_reader_remount(tmp_path: Path) -> None:
    r = FakeRunner()
    v = volume(tmp_path, r)
    v.remount_reader()
    assert r.calls == [
        ["umount", str(v.mount)],
        ["mkdir", "-p", str(v.mount)],
        ["mount", "-t", "xfs", "-o", "ro,norecovery", v.device, str(v.mount)],
    ]


def test_missing_device_times_out(tmp_path: Path) -> None:
    clock = FakeClock()
    v = Volume(str(tmp_path / "nope"), tmp_path / "m", FakeRunner(), sleep=clock.sleep, clock=clock.now)
    with pytest.raises(AgentError) as e:
        v.wait_for_device(60)
    assert e.value.code == ExitCode.VOLUME and "did not appear" in str(e.value)


def test_subprocess_runner_reports_exit_and_stderr(tmp_path: Path) -> None:
    res = SubprocessRunner().run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.returncode, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert "exited 3: err" in res.describe()
    lines: list[str] = []
    res = SubprocessRunner().stream(["sh", "-c", "echo a; echo b; echo c >&2; exit 0"], lines.append)
    assert res.ok and lines == ["a", "b"] and res.stderr == "c\n"
    assert SubprocessRunner().run(["/nonexistent/cmd"]).returncode == 127


# ---- status objects ------------------------------------------------------------------------------


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def where(role: str = "dump", node: str = "i-0123456789abcdef0") -> StatusLocation:
    return StatusLocation(BUCKET, "warms", "warm-1", role, node)  # type: ignore[arg-type]


def read_status(s3: Any, loc: StatusLocation) -> dict[str, Any]:
    return json.loads(s3.get_object(Bucket=BUCKET, Key=loc.key)["Body"].read())


def test_status_object_schema_and_attempts(s3: Any) -> None:
    loc = where()
    assert loc.key == "warms/warm-1/dump/i-0123456789abcdef0.json"
    pub = StatusPublisher(s3, loc, interval_s=3600, now_ms=lambda: 1_700_000_000_000)
    pub.start()
    body = read_status(s3, loc)
    assert body == {
        "warm_id": "warm-1",
        "node_id": "i-0123456789abcdef0",
        "role": "dump",
        "state": "running",
        "heartbeat_ms": 1_700_000_000_000,
        "progress": {"items": 0, "bytes": 0, "files": 0, "keys_listed": 0},
        "error": None,
        "attempt": 1,
    }
    pub.update(Progress(items=5, bytes=50, files=1, keys_listed=7))
    pub.finish("failed", "the dumper failed")
    body = read_status(s3, loc)
    assert body["state"] == "failed" and body["error"] == "the dumper failed"
    assert body["progress"] == {"items": 5, "bytes": 50, "files": 1, "keys_listed": 7}
    # A re-run (revive) counts the attempt up.
    again = StatusPublisher(s3, loc, interval_s=3600)
    again.start()
    again.finish("done")
    body = read_status(s3, loc)
    assert body["attempt"] == 2 and body["state"] == "done" and body["error"] is None


def test_heartbeat_thread_keeps_publishing(s3: Any) -> None:
    import threading

    beats = threading.Semaphore(0)
    pub = StatusPublisher(s3, where(), interval_s=0.01)
    real_put = pub._put

    def counting_put(st: Any) -> None:
        real_put(st)
        beats.release()

    pub._put = counting_put  # type: ignore[method-assign]
    pub.start()
    for _ in range(3):  # three heartbeats after the first publish, however slow the machine
        assert beats.acquire(timeout=60)
    pub.finish("done")
    assert read_status(s3, where())["state"] == "done"
    assert pub.published >= 4


def test_unwritable_bucket_is_exit_code_status() -> None:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")  # no bucket

        def factory() -> StatusPublisher:
            return StatusPublisher(client, where(), interval_s=3600)

        assert execute(factory, lambda st: None) == ExitCode.STATUS


def test_execute_maps_failures_to_status_and_exit_code(s3: Any) -> None:
    def factory() -> StatusPublisher:
        return StatusPublisher(s3, where(), interval_s=3600)

    def fails(st: StatusPublisher) -> None:
        raise AgentError(ExitCode.VOLUME, "cannot mount /dev/x")

    assert execute(factory, fails) == ExitCode.VOLUME
    assert read_status(s3, where())["error"] == "cannot mount /dev/x"

    def crashes(st: StatusPublisher) -> None:
        raise ZeroDivisionError("bug")

    assert execute(factory, crashes) == ExitCode.WORK_FAILED
    body = read_status(s3, where())
    assert body["state"] == "failed" and "ZeroDivisionError" in body["error"] and body["attempt"] == 2

    def interrupted(st: StatusPublisher) -> None:
        raise KeyboardInterrupt

    assert execute(factory, interrupted) == ExitCode.INTERRUPTED
    assert "re-run to resume" in read_status(s3, where())["error"]
    assert execute(factory, lambda st: None) == ExitCode.OK
    assert read_status(s3, where())["state"] == "done"


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
    return json.dumps({"totals": {"files": 3, "records": records, "bytes": 999, "keys_listed": 100}})


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
    first = r.calls[-1]
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
    assert r2.calls[-1][-1] == "--resume"
    assert pub.status.progress == Progress(items=1234, bytes=999, files=3, keys_listed=100)

    # Third run: DONE is there, the dumper is not started again.
    r3 = FakeRunner({"findmnt": (0, f"{job.volume.device} xfs rw\n")})
    job.volume.runner = r3
    run_dump(job, pub, r3, lambda m: None)
    assert r3.commands() == ["findmnt"]


def test_dump_exit_zero_without_done_is_a_failure(tmp_path: Path, s3: Any) -> None:
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS})
    with pytest.raises(AgentError, match="DONE is missing"):
        run_dump(dump_job(tmp_path, r), StatusPublisher(s3, where(), interval_s=3600), r, lambda m: None)


def test_dumper_node_id_and_progress_parsing() -> None:
    assert dumper_node_id("i-0abc") == "i_0abc"
    assert dumper_node_id("10.0.1.7:11211") == "10.0.1.7_11211"
    assert dumper_node_id("x" * 100) == "x" * 64
    assert progress_from_dumper('{"event": "start"}') is None
    assert progress_from_dumper("[1,2]") is None
    assert progress_from_dumper(dumper_line(3)) == Progress(3, 30, 2, 100)


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


def test_populate_failure_is_work_failed(tmp_path: Path, s3: Any) -> None:
    from cachewarm.populate import PopulateError

    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS})
    job = populate_job(tmp_path, r)
    job.source_dir.mkdir(parents=True)

    def fails(config: Any, on_progress: Any) -> Any:
        raise PopulateError("SERVER_ERROR out of memory from 10.0.0.1:11211")

    with pytest.raises(AgentError) as e:
        run_populate(job, StatusPublisher(s3, where("populate"), interval_s=3600), fails, log=lambda m: None)
    assert e.value.code == ExitCode.WORK_FAILED and "SERVER_ERROR" in str(e.value)


def test_populate_times_out_waiting_for_the_dump_dir(tmp_path: Path, s3: Any) -> None:
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS})
    job = populate_job(tmp_path, r)
    with pytest.raises(AgentError) as e:
        run_populate(job, StatusPublisher(s3, where("populate"), interval_s=3600), log=lambda m: None)
    assert e.value.code == ExitCode.TIMEOUT


# ---- the CLI -------------------------------------------------------------------------------------

HOSTILE = [
    "warm-1\n",
    "; rm -rf /",
    "$(reboot)",
    "`id`",
    "a\nrm -rf /",
    "a'b",
    'a"b',
    "a b",
    "a|b",
    "a&&b",
    "../../etc",
]
BASE = {
    "--warm-id": "warm-1",
    "--node-id": "i-0123456789abcdef0",
    "--device": "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0",
    "--mount": "/mnt/cachewarm",
    "--status-bucket": BUCKET,
    "--status-prefix": "warms",
}


@pytest.mark.parametrize("flag", ["--warm-id", "--node-id", "--device", "--mount", "--status-bucket", "--to"])
def test_cli_rejects_hostile_values(flag: str) -> None:
    for bad in HOSTILE:
        if flag in ("--device", "--mount") and bad == "../../etc":
            continue  # not a shell risk; a path pattern allows dots
        args = {**BASE, "--to": "10.0.0.1:11211", flag: bad}
        argv = ["populate", *[x for kv in args.items() for x in kv]]
        res = CliRunner().invoke(agent_group, argv)
        assert res.exit_code == ExitCode.USAGE, (flag, bad, res.output)
        assert "Invalid value" in res.output


def test_cli_patterns_accept_what_the_controller_sends() -> None:
    import re

    assert re.match(PATTERNS["warm_id"], "warm-2026-11-22")
    assert re.match(PATTERNS["device"], BASE["--device"])
    assert re.match(PATTERNS["status_prefix"], "warms")
    assert re.match(PATTERNS["endpoint"], "ip-10-0-0-1.ec2.internal:11211")


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
