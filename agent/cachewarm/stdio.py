"""Standard output and error that outlive their reader.

`cachewarm warm --json | head -1`, a `tee` that dies, a closed terminal: the reader of stdout (or
stderr) goes away while a warm is moving data. Python then raises BrokenPipeError from whichever
thread prints next — a progress thread's traceback, a warm abandoned half way, a dumper child left to
the kernel. The output is a side channel; the warm is the job. So the first EPIPE on a stream points
its file descriptor at /dev/null (later writes, children's too, vanish quietly), says so once on the
other stream if that one still has a reader, and the command carries on to its own exit code.

Only EPIPE is absorbed: a full disk or any other write error still raises.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from collections.abc import Callable
from typing import TextIO


class _ReaderGoneRaw(io.RawIOBase):
    """A raw file-descriptor writer that turns EPIPE into writes to /dev/null (see the module doc)."""

    def __init__(self, fd: int, name: str, on_gone: Callable[[str], None]) -> None:
        super().__init__()
        self._fd = fd
        self._name = name
        self._on_gone = on_gone
        self.gone = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        try:
            return os.write(self._fd, b)
        except OSError as e:
            if e.errno != errno.EPIPE:
                raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._fd)
        finally:
            os.close(devnull)
        if not self.gone:
            self.gone = True
            self._on_gone(self._name)
        return len(b)

    def close(self) -> None:
        # The descriptor belongs to the process (fd 1 or 2), not to this wrapper.
        if not self.closed:
            super().close()


def _rewrap(stream: TextIO, raw: _ReaderGoneRaw) -> TextIO:
    """A text stream like `stream` (encoding, errors, line buffering) over `raw`."""
    return io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=stream.line_buffering,
        write_through=getattr(stream, "write_through", False),
    )


def survive_closed_outputs() -> None:
    """Replace sys.stdout and sys.stderr (when they are file descriptors) with streams that outlive
    their reader. Idempotent; call once at the top of a command-line entry point."""
    if getattr(sys.stdout, "_cachewarm_guarded", False):
        return

    def gone(name: str) -> None:
        other = sys.stderr if name == "stdout" else sys.stdout
        try:
            what = "output" if name == "stdout" else "error"
            other.write(f"cachewarm: the reader of standard {what} went away; carrying on without it\n")
            other.flush()
        except (OSError, ValueError):
            pass

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            fd = stream.fileno()
            stream.flush()
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            continue  # not a file descriptor (a test runner's capture): leave it alone
        wrapped = _rewrap(stream, _ReaderGoneRaw(fd, name, gone))
        wrapped._cachewarm_guarded = True  # type: ignore[attr-defined]
        setattr(sys, name, wrapped)
