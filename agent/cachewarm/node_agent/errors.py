"""Exit codes of `cachewarm agent …` (the SSM command's exit status) and the error carrying one.

The codes are every command's (`cachewarm.exitcodes`, docs/exit-codes.md); the agent uses 0-8 and 130.
"""

from __future__ import annotations

from cachewarm.exitcodes import ExitCode

__all__ = ["AgentError", "ExitCode"]


class AgentError(RuntimeError):
    """A failure with the exit code the agent ends with; the message names the problem."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code
