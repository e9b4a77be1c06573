"""Seeing the writer's new files between rounds.

On AWS the populator reads an io2 multi-attach volume that another instance writes; ext4/XFS are not
cluster file systems, so a read-only mount shows a frozen view until it is mounted again. Between
rounds the populator calls `refresh()`: `umount` + `mount -o ro,norecovery` there, nothing on a plain
directory (local warm, tests). The commands are templates so an operator can adapt them.

A remount shows only what the writer has written in place: a `norecovery` mount never reads the
writer's log, where XFS keeps recent changes for seconds to minutes. The writer must publish
(`fsfreeze -f` + `-u`, as `cachewarm agent dump` does after each batch) for new files to show up
promptly; see docs/architecture.md, "The node agent".
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

DEFAULT_MOUNT_CMD = "mount -o ro,norecovery {device} {mount}"
DEFAULT_UMOUNT_CMD = "umount {mount}"

Runner = Callable[[Sequence[str]], None]


class RemountError(RuntimeError):
    pass


class Remounter(Protocol):
    # True: every file must be closed before refresh() (rounds); False: files stream through.
    quiesce: bool

    def refresh(self) -> None:
        """Make files published since the last call visible."""


@dataclass
class NoopRemounter:
    """A plain directory on the same machine: the kernel already shows every new file."""

    quiesce: bool = False

    def refresh(self) -> None:
        return None


def run_command(argv: Sequence[str]) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RemountError(
            f"`{shlex.join(argv)}` failed with exit code {proc.returncode}: {proc.stderr.strip()}"
        )


@dataclass
class CommandRemounter:
    """`umount` + `mount -o ro,norecovery` of a block device, commands configurable."""

    device: str
    mount: str
    mount_cmd: str = DEFAULT_MOUNT_CMD
    umount_cmd: str = DEFAULT_UMOUNT_CMD
    runner: Runner = field(default=run_command)
    refreshes: int = 0
    quiesce: bool = True

    def _argv(self, template: str) -> list[str]:
        try:
            return [a.format(device=self.device, mount=self.mount) for a in shlex.split(template)]
        except (KeyError, IndexError) as e:
            raise RemountError(f"bad command template {template!r}: use {{device}} and {{mount}}") from e

    def refresh(self) -> None:
        # A failed umount may mean "not mounted" (a previous mount failed): still try to mount, and
        # report both if the mount fails too.
        umount_error: RemountError | None = None
        try:
            self.runner(self._argv(self.umount_cmd))
        except RemountError as e:
            umount_error = e
        try:
            self.runner(self._argv(self.mount_cmd))
        except RemountError as e:
            raise RemountError(f"{e}" + (f" (after: {umount_error})" if umount_error else "")) from e
        self.refreshes += 1
