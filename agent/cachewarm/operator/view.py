"""What `cachewarm status|watch` show: one warm's nodes as a table, or as progress bars until it ends."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cachewarm.contract.status import NodeStatus

# Execution states after which nothing changes any more.
TERMINAL = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")


@dataclass(frozen=True)
class NodeView:
    """One source node: its dump's and its populator's status objects, as far as they exist."""

    node_id: str
    dump: NodeStatus | None = None
    populate: NodeStatus | None = None

    @property
    def total(self) -> int | None:
        """Items to populate: the dump's count once it is done, else the keys listed so far."""
        if self.dump is None:
            return None
        if self.dump.state == "done":
            return self.dump.progress.items
        return max(self.dump.progress.keys_listed, self.dump.progress.items) or None

    @property
    def populated(self) -> int:
        return self.populate.progress.items if self.populate else 0

    @property
    def state(self) -> str:
        if self.populate and self.populate.state == "done":
            return "done"
        for s in (self.populate, self.dump):
            if s is not None and s.state == "failed":
                return f"{s.role} failed"
        if self.populate:
            return "populating"
        if self.dump:
            return "dumping"
        return "waiting"


@dataclass(frozen=True)
class WarmView:
    execution_arn: str
    status: str
    warm_id: str
    started: datetime | None
    stopped: datetime | None
    nodes: list[NodeView]
    events: list[str] = field(default_factory=list)
    error: str | None = None
    unreadable: list[str] = field(default_factory=list)
    # False until the execution has a plan: before it no node's objects are known to be whose.
    planned: bool = True

    @property
    def running(self) -> bool:
        return self.status not in TERMINAL

    @property
    def done(self) -> int:
        """Nodes whose populator is done."""
        return sum(1 for n in self.nodes if n.state == "done")


def _status_dict(s: NodeStatus | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "state": s.state,
        "heartbeat_ms": s.heartbeat_ms,
        "attempt": s.attempt,
        "error": s.error,
        "progress": {
            "items": s.progress.items,
            "bytes": s.progress.bytes,
            "files": s.progress.files,
            "keys_listed": s.progress.keys_listed,
        },
    }


def view_dict(view: WarmView) -> dict[str, Any]:
    """`status --json` / `watch --json`: the view as one JSON object (docs/operator.md names the
    fields)."""
    return {
        "warm_id": view.warm_id,
        "status": view.status,
        "execution_arn": view.execution_arn,
        "started": view.started.isoformat(timespec="seconds") if view.started else None,
        "stopped": view.stopped.isoformat(timespec="seconds") if view.stopped else None,
        "nodes_done": view.done,
        "nodes": [
            {
                "node_id": n.node_id,
                "state": n.state,
                "total": n.total,
                "populated": n.populated,
                "dump": _status_dict(n.dump),
                "populate": _status_dict(n.populate),
            }
            for n in view.nodes
        ],
        "error": view.error,
        "events": view.events,
        "unreadable": view.unreadable,
        "planned": view.planned,
    }


def watch_json(
    load: Callable[[], WarmView],
    interval_s: float,
    emit: Callable[[dict[str, Any]], None],
    sleep: Callable[[float], None] = time.sleep,
) -> WarmView:
    """`watch --json`: one `warm_status` object per look (with its time) until the execution ends."""
    while True:
        view = load()
        emit({"event": "warm_status", "time": _now_iso(), **view_dict(view)})
        if not view.running:
            return view
        sleep(interval_s)


def _now_iso() -> str:
    """As every JSON event's `time` (docs/json-events.md)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _pct(n: int, total: int | None) -> str:
    return f"{100.0 * n / total:5.1f}%" if total else "    -"


def render(view: WarmView, now_ms: int | None = None) -> str:
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    items = sum(n.populated for n in view.nodes)
    out = [
        f"warm {view.warm_id}: {view.status}  "
        f"({view.done}/{len(view.nodes)} nodes done, {items:,} items populated)",
        f"execution {view.execution_arn}",
    ]
    if view.error:
        out.append(f"error: {view.error}")
    if not view.planned:
        out.append("no plan yet: nodes are shown once the warm has planned them")
    if view.nodes:
        out.append(f"{'node':<22} {'state':<16} {'dumped':>14} {'populated':>14} {'':>6}  heartbeat")
    for n in view.nodes:
        beats = [s.heartbeat_ms for s in (n.dump, n.populate) if s is not None]
        age = f"{(now_ms - max(beats)) / 1000:.0f}s ago" if beats else "-"
        dumped = n.dump.progress.items if n.dump else 0
        pct = _pct(n.populated, n.total)
        out.append(f"{n.node_id:<22} {n.state:<16} {dumped:>14,} {n.populated:>14,} {pct}  {age}")
        for s in (n.dump, n.populate):
            if s is not None and s.error:
                out.append(f"    {s.role} (attempt {s.attempt}): {s.error}")
    for key in view.unreadable:
        out.append(f"unreadable status object: {key}")
    if view.events:
        out.append("recent events (newest first):")
        out.extend(f"  {e}" for e in view.events)
    return "\n".join(out)


def watch_loop(
    load: Callable[[], WarmView],
    interval_s: float,
    max_bars: int,
    sleep: Callable[[float], None] = time.sleep,
    stream: Any = None,
) -> WarmView:
    """Progress bars (tqdm) per node until the execution ends; returns the last view."""
    from tqdm import tqdm

    stream = stream or sys.stderr
    bars: dict[str, Any] = {}

    def bar(desc: str, position: int) -> Any:
        return tqdm(
            total=0, desc=desc, unit="item", unit_scale=True, position=position, file=stream, leave=True
        )

    def show(b: Any, total: int | None, n: int, postfix: str) -> None:
        b.total, b.n = total, n
        b.set_postfix_str(postfix, refresh=False)
        b.refresh()

    overall = bar("all nodes", 0)
    try:
        while True:
            view = load()
            nodes = sorted(view.nodes, key=lambda n: (n.state == "done", n.populated))[:max_bars]
            total = sum(n.total or 0 for n in view.nodes) or None
            populated = sum(n.populated for n in view.nodes)
            show(overall, total, populated, f"{view.status} {view.done}/{len(view.nodes)} done")
            for i, n in enumerate(nodes, start=1):
                if n.node_id not in bars:
                    bars[n.node_id] = bar(n.node_id, i)
                show(bars[n.node_id], n.total, n.populated, n.state)
            if not view.running:
                return view
            sleep(interval_s)
    finally:
        for b in bars.values():
            b.close()
        overall.close()
