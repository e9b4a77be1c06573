"""The shared io2 volume: wait for the device, format it (source only), mount it, publish.

The source node owns the file system: it formats the device only when `blkid` finds nothing on it,
reuses an existing XFS (a re-run resumes), and refuses anything else. A populator never writes: it
waits for the XFS to appear, sets its block device read-only and mounts it `ro,norecovery` (the
writer is another host; replaying the log would write to the volume).

XFS is not a cluster file system. A `norecovery` reader sees only metadata written in place, not
what sits in the writer's log: a file written and fsynced stays invisible to it, across remounts,
until XFS covers its log (~13 s on an idle writer, longer on a busy one). `publish()` on the writer
(`fsfreeze -f` + `fsfreeze -u`) writes everything in place, so the reader's next mount shows it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.runner import CommandResult, CommandRunner

FS_TYPE = "xfs"
FS_LABEL = "cachewarm"
SOURCE_MOUNT_OPTIONS = "rw,noatime"
READER_MOUNT_OPTIONS = "ro,norecovery"
# `blkid -p` exits 2 when it finds no file system signature on the device.
BLKID_NOTHING_FOUND = 2
# Options a reader must have: never write the volume (ro), never replay the writer's log.
READER_REQUIRED = frozenset({"ro", "norecovery"})
_OPTION = re.compile(r"[a-z0-9_]+(=[A-Za-z0-9_.:/-]+)?")
# How long a populator's first mount may fail (the source still formatting) before it is an error.
READER_MOUNT_SETTLE_S = 60.0
# A thaw that fails leaves the writer's file system frozen: the dumper would hang. Try hard.
THAW_ATTEMPTS = 5


def reader_mount_options(options: str) -> str:
    """`--mount-options` of a populator, checked: comma-separated mount options including `ro` and
    `norecovery` (`nouuid` is for two mounts of one file system on one kernel, as in tests).
    Raises ValueError naming the problem."""
    parts = options.split(",")
    bad = [p for p in parts if not _OPTION.fullmatch(p)]
    if bad:
        raise ValueError(f"{options!r}: not a mount option: {bad[0]!r}")
    missing = sorted(READER_REQUIRED - set(parts))
    if missing:
        raise ValueError(f"{options!r} lacks {','.join(missing)}: a populator must never write the volume")
    if "rw" in parts:
        raise ValueError(f"{options!r}: a populator mounts read-only, not rw")
    return options


@dataclass(frozen=True)
class Published:
    """One `publish()`: how long the writer's file system was frozen (its writes stalled)."""

    frozen_s: float


@dataclass(frozen=True)
class Mounted:
    source: str
    fstype: str
    options: frozenset[str]


