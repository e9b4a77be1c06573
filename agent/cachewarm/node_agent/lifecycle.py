"""One agent job's lifecycle: a first heartbeat, the work, a final done/failed status whatever happens,
SIGTERM (SSM CancelCommand, instance stop) unwinding it, and the exit code."""

from __future__ import annotations

import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

import click

from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.runner import CommandRunner, SubprocessRunner
from cachewarm.node_agent.status import StatusPublisher


class Interrupted(BaseException):
    """SIGTERM (SSM CancelCommand, instance stop): unwind, publish `failed`, exit 130."""


@contextmanager
def sigterm_raises() -> Iterator[None]:
    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def log(msg: str) -> None:
    click.echo(f"cachewarm-agent: {msg}", err=True)


def execute(publisher_factory: Callable[[], StatusPublisher], work: Callable[[StatusPublisher], None]) -> int:
    """Run one job between a first heartbeat and a final done/failed status; return the exit code."""
    try:
        publisher = publisher_factory()
        publisher.start()
    except AgentError as e:
        log(str(e))
        return int(e.code)
    code: ExitCode = ExitCode.OK
    error: str | None = None
    try:
        work(publisher)
    except AgentError as e:
        code, error = e.code, str(e)
    except (Interrupted, KeyboardInterrupt) as e:
        code, error = ExitCode.INTERRUPTED, f"interrupted ({e or 'SIGINT'}); re-run to resume"
    except Exception as e:  # a bug: still tell the controller, with the traceback on stderr
        traceback.print_exc()
        code, error = ExitCode.WORK_FAILED, f"unexpected error: {e!r}"
    if error:
        log(error)
    try:
        publisher.finish("failed" if error else "done", error)
    except AgentError as e:
        log(str(e))
        return int(ExitCode.STATUS) if code == ExitCode.OK else int(code)
    log("done" if not error else f"exit {int(code)}")
    return int(code)


def run(
    publisher_factory: Callable[[], StatusPublisher], work: Callable[[StatusPublisher, CommandRunner], None]
) -> NoReturn:
    """Run one job with the real command runner (made here, in the thread that runs the job), SIGTERM
    unwinding it, and exit with its code."""
    runner = SubprocessRunner()
    with sigterm_raises():
        code = execute(publisher_factory, lambda status: work(status, runner))
    sys.exit(code)
