"""Click types whose values must match a pattern of `cachewarm.contract.inputs`: the one the SSM
documents' allowedPattern carries for the flag, checked again on the instance as defense in depth
(tests/contract/test_agent_cli.py holds the two together). The whole value must match: a bare `$`
would accept a trailing newline."""

from __future__ import annotations

from typing import Any

import click

from cachewarm.contract import inputs


class Matching(click.ParamType):
    """A text flag: its value must match its contract pattern."""

    name = "text"

    def __init__(self, pattern: str, expected: str | None = None) -> None:
        self.pattern = pattern
        self.expected = expected  # what the pattern allows, in words (else the error shows the pattern)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str) or not inputs.matches(self.pattern, value):
            wanted = f"is not {self.expected}" if self.expected else f"does not match {self.pattern}"
            self.fail(f"{value!r} {wanted}", param, ctx)
        return value


class MatchingInt(Matching):
    """A number flag: its string must match the contract's pattern, its value lie in [lo, hi]."""

    name = "integer"

    def __init__(self, pattern: str, lo: int, hi: int | None = None) -> None:
        super().__init__(pattern, f"a whole number {lo}..{hi}" if hi is not None else None)
        self.lo, self.hi = lo, hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            value = str(value)
        n = int(super().convert(value, param, ctx))
        if self.hi is None and n < self.lo:
            self.fail(f"{n} is less than {self.lo}", param, ctx)
        if self.hi is not None and not self.lo <= n <= self.hi:
            self.fail(f"{n} is not in {self.lo}..{self.hi}", param, ctx)
        return n
