"""The shared volume's commands (format, mount rw / ro,norecovery, remount) through a fake runner."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.runner import CommandResult, SubprocessRunner
from cachewarm.node_agent.volume import Volume, reader_mount_options

from tests.node_agent.support import BLANK, MOUNTED_RW, NOT_MOUNTED, XFS, FakeClock, FakeRunner, volume

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


def test_source_already_mounted_is_only_thawed(tmp_path: Path) -> None:
    # A run killed between freeze and thaw leaves the file system frozen; thawing one that is not
    # frozen fails, harmlessly.
    r = FakeRunner({"findmnt": (0, "/dev/nvme1n1 xfs rw,noatime,attr2\n"), "fsfreeze": (1, "")})
    v = volume(tmp_path, r)
    assert v.prepare_source() is False
    assert r.calls[1:] == [["fsfreeze", "-u", str(v.mount)]]


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
    # The device is read-only for the kernel before anything mounts it.
    assert r.calls[-3:] == [
        ["blockdev", "--setro", v.device],
        ["mkdir", "-p", str(v.mount)],
        ["mount", "-t", "xfs", "-o", "ro,norecovery", v.device, str(v.mount)],
    ]


def test_reader_mount_is_tried_again_while_the_source_is_still_formatting(tmp_path: Path) -> None:
    # blkid sees XFS as soon as mkfs wrote the superblock; the kernel refuses it until mkfs is done.
    clock = FakeClock()
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS, "mount": [(32, ""), (32, ""), (0, "")]})
    v = volume(tmp_path, r, clock)
    v.prepare_reader(timeout_s=600)
    assert [c[0] for c in r.calls].count("mount") == 3 and clock.sleeps == 2
    assert str(v.mount) in r.mounted


def test_reader_mount_that_keeps_failing_is_a_volume_error_within_a_minute(tmp_path: Path) -> None:
    clock = FakeClock()
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS, "mount": (32, "")})
    with pytest.raises(AgentError) as e:
        volume(tmp_path, r, clock).prepare_reader(timeout_s=3600)
    assert e.value.code == ExitCode.VOLUME and "cannot mount" in str(e.value) and "exited 32" in str(e.value)
    assert 60 <= clock.t <= 65


def test_reader_mount_options_are_used_everywhere(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": NOT_MOUNTED, "blkid": XFS})
    v = volume(tmp_path, r)
    v.reader_options = "ro,norecovery,nouuid"
    v.prepare_reader(timeout_s=1)
    v.remount_reader()
    mounts = [c for c in r.calls if c[0] == "mount"]
    assert len(mounts) == 2 and all(c[4] == "ro,norecovery,nouuid" for c in mounts)
    assert v.reader_mount_template == "mount -t xfs -o ro,norecovery,nouuid {device} {mount}"


@pytest.mark.parametrize("ok", ["ro,norecovery", "ro,norecovery,nouuid", "norecovery,ro,logbsize=32k"])
def test_reader_mount_options_accepted(ok: str) -> None:
    assert reader_mount_options(ok) == ok


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("ro", "lacks norecovery"),
        ("norecovery", "lacks ro"),
        ("rw,norecovery", "lacks ro"),
        ("ro,norecovery,rw", "not rw"),
        ("ro,norecovery;id", "not a mount option"),
        ("ro, norecovery", "not a mount option"),
        ("ro,,norecovery", "not a mount option"),
        ("", "not a mount option"),
    ],
)
def test_reader_mount_options_refused(bad: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        reader_mount_options(bad)


def test_reader_already_mounted_read_only_is_set_read_only(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": (0, "/dev/nvme1n1 xfs ro,norecovery\n")})
    v = volume(tmp_path, r)
    v.prepare_reader(timeout_s=1)
    assert r.calls[1:] == [["blockdev", "--setro", v.device]]


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


# ---- volume: publishing (source) ------------------------------------------------------------------


def test_publish_freezes_then_thaws(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": MOUNTED_RW})
    v = volume(tmp_path, r)
    assert v.publish().frozen_s == 0.0  # the fake clock does not move
    # The dirty data first (writes still flow), then the freeze that writes the metadata in place.
    assert r.calls[1:] == [
        ["sync", "-f", str(v.mount)],
        ["fsfreeze", "-f", str(v.mount)],
        ["fsfreeze", "-u", str(v.mount)],
    ]


def test_publish_failed_sync_is_a_volume_error_without_freeze(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": MOUNTED_RW, "sync": (1, "")})
    with pytest.raises(AgentError) as e:
        volume(tmp_path, r).publish()
    assert e.value.code == ExitCode.VOLUME and "cannot sync" in str(e.value)
    assert r.commands() == ["findmnt", "sync"]


@pytest.mark.parametrize("mounted", [NOT_MOUNTED, (0, "/dev/nvme1n1 xfs ro,norecovery\n")])
def test_publish_never_freezes_what_is_not_the_mounted_volume(tmp_path: Path, mounted: object) -> None:
    # fsfreeze on a plain directory would freeze the file system holding it: the root's, say.
    r = FakeRunner({"findmnt": mounted})
    with pytest.raises(AgentError, match="refusing to freeze"):
        volume(tmp_path, r).publish()
    assert r.commands() == ["findmnt"]


def test_publish_failed_freeze_is_a_volume_error_without_thaw(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": MOUNTED_RW, "fsfreeze": (1, "")})
    v = volume(tmp_path, r)
    with pytest.raises(AgentError) as e:
        v.publish()
    assert e.value.code == ExitCode.VOLUME and "cannot freeze" in str(e.value)
    assert r.calls[2:] == [["fsfreeze", "-f", str(v.mount)]]


def test_publish_retries_the_thaw_then_says_the_volume_stays_frozen(tmp_path: Path) -> None:
    r = FakeRunner({"findmnt": MOUNTED_RW, "fsfreeze": [(0, ""), (1, ""), (1, ""), (0, "")]})
    volume(tmp_path, r).publish()
    assert r.commands() == ["findmnt", "sync"] + ["fsfreeze"] * 4
    r = FakeRunner({"findmnt": MOUNTED_RW, "fsfreeze": [(0, ""), (1, "")]})
    with pytest.raises(AgentError, match="stays frozen"):
        volume(tmp_path, r).publish()
    assert [c[1] for c in r.calls[2:]] == ["-f"] + ["-u"] * 5


def test_publish_interrupted_mid_freeze_still_thaws(tmp_path: Path) -> None:
    class Interrupted(BaseException):
        pass

    r = FakeRunner({"findmnt": MOUNTED_RW})
    plain_run = r.run

    def run(argv: Sequence[str]) -> CommandResult:
        if list(argv[:2]) == ["fsfreeze", "-f"]:
            r.calls.append(list(argv))
            raise Interrupted  # SIGTERM while fsfreeze -f runs: it may have frozen
        return plain_run(argv)

    r.run = run  # type: ignore[method-assign]
    v = volume(tmp_path, r)
    with pytest.raises(Interrupted):
        v.publish()
    assert r.calls[-1] == ["fsfreeze", "-u", str(v.mount)]


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