@dataclass
class Volume:
    """One block device and its mount point, with every command going through `runner`."""

    device: str
    mount: Path
    runner: CommandRunner
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    poll_s: float = 1.0
    log: Callable[[str], None] = field(default=lambda msg: None)
    reader_options: str = READER_MOUNT_OPTIONS

    # ---- inspection ---------------------------------------------------------------------------
    def wait_for_device(self, timeout_s: float) -> None:
        """The attachment takes a while to show up as a block device on the instance."""
        deadline = self.clock() + timeout_s
        while not Path(self.device).exists():
            if self.clock() >= deadline:
                raise AgentError(
                    ExitCode.VOLUME,
                    f"device {self.device} did not appear within {timeout_s:.0f} s (is the volume attached?)",
                )
            self.sleep(self.poll_s)

    def fstype(self) -> str | None:
        """The file system on the device, None if there is none (`blkid -p` probes the device itself)."""
        res = self.runner.run(["blkid", "-p", "-o", "value", "-s", "TYPE", self.device])
        if res.returncode == BLKID_NOTHING_FOUND:
            return None
        if not res.ok:
            raise AgentError(ExitCode.VOLUME, f"cannot probe {self.device}: {res.describe()}")
        value = res.stdout.strip()
        return value or None

    def mounted(self) -> Mounted | None:
        res = self.runner.run(
            [
                "findmnt",
                "--noheadings",
                "--raw",
                "--output",
                "SOURCE,FSTYPE,OPTIONS",
                "--mountpoint",
                str(self.mount),
            ]
        )
        if not res.ok or not res.stdout.strip():
            return None  # findmnt exits 1 when nothing is mounted there
        source, fstype, options = [*res.stdout.strip().splitlines()[0].split(" "), "", ""][:3]
        return Mounted(source, fstype, frozenset(options.split(",")))

    # ---- source node: format + mount read-write -----------------------------------------------
    def prepare_source(self) -> bool:
        """Format if blank, mount RW. Returns True if this call formatted the device."""
        formatted = False
        current = self.mounted()
        if current is not None:
            if "ro" in current.options:
                raise AgentError(
                    ExitCode.VOLUME, f"{self.mount} is mounted read-only; the dumper needs it RW"
                )
            self.log(f"{self.mount} already mounted ({current.source}); resuming")
            # A run killed between freeze and thaw leaves the file system frozen: thaw it (a thaw
            # of a file system that is not frozen fails harmlessly).
            self.runner.run(["fsfreeze", "-u", str(self.mount)])
            return False
        fs = self.fstype()
        if fs is None:
            self.log(f"formatting {self.device} as {FS_TYPE}")
            # -K: skip discard, which is slow on a large new EBS volume and useless on a fresh one.
            self._check(self.runner.run(["mkfs.xfs", "-q", "-K", "-L", FS_LABEL, self.device]), "format")
            formatted = True
        elif fs != FS_TYPE:
            raise AgentError(
                ExitCode.VOLUME,
                f"{self.device} holds a {fs} file system, not {FS_TYPE}: refusing to format a device "
                "that is not blank (wrong --device?)",
            )
        self._mount(SOURCE_MOUNT_OPTIONS)
        return formatted

    # ---- populator: wait for the source's file system, mount read-only --------------------------
    def prepare_reader(self, timeout_s: float) -> None:
        current = self.mounted()
        if current is not None:
            if "ro" not in current.options:
                raise AgentError(
                    ExitCode.VOLUME,
                    f"{self.mount} is mounted read-write; a populator must mount it read-only",
                )
            self._set_read_only()
            return
        deadline = self.clock() + timeout_s
        while (fs := self.fstype()) is None:
            if self.clock() >= deadline:
                raise AgentError(
                    ExitCode.TIMEOUT,
                    f"no file system on {self.device} after {timeout_s:.0f} s (has the dumper started?)",
                )
            self.log(f"waiting for the source to format {self.device}")
            self.sleep(self.poll_s)
        if fs != FS_TYPE:
            raise AgentError(ExitCode.VOLUME, f"{self.device} holds a {fs} file system, expected {FS_TYPE}")
        self._set_read_only()
        # blkid finds the XFS superblock while mkfs.xfs on the source is still writing (libblkid does
        # not look at sb_inprogress; the kernel refuses to mount until mkfs clears it).
        self._mount(self.reader_options, settle_s=READER_MOUNT_SETTLE_S)

    def _set_read_only(self) -> None:
        # The kernel then refuses any write to the device, whatever mounts it (belt and braces: a
        # mount without norecovery would replay the writer's log, `ro` or not).
        self._check(self.runner.run(["blockdev", "--setro", self.device]), "set read-only")

    def remount_reader(self) -> None:
        """A read-only mount shows a frozen view: mount again to see what the writer published."""
        self._check(self.runner.run(["umount", str(self.mount)]), "unmount")
        self._mount(self.reader_options)

    # ---- source node: make published files visible to the readers -------------------------------
    def publish(self) -> Published:
        """Freeze and thaw the writer's file system: every metadata change is then written in place
        and a `norecovery` reader sees it at its next mount. Writes to the volume stall meanwhile
        (`frozen_s`); a `sync -f` before the freeze keeps that short."""
        # FIFREEZE freezes whatever file system holds the path: never the root's, by mistake.
        current = self.mounted()
        if current is None or "rw" not in current.options:
            raise AgentError(
                ExitCode.VOLUME, f"{self.mount} is not mounted read-write: refusing to freeze what holds it"
            )
        # Write the dirty data out first while writes still flow (syncfs does not block them): the
        # freeze then has little left to write, and stalls the dumper's writes that much shorter.
        self._check(self.runner.run(["sync", "-f", str(self.mount)]), "sync")
        start = self.clock()
        frozen: CommandResult | None = None
        try:
            frozen = self.runner.run(["fsfreeze", "-f", str(self.mount)])
        finally:
            if frozen is None:  # interrupted mid-freeze: it may have frozen, never leave it so
                self.runner.run(["fsfreeze", "-u", str(self.mount)])
            elif frozen.ok:
                self._thaw()
        self._check(frozen, "freeze")
        return Published(frozen_s=self.clock() - start)

    def _thaw(self) -> None:
        res = self.runner.run(["fsfreeze", "-u", str(self.mount)])
        for _ in range(THAW_ATTEMPTS - 1):
            if res.ok:
                return
            self.sleep(0.2)
            res = self.runner.run(["fsfreeze", "-u", str(self.mount)])
        self._check(res, "thaw (the volume stays frozen: run `fsfreeze -u` on it)")

    def _mount(self, options: str, settle_s: float = 0.0) -> None:
        """Mount the device at the mount point; a failed mount is tried again every poll_s for
        `settle_s` before it is an error."""
        self._check(self.runner.run(["mkdir", "-p", str(self.mount)]), "create the mount point")
        argv = ["mount", "-t", FS_TYPE, "-o", options, self.device, str(self.mount)]
        settle = self.clock() + settle_s
        while not (res := self.runner.run(argv)).ok and self.clock() < settle:
            self.log(f"cannot mount {self.device} yet ({res.describe()}): is the source still formatting it?")
            self.sleep(self.poll_s)
        self._check(res, "mount")

    def _check(self, res: CommandResult, what: str) -> None:
        if not res.ok:
            raise AgentError(
                ExitCode.VOLUME, f"cannot {what} {self.device} at {self.mount}: {res.describe()}"
            )

    @property
    def reader_mount_template(self) -> str:
        """The populator's remount command (`cachewarm populate --mount-cmd`)."""
        return f"mount -t {FS_TYPE} -o {self.reader_options} {{device}} {{mount}}"
