"""A real shared volume on one machine (tests, `bench/shared_volume.py`): one image file attached as
several loop devices behaves like one multi-attach volume attached to several hosts. The writer
mounts one device read-write; each reader mounts another `ro,norecovery,nouuid` (`nouuid` only
because every mount shares one kernel, which refuses two mounts of one XFS UUID otherwise).

`LoopVolume.close()` undoes everything it did — thaws, unmounts, makes the devices writable again,
detaches them, deletes the image — also after a failure, and also for mounts made and read-only
flags set by someone else (an agent) on its devices.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

# Smallest XFS mkfs.xfs (xfsprogs >= 5.19) makes without complaint; the file is sparse.
IMAGE_BYTES = 512 << 20
TEST_READER_OPTIONS = "ro,norecovery,nouuid"
TOOLS = ("losetup", "mkfs.xfs", "fsfreeze", "blockdev", "mount", "umount", "findmnt")


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def unavailable_reason() -> str | None:
    """Why loop devices with XFS cannot be used here, or None if they can."""
    if os.geteuid() != 0:
        return "not root: loop devices and mounts need root"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"missing {', '.join(missing)} (apt-get install xfsprogs util-linux mount)"
    if "xfs" not in Path("/proc/filesystems").read_text().split():
        _run("modprobe", "xfs", check=False)
        if "xfs" not in Path("/proc/filesystems").read_text().split():
            return "the kernel has no XFS (modprobe xfs failed)"
    probe = _run("losetup", "-f", check=False)
    if probe.returncode != 0:
        return f"no free loop device (`losetup -f`: {probe.stderr.strip() or probe.returncode})"
    return None


@dataclass
class LoopVolume:
    """One sparse image file and the loop devices attached to it."""

    image: Path
    devices: list[str] = field(default_factory=list)
    mounts: list[Path] = field(default_factory=list)

    @staticmethod
    def create(image: Path, attachments: int = 2, size: int = IMAGE_BYTES) -> LoopVolume:
        image.parent.mkdir(parents=True, exist_ok=True)
        with open(image, "wb") as f:
            f.truncate(size)
        vol = LoopVolume(image)
        try:
            for _ in range(attachments):
                vol.devices.append(_run("losetup", "-f", "--show", str(image)).stdout.strip())
                _run("blockdev", "--setrw", vol.devices[-1])  # in case a crashed run left it read-only
        except BaseException:
            vol.close()
            raise
        return vol

    # ---- what a test does by hand (the agents do it themselves) ----------------------------------
    def format(self, device: str | None = None) -> None:
        _run("mkfs.xfs", "-q", "-K", "-L", "cachewarm", device or self.devices[0])

    def mount(self, device: str, at: Path, options: str) -> Path:
        at.mkdir(parents=True, exist_ok=True)
        self.mounts.append(at)
        _run("mount", "-t", "xfs", "-o", options, device, str(at))
        return at

    def mount_reader(self, device: str, at: Path) -> Path:
        _run("blockdev", "--setro", device)
        return self.mount(device, at, TEST_READER_OPTIONS)

    @staticmethod
    def remount(device: str, at: Path, options: str = TEST_READER_OPTIONS) -> None:
        _run("umount", str(at))
        _run("mount", "-t", "xfs", "-o", options, device, str(at))

    # ---- teardown ---------------------------------------------------------------------------------
    def _mounted_on_devices(self) -> list[str]:
        targets: list[str] = []
        for dev in self.devices:
            out = _run("findmnt", "--noheadings", "--raw", "--output", "TARGET", "--source", dev, check=False)
            targets += [t for t in out.stdout.splitlines() if t]
        return targets

    def close(self) -> None:
        """Thaw, unmount, detach, delete; every step is tried whatever failed before. Raises
        RuntimeError at the end if something could not be undone."""
        problems: list[str] = []
        targets = list(dict.fromkeys([*self._mounted_on_devices(), *map(str, reversed(self.mounts))]))
        for t in targets:
            _run("fsfreeze", "-u", t, check=False)  # a frozen writer would hang its unmount
        for t in targets:
            if not os.path.ismount(t):
                continue
            for attempt in range(20):
                if _run("umount", t, check=False).returncode == 0:
                    break
                time.sleep(0.1 * (attempt + 1))  # busy: a child still closing its files
            else:
                lazy = _run("umount", "-l", t, check=False)
                if lazy.returncode != 0:
                    problems.append(f"umount {t}: {lazy.stderr.strip()}")
        for dev in self.devices:
            # A loop device keeps `blockdev --setro` after it is detached: the next user of it (any
            # test, any engineer) would get a read-only device.
            if _run("blockdev", "--setrw", dev, check=False).returncode != 0:
                problems.append(f"blockdev --setrw {dev} failed")
            res = _run("losetup", "-d", dev, check=False)
            if res.returncode != 0:
                problems.append(f"losetup -d {dev}: {res.stderr.strip()}")
        self.devices.clear()
        self.mounts.clear()
        self.image.unlink(missing_ok=True)
        if problems:
            raise RuntimeError("shared volume teardown: " + "; ".join(problems))

    def __enter__(self) -> LoopVolume:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
