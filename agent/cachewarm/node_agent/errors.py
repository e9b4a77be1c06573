"""Exit codes of `cachewarm agent …` (the SSM command's exit status) and the error carrying one."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    # The dumper or the populator failed; the status object says why. Re-running resumes.
    WORK_FAILED = 1
    USAGE = 2  # bad flags (click)
    # The volume: device never appeared, holds a foreign file system, mkfs or mount failed.
    VOLUME = 3
    # The status bucket could not be written (no heartbeat = the controller cannot see this node).
    STATUS = 4
    # Waited too long for the source's file system or dump directory to appear (populator).
    TIMEOUT = 5
    # SIGTERM/SIGINT (e.g. SSM CancelCommand): the status says "failed: interrupted"; re-run resumes.
    INTERRUPTED = 130


class AgentError(RuntimeError):
    """A failure with the exit code the agent ends with; the message names the problem."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code
