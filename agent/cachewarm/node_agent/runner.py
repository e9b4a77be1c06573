"""Running system commands behind one small interface, so tests inject a fake (nothing is mounted)."""

from __future__ import annotations

import collections
import shlex
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cachewarm.datapath.dumper import terminate_child


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        tail = self.stderr.strip().splitlines()[-5:]
        return f"`{shlex.join(self.argv)}` exited {self.returncode}" + (
            f": {' | '.join(tail)}" if tail else ""
        )


class CommandRunner(Protocol):
    def run(self, argv: Sequence[str]) -> CommandResult:
        """Run to completion; a non-zero exit is returned, not raised."""
        ...

    def stream(self, argv: Sequence[str], on_line: Callable[[str], None]) -> CommandResult:
        """Run to completion, passing each stdout line to `on_line` as it arrives (stderr is kept)."""
        ...


@dataclass
class SubprocessRunner:
    """The real thing. `stream` keeps the last lines of stderr for the error message."""

    stderr_lines: int = 50

    def run(self, argv: Sequence[str]) -> CommandResult:
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
        except FileNotFoundError as e:
            return CommandResult(tuple(argv), 127, "", f"{argv[0]}: not found ({e})")
        return CommandResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)

    def stream(self, argv: Sequence[str], on_line: Callable[[str], None]) -> CommandResult:
        tail: collections.deque[str] = collections.deque(maxlen=self.stderr_lines)
        try:
            proc = subprocess.Popen(
                list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
            )
        except FileNotFoundError as e:
            return CommandResult(tuple(argv), 127, "", f"{argv[0]}: not found ({e})")
        assert proc.stdout is not None and proc.stderr is not None
        # stderr is drained on a thread so a chatty child never blocks on a full pipe.
        drain = threading.Thread(target=lambda: tail.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
        drain.start()
        try:
            for line in proc.stdout:
                on_line(line.rstrip("\n"))
            proc.wait()
        except BaseException:
            # Interrupted (SIGTERM handler, KeyboardInterrupt): never leave the child running.
            terminate_child(proc, 30)
            raise
        finally:
            drain.join(timeout=5)
        return CommandResult(tuple(argv), proc.returncode, "", "".join(tail))
