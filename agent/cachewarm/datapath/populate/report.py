"""What the populator tells: progress events (JSON lines), the summary at the end (with every reason
the destinations do not hold every item, accepted or not) and the oversize report (the keys it never
sent, one JSON line each)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from cachewarm.datapath import format as df
from cachewarm.datapath.populate.destinations import DestinationProbe
from cachewarm.datapath.populate.state import ConsumedFile, NodeCounts, RecheckCounts
from cachewarm.datapath.populate.worker import OversizeItem
from cachewarm.datapath.wire import is_plain_key


@dataclass
class Progress:
    event: str
    round: int
    files_consumed: int
    files_pending: int
    items: int
    stored: int
    already_present: int
    expired: int
    bytes: int
    elapsed_s: float
    items_per_s: float
    detail: str = ""
    # Data files seen in the dump directory so far, and DONE's item count once DONE is read.
    files_published: int = 0
    total_items: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


def event_time() -> str:
    """When a JSON event was emitted: UTC, ISO 8601 with milliseconds (docs/json-events.md)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def progress_printer(stream: Any) -> Callable[[Progress], None]:
    def emit(p: Progress) -> None:
        stream.write(p.to_json() + "\n")
        stream.flush()

    return emit


@dataclass
class _SummaryFields:
    files: int
    records: int
    stored: int
    # NS: a live write had stored the key first; add mode kept it.
    already_present: int
    expired: int
    bytes: int
    elapsed_s: float
    manifest_records: int
    restarts_detected: int
    # Items written (stored, present or resent) per destination.
    per_node: dict[str, int]
    # NS on a resend: our own earlier attempt (a reconnect, a restart of the populator) had stored it.
    resent_own: int = 0
    # Too large for their destination: never sent, named in `oversize_report`.
    oversize: int = 0
    oversize_report: str | None = None
    # Written with the binary protocol (binary keys of 187..250 bytes).
    binary_protocol: int = 0
    # Items the destinations evicted while we wrote: they are gone.
    destination_evictions: int = 0
    evictions_by_node: dict[str, int] = field(default_factory=dict)
    # DONE's "complete" (None: a dumper that does not say) and its reason.
    dump_complete: bool | None = None
    dump_incomplete_reason: str | None = None
    # Per destination: version, item_size_max, cas, evictions setting, as read before writing.
    destinations: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Why the destinations do not hold every item of the dump; `accepted` are those the user accepted.
    incomplete: list[str] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    # Every file DONE lists had been applied by an earlier run (the state file): nothing was written.
    already_complete: bool = False
    # The re-check (add mode; docs/reliability.md "Live traffic during the warm"): "on", "off" (the
    # reason is in recheck_off and `accepted`) or "n/a" (set mode overwrites by definition), and its
    # counts (RecheckCounts, summed over the files and destinations).
    recheck: str = "on"
    recheck_off: str | None = None
    settle_seconds: float = 0.0


# The bases in this order keep the re-check's counts last in the summary line.
@dataclass
class PopulateSummary(RecheckCounts, _SummaryFields):
    """What a run did, as its summary line says it."""

    @property
    def ok(self) -> bool:
        return all(r in self.accepted for r in self.incomplete)

    def failure(self) -> str:
        """The error of a run that is not ok: every reason not accepted, and the flags that would."""
        open_ = [r for r, _ in self._flagged() if r not in self.accepted]
        flags = [f for r, f in self._flagged() if r not in self.accepted]
        return f"the warm is not complete: {'; '.join(open_)} (to accept: {' '.join(flags)})"

    def _flagged(self) -> list[tuple[str, str]]:
        return [(r, f) for r in self.incomplete for head, f in _FLAG.items() if r.startswith(head)]

    def to_json(self) -> str:
        return json.dumps(
            {"event": "summary", "time": event_time(), "ok": self.ok, **asdict(self)}, separators=(",", ":")
        )


