"""What `cachewarm warm` fails with, each kind with its exit code (cachewarm/exitcodes.py). Shared by
the warm (`warm.py`), the look before it (`preflight.py`) and the stream mode (`stream.py`)."""

from __future__ import annotations

from pathlib import Path

from cachewarm.exitcodes import ExitCode


class WarmError(RuntimeError):
    exit_code = ExitCode.FAILED


class Unreachable(WarmError):
    exit_code = ExitCode.UNREACHABLE


class SettingError(WarmError):
    """The command line asks for something that must not run (exit 2): fix the flags."""

    exit_code = ExitCode.USAGE


class PlanOnly(Exception):
    """`--plan`: the look before the warm is all that was asked; its text is the message."""


class DumpExists(SettingError):
    """A new warm over an old dump: the command line to continue it is `--resume` added."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"{path} already holds a dump: add --resume to continue it, or use an empty --workdir"
        )
        self.path = path
