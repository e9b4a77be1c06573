"""Exit codes of every `cachewarm` command (and of `cachewarm-dump`): one table, one meaning per code.

docs/exit-codes.md is the same table for readers; tests/cli/test_help.py keeps the two, and each
command's `--help` epilog, in agreement. A script can tell "fix your flags" (2) from "the server is not
there" (6), "the data is bad" (7) and "it ran, but the target does not hold everything" (8).
"""

from __future__ import annotations

import enum

import click


class ExitCode(enum.IntEnum):
    OK = 0
    # The job failed for a reason not below (a destination answered SERVER_ERROR, the dumper failed,
    # a worker crashed, an AWS API call was refused, the warm being watched failed).
    FAILED = 1
    WORK_FAILED = 1  # the node agent's name for it
    USAGE = 2  # bad flags, arguments or input files (click's own code for usage errors)
    # The volume: device never appeared, holds a foreign file system, mkfs, mount or remount failed.
    VOLUME = 3
    # The status bucket could not be written (no heartbeat = the controller cannot see this node).
    STATUS = 4
    # Waited too long for the data: the source's file system or dump directory (node agent), or any
    # data file or DONE (`populate --idle-timeout`).
    TIMEOUT = 5
    # A memcached (source or destination) or an AWS endpoint could not be reached: connection refused,
    # timed out, name not resolved — after the retries the command allows.
    UNREACHABLE = 6
    # The dump is bad: a data file corrupt or unverifiable, a file DONE lists missing, DONE invalid or
    # disagreeing with the files.
    DATA = 7
    # It ran to the end, but the target does not hold every item it should (too large for the target,
    # evicted, an incomplete dump, keys missing or different) and the user did not accept the reason.
    INCOMPLETE = 8
    # No AWS credentials or region: configure the SDK (AWS_PROFILE, `aws configure`, an instance role,
    # AWS_REGION or --region).
    AWS_CONFIG = 9
    # SIGINT/SIGTERM: stopped on request; running the same command again resumes.
    INTERRUPTED = 130


# One line per code, as `--help` epilogs and docs/exit-codes.md show it.
MEANING: dict[ExitCode, str] = {
    ExitCode.OK: "success",
    ExitCode.FAILED: "failed (the message says why: SERVER_ERROR, the dumper failed, an AWS error, ...)",
    ExitCode.USAGE: "usage: bad flags, arguments or input files",
    ExitCode.VOLUME: "volume: device missing, foreign file system, mkfs/mount/remount failed",
    ExitCode.STATUS: "the status bucket is not writable",
    ExitCode.TIMEOUT: "timed out waiting for the dump to appear",
    ExitCode.UNREACHABLE: "unreachable: a memcached or AWS endpoint refused or timed out (named)",
    ExitCode.DATA: "bad data: a corrupt, missing or unverifiable data file, or an invalid DONE",
    ExitCode.INCOMPLETE: "incomplete: the target does not hold every item (reasons listed; --accept-*)",
    ExitCode.AWS_CONFIG: "no AWS credentials or region configured",
    ExitCode.INTERRUPTED: "interrupted (SIGINT/SIGTERM); run the same command again to resume",
}


def epilog(*codes: ExitCode, **overrides: str) -> str:
    """The `Exit codes:` block of a command's --help (click keeps `\\b` paragraphs as written).
    `overrides` (by code name) give a command's own wording of a code."""
    lines = ["\b", "Exit codes:"]
    for c in codes:
        lines.append(f"  {int(c):>3}  {overrides.get(c.name, MEANING[c])}")
    return "\n".join(lines)


class CliError(click.ClickException):
    """A one-line `error: …` on stderr and the exit code of its kind (no traceback)."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.exit_code = int(code)

    def show(self, file: object = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def code_of(exc: BaseException, default: ExitCode = ExitCode.FAILED) -> ExitCode:
    """The exit code an exception carries (`exit_code` attribute), else `default`."""
    code = getattr(exc, "exit_code", None)
    return ExitCode(code) if isinstance(code, int) else default
