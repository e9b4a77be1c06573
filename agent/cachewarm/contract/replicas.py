"""Which replicas may be warmed from which: the stack's `replicaPairs`, written `SOURCE->DESTINATION`.

The stack's configuration, not a tag, is the authority: the EventBridge rules start executions only for
these pairs and the controller's ValidateInput refuses any other (no pair configured: no warm at all).

A side is a replica name — the nodes tagged `cachewarm:replica=<name>` (a label: the controller also
requires those nodes to be in one of the stack's memcached security groups) — or `asg:<group>` — the
instances of that Auto Scaling group (`aws:autoscaling:groupName`, a tag only Auto Scaling sets). A
destination `asg:<group>` is what the Auto Scaling launch trigger warms; its source is the configured
one, never "the replica with the most items in the VPC".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from . import inputs  # relative: the CDK wheel carries this package as cachewarm_infra.contract

ARROW = "->"
ASG_PREFIX = "asg:"


@dataclass(frozen=True, order=True)
class Side:
    """One side of a pair: a replica (tag label) or an Auto Scaling group."""

    kind: str  # "replica" | "asg"
    name: str

    def __str__(self) -> str:
        return f"{ASG_PREFIX}{self.name}" if self.kind == "asg" else self.name

    @staticmethod
    def parse(text: str) -> Side:
        text = text.strip()
        if text.startswith(ASG_PREFIX):
            name = text[len(ASG_PREFIX) :]
            if not inputs.matches(inputs.ASG_NAME, name):
                raise ValueError(f"{text!r}: not an Auto Scaling group name after {ASG_PREFIX!r}")
            return Side("asg", name)
        if not inputs.matches(inputs.REPLICA_NAME, text):
            raise ValueError(f"{text!r}: not a replica name (pattern {inputs.REPLICA_NAME})")
        return Side("replica", text)


@dataclass(frozen=True, order=True)
class Pair:
    source: Side
    destination: Side

    def __str__(self) -> str:
        return f"{self.source}{ARROW}{self.destination}"


def parse_pair(text: str) -> Pair:
    """`SOURCE->DESTINATION`; ValueError naming the problem."""
    parts = text.split(ARROW)
    if len(parts) != 2:
        raise ValueError(f"replica pair {text!r}: write it SOURCE{ARROW}DESTINATION")
    source, destination = Side.parse(parts[0]), Side.parse(parts[1])
    if source == destination:
        raise ValueError(f"replica pair {text!r}: a replica cannot be warmed from itself")
    return Pair(source, destination)


def parse_pairs(entries: str | Iterable[str]) -> tuple[Pair, ...]:
    """A comma-separated string (a context key, an environment variable) or a list of pairs; the
    empty string or list is no pair at all."""
    items = re.split(r"\s*,\s*", entries.strip()) if isinstance(entries, str) else list(entries)
    out: list[Pair] = []
    for item in items:
        if item.strip():
            pair = parse_pair(item)
            if pair not in out:
                out.append(pair)
    return tuple(out)


def format_pairs(pairs: Iterable[Pair]) -> str:
    return ",".join(str(p) for p in pairs)


def sources_for(pairs: Iterable[Pair], destination: Side) -> list[Side]:
    """The sources the configuration allows for `destination`, in configuration order."""
    return [p.source for p in pairs if p.destination == destination]