def summarize(
    files: list[ConsumedFile],
    destinations: list[str],
    probe: DestinationProbe,
    manifest: df.Manifest,
    *,
    elapsed_s: float,
    restarts_detected: int,
    oversize_report: str | None,
    recheck: str = "on",
    recheck_off: str | None = None,
    settle_seconds: float = 0.0,
) -> PopulateSummary:
    """The summary of a run that consumed every file DONE lists (`incomplete` is `judge`'s)."""
    total = NodeCounts()
    per_node = dict.fromkeys(destinations, 0)
    for f in files:
        for addr, counts in f.nodes.items():
            total.add(counts)
            per_node[addr] = per_node.get(addr, 0) + counts.written
    return PopulateSummary(
        files=len(files),
        records=sum(f.records for f in files),
        stored=total.stored,
        already_present=total.present,
        expired=total.expired,
        bytes=sum(f.bytes for f in files),
        elapsed_s=elapsed_s,
        manifest_records=manifest.total_records,
        restarts_detected=restarts_detected,
        per_node=per_node,
        resent_own=total.resent,
        oversize=total.oversize,
        oversize_report=oversize_report if total.oversize else None,
        binary_protocol=total.binary,
        destination_evictions=probe.evictions,
        evictions_by_node=probe.evictions_by_node(),
        dump_complete=manifest.complete,
        dump_incomplete_reason=manifest.incomplete_reason,
        recheck=recheck,
        recheck_off=recheck_off,
        settle_seconds=settle_seconds,
        **{f.name: getattr(total, f.name) for f in fields(RecheckCounts)},
        destinations={
            a: {
                "version": i.version,
                "item_size_max": i.item_size_max,
                "cas": i.cas,
                "evictions": i.evictions_enabled,
                "binary_protocol": i.binary_protocol,
            }
            for a, i in probe.info.items()
        },
    )


# Each reason's first words (up to ':') and the populate flag that accepts it.
OVERSIZE = "items too large for their destination were never sent"
EVICTED = "the destinations evicted items during the populate"
INCOMPLETE_DUMP = "the dump is incomplete (DONE says complete: false)"
NO_RECHECK = "the re-check is off: a delete, touch or increment the source got during the warm may be undone"
_FLAG = {
    OVERSIZE: "--accept-oversize",
    EVICTED: "--accept-evictions",
    INCOMPLETE_DUMP: "--accept-incomplete-dump",
    NO_RECHECK: "--accept-no-recheck",
}


class Acceptance(Protocol):
    accept_oversize: bool
    accept_evictions: bool
    accept_incomplete_dump: bool
    accept_no_recheck: bool


def judge(s: PopulateSummary, accept: Acceptance) -> list[str]:
    """Fill `s.incomplete` (and `s.accepted`): every reason the destinations do not hold every item."""
    checks = [
        (
            s.oversize > 0,
            accept.accept_oversize,
            f"{OVERSIZE}: {s.oversize} (a failed store would delete the key's live value); their keys are "
            f"in {s.oversize_report}",
        ),
        (
            s.destination_evictions > 0,
            accept.accept_evictions,
            f"{EVICTED}: {s.destination_evictions} ({s.evictions_by_node}), too small for the data or "
            "live traffic; those items are gone",
        ),
        (
            s.dump_complete is False,
            accept.accept_incomplete_dump,
            f"{INCOMPLETE_DUMP}: {s.dump_incomplete_reason}",
        ),
        (s.recheck == "off", accept.accept_no_recheck, f"{NO_RECHECK}: {s.recheck_off}"),
    ]
    for hit, accepted, why in checks:
        if hit:
            s.incomplete.append(why)
            if accepted:
                s.accepted.append(why)
    return s.incomplete


def key_fields(key: bytes) -> dict[str, str]:
    """A key for a JSON report: as text when it is plain, else base64."""
    if is_plain_key(key):
        return {"key": key.decode("ascii")}
    return {"key_b64": base64.b64encode(key).decode("ascii")}


@dataclass
class OversizeReport:
    """The items never sent because they are too large for their destination, one JSON line each:
    `{"file", "destination", "key" | "key_b64", "value_bytes", "flags", "item_size_max"}`."""

    path: Path
    count: int = 0

    def add(self, file: str, items: list[OversizeItem], item_size_max: dict[str, int]) -> None:
        if not items:
            return
        lines = [
            json.dumps(
                {
                    "file": file,
                    "destination": it.destination,
                    **key_fields(it.key),
                    "value_bytes": it.value_len,
                    "flags": it.flags,
                    "item_size_max": item_size_max.get(it.destination),
                },
                separators=(",", ":"),
            )
            for it in items
        ]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write("".join(f"{ln}\n" for ln in lines))
            f.flush()
            os.fsync(f.fileno())
        self.count += len(items)

    def finish(self) -> str | None:
        """Drop the lines a crash made us write twice; the report's path, or None if it is empty."""
        with contextlib.suppress(FileNotFoundError):
            lines = list(dict.fromkeys(self.path.read_text().splitlines()))
            if lines:
                self.path.write_text("".join(f"{ln}\n" for ln in lines))
                return str(self.path)
        return None
