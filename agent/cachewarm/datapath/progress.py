"""What `cachewarm warm` and `cachewarm populate` show while they run, and the populate summary.

Three outputs, one interface (`Display`: fed the dumper's and the populator's progress, closed at the
end), picked by `make_display`:

- `live` (a terminal): one tqdm bar per stage — dumped / published / populated — with items, items/s,
  MB/s and ETA, redrawn at most twice a second; notices (a destination that does not answer, warnings)
  are printed above the bars.
- `plain` (not a terminal: CI logs, pipes): one line every few seconds and one at the end, plus the
  notices; no carriage returns, no escape sequences.
- `json` (`--json`): every progress event of the populator as a JSON line (the `Progress` fields) and,
  for `warm`, the dumper's as `{"event": "dump_progress", ...}` — for machines.

tqdm (a runtime dependency already: `cachewarm watch` uses it too) draws the bars; its monitor thread
is off, so the populator's process pool may still fork.
"""

from __future__ import annotations

import functools
import io
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import IO, Any, Literal, Protocol

from cachewarm.datapath.dumper import DumperProgress
from cachewarm.datapath.populate import PopulateSummary, Progress
from cachewarm.datapath.populate.report import event_time

OutputMode = Literal["auto", "live", "plain", "json"]
# Populator events that carry a message for the user (the others only move the counters).
NOTICES = (
    "destination_unavailable",
    "destination_restarted",
    "evictions",
    "warning",
    "remount_failed",
    "list_failed",
)
# A destination that keeps not answering is reported at once, then at most this often.
NOTICE_REPEAT_S = 5.0
# The live display's width on a terminal that does not tell its own.
DEFAULT_COLUMNS = 100


class Display(Protocol):
    def dumper(self, p: DumperProgress) -> None: ...

    def populator(self, p: Progress) -> None: ...

    def close(self) -> None: ...


def make_display(stream: IO[str], mode: OutputMode = "auto", *, dumper: bool = False) -> Display:
    """The display for `stream`: live bars on a terminal, plain lines elsewhere, or JSON lines.
    `dumper`: the run has a dump stage (`warm`), else it only populates."""
    if mode == "json":
        return JsonDisplay(stream)
    if mode == "live" or (mode == "auto" and _isatty(stream)):
        return LiveDisplay(stream, dumper=dumper)
    return PlainDisplay(stream, dumper=dumper)


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _mb_s(nbytes: int, seconds: float) -> float:
    return nbytes / 1e6 / seconds if seconds > 0 else 0.0


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


@dataclass
class _State:
    """The latest figures of each stage."""

    dump: DumperProgress | None = None
    pop: Progress | None = None

    @property
    def dump_total(self) -> int | None:
        """Items the dump will hold: known once the crawl has listed the keys."""
        d = self.dump
        if d is None or d.phase in ("start", "crawl"):
            return None
        return max(d.items, d.keys_listed - d.misses)

    @property
    def populate_total(self) -> int | None:
        if self.pop is not None and self.pop.total_items is not None:
            return self.pop.total_items  # DONE's count
        return self.dump_total

    @property
    def published(self) -> int:
        if self.dump is not None:
            return max(self.dump.files, self.pop.files_published if self.pop else 0)
        return self.pop.files_published if self.pop else 0


class _Human:
    """What the live and the plain display share: the state, a lock (the dumper's progress comes from
    another thread), the notices."""

    def __init__(self, stream: IO[str], dumper: bool) -> None:
        self.stream = stream
        self.with_dumper = dumper
        self.state = _State()
        self.lock = threading.Lock()
        self.start = time.monotonic()
        self._noticed: dict[str, float] = {}
        # When the dumper said `done`: its rate is over its own time, not the warm's (it would keep
        # falling while the populator finishes).
        self.dump_ended: float | None = None

    def dumper(self, p: DumperProgress) -> None:
        with self.lock:
            self.state.dump = p
            if p.event == "done" and self.dump_ended is None:
                self.dump_ended = time.monotonic()
            self._changed(final=False)

    def populator(self, p: Progress) -> None:
        with self.lock:
            self.state.pop = p
            if p.event == "start":
                self._say(f"populating {p.detail}")
            elif p.event in NOTICES and p.detail:
                self._notice(p.event, p.detail)
            self._changed(final=False)

    def close(self) -> None:
        with self.lock:
            self._changed(final=True)
            self._closed()

    def _notice(self, event: str, detail: str) -> None:
        key = detail.split(" (", 1)[0] if event == "destination_unavailable" else detail
        now = time.monotonic()
        last = self._noticed.get(key)
        if last is not None and now - last < NOTICE_REPEAT_S:
            return
        self._noticed[key] = now
        self._say(("warning: " if event in ("warning", "evictions") else "") + detail)

    # Subclasses draw.
    def _say(self, line: str) -> None:
        raise NotImplementedError

    def _changed(self, final: bool) -> None:
        raise NotImplementedError

    def _closed(self) -> None:
        pass


class PlainDisplay(_Human):
    """One line every `interval_s` (and at the end): for logs and pipes."""

    def __init__(self, stream: IO[str], dumper: bool = False, interval_s: float = 5.0) -> None:
        super().__init__(stream, dumper)
        self.interval_s = interval_s
        self._last = self.start  # the first line after one interval (the start is a notice)

    def _say(self, line: str) -> None:
        self.stream.write(f"cachewarm: {line}\n")
        self.stream.flush()

    def _changed(self, final: bool) -> None:
        now = time.monotonic()
        if not final and now - self._last < self.interval_s:
            return
        p = self.state.pop
        started = self.state.dump is not None or (p is not None and p.event != "destination_unavailable")
        if not started:  # waiting for the destinations: the notices say so
            return
        self._last = now
        self._say(self.line(now - self.start))

    def line(self, elapsed: float) -> str:
        st = self.state
        parts = [f"{elapsed:.0f}s"]
        if self.with_dumper:
            d = st.dump
            phase = f" ({d.phase})" if d is not None and d.phase not in ("dump", "done") else ""
            dump_s = min(elapsed, self.dump_ended - self.start) if self.dump_ended is not None else elapsed
            parts.append(
                f"dumped {_count(d.items if d else 0, st.dump_total)} items{phase}, "
                f"{_mb_s(d.bytes if d else 0, dump_s):.1f} MB/s"
            )
        idle = st.published == 0 and not self.with_dumper
        waiting = " (waiting for a dumper to publish data files)" if idle else ""
        parts.append(f"published {plural(st.published, 'file')}{waiting}")
        p = st.pop
        n = p.items if p else 0
        total = st.populate_total
        rate = n / elapsed if elapsed > 0 else 0.0
        eta = f", ETA {_duration((total - n) / rate)}" if total and rate > 0 and n < total else ""
        parts.append(
            f"populated {_count(n, total)} items, {rate:,.0f} items/s, "
            f"{_mb_s(p.bytes if p else 0, elapsed):.1f} MB/s{eta}"
        )
        return " | ".join(parts)


def _count(n: int, total: int | None) -> str:
    return f"{n:,}/{total:,}" if total else f"{n:,}"


def plural(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


@functools.cache
def _bar_class() -> Any:
    from tqdm import tqdm

    class Bar(tqdm):  # type: ignore[misc,type-arg]
        # No monitor thread: a populator in this process forks its pool only while it is single-threaded.
        monitor_interval = 0

    return Bar


class LiveDisplay(_Human):
    """tqdm bars, one per stage, on a terminal. tqdm draws and places them; the figures are ours, so
    a stage that has ended keeps its final rate while the others go on."""

    # At most this often a redraw (a notice, the end and a stage's end redraw at once).
    REDRAW_S = 0.25

    def __init__(self, stream: IO[str], dumper: bool = False) -> None:
        super().__init__(stream, dumper)
        bar = _bar_class()
        self._write: Callable[[str], None] = lambda s: bar.write(s, file=stream)
        names = (["dumped"] if dumper else []) + ["published", "populated"]
        # A terminal that tells its width is followed when resized; one that says 0 (a bare pty) gets
        # a fixed width: tqdm would trim every line to nothing.
        sized = _columns(stream) > 0
        self.bars: dict[str, Any] = {
            name: bar(
                total=None,
                desc=f"{name:>9}",
                file=stream,
                position=i,
                leave=True,
                dynamic_ncols=sized,
                ncols=None if sized else DEFAULT_COLUMNS,
                bar_format="{desc}",
            )
            for i, name in enumerate(names)
        }
        self._ended: dict[str, float] = {}
        self._drawn = 0.0

    def _say(self, line: str) -> None:
        self._write(line)

    def _changed(self, final: bool) -> None:
        st = self.state
        now = time.monotonic()
        d, p = st.dump, st.pop
        ended = final or (d is not None and d.event == "done" and "dumped" not in self._ended)
        if d is not None and d.event == "done":
            self._ended.setdefault("dumped", now)
        if not ended and now - self._drawn < self.REDRAW_S:
            return
        self._drawn = now
        if "dumped" in self.bars:
            t = self._ended.get("dumped", now) - self.start
            self._draw("dumped", d.items if d else 0, st.dump_total, t, d.bytes if d else 0)
        self._draw("published", st.published, None, None, 0)
        self._draw("populated", p.items if p else 0, st.populate_total, now - self.start, p.bytes if p else 0)

    def _draw(self, name: str, n: int, total: int | None, seconds: float | None, nbytes: int) -> None:
        b = self.bars[name]
        if seconds is None:  # published: a count of files
            text = plural(n, "file")
        else:
            rate = n / seconds if seconds > 0 else 0.0
            text = f"{_si(n)}{f'/{_si(total)}' if total else ''} items"
            text += f" [{_duration(seconds)}, {_si(rate)} items/s, {_mb_s(nbytes, seconds):.1f} MB/s"
            text += f", ETA {_duration((total - n) / rate)}]" if total and rate > 0 and n < total else "]"
        b.total = total or None
        b.n = min(n, total) if total else n
        # With a total: a bar; without: the figures only. The text has no braces (it is a format).
        b.bar_format = "{desc}: {percentage:3.0f}%|{bar}| " + text if total else "{desc}: " + text
        b.refresh()

    def _closed(self) -> None:
        for b in self.bars.values():
            b.close()


def _columns(stream: IO[str]) -> int:
    """The terminal's width, 0 when it does not say."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return 0


def _si(x: float) -> str:
    """12, 50.5k, 1.23M."""
    from tqdm import tqdm

    return f"{x:.0f}" if x < 1000 else str(tqdm.format_sizeof(x))


class JsonDisplay:
    """The populator's progress events as JSON lines (and the dumper's, as `dump_progress`)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self._last_dump: DumperProgress | None = None

    def _line(self, text: str) -> None:
        with self.lock:
            self.stream.write(text + "\n")
            self.stream.flush()

    def dumper(self, p: DumperProgress) -> None:
        if p != self._last_dump:
            self._last_dump = p
            self._emit({**asdict(p), "event": f"dump_{p.event}"})

    def populator(self, p: Progress) -> None:
        self._emit(asdict(p))

    def _emit(self, obj: dict[str, Any]) -> None:
        # `event` first, then when (docs/json-events.md), then the event's own fields.
        self._line(
            json.dumps({"event": obj.pop("event"), "time": event_time(), **obj}, separators=(",", ":"))
        )

    def close(self) -> None:
        pass


def speed_line(items: int, nbytes: int, seconds: float, note: str = "") -> str:
    """The last line of a summary: items/s, MB/s, elapsed."""
    rate = items / seconds if seconds > 0 else 0.0
    mb = _mb_s(nbytes, seconds)
    return f"  speed               {rate:>12,.0f} items/s, {mb:.1f} MB/s, {seconds:.1f}s elapsed{note}"


def populate_summary_text(s: PopulateSummary) -> str:
    """`cachewarm populate`'s summary for people (`--json` prints `s.to_json()`)."""
    state = "OK" if s.ok else "INCOMPLETE"
    if s.already_complete:
        return (
            f"populate {state}: already complete — all {plural(s.files, 'file')} ({s.records:,} items) were "
            "applied by an earlier run (the state file remembers them); nothing written"
        )
    lines = [
        f"populate {state}: {s.records:,} items from {plural(s.files, 'file')} into "
        f"{plural(len(s.per_node), 'destination')}",
        f"  stored              {s.stored:>12,}",
        f"  already present     {s.already_present:>12,}  (fresher values kept: add mode)",
        f"  skipped (expired)   {s.expired:>12,}",
    ]
    if s.resent_own:
        lines.append(f"  resent (own retry)  {s.resent_own:>12,}  (stored by an earlier attempt)")
    if s.binary_protocol:
        lines.append(f"  binary protocol     {s.binary_protocol:>12,}  (keys of 187..250 bytes)")
    if s.oversize:
        lines.append(f"  too large, skipped  {s.oversize:>12,}  (never sent: see {s.oversize_report})")
    if s.restarts_detected:
        lines.append(f"  destination restarts{s.restarts_detected:>12,}  (their items were sent again)")
    if s.recheck == "on":
        lines.append(
            f"  re-checked          {s.rechecked:>12,}  (on the source, {s.settle_seconds:g} s after "
            "each file's last write)"
        )
        lines.append(
            f"    changed at source {s.changed_at_source:>12,}  (deleted, rewritten or touched since read)"
        )
        lines.append(f"    stale copy deleted{s.deleted_stale:>12,}")
        if s.client_overwrote:
            lines.append(f"    client's write kept{s.client_overwrote:>11,}")
        if s.unsettled:
            lines.append(f"    unsettled         {s.unsettled:>12,}  (kept changing: left as they are)")
    if len(s.per_node) > 1:
        lines += [f"  -> {addr:<16} {n:>12,}" for addr, n in s.per_node.items()]
    for why in s.incomplete:
        lines.append(f"  {'accepted' if why in s.accepted else 'WARNING'}: {why}")
    lines.append(f"  bytes               {s.bytes:>12,}")
    lines.append(speed_line(s.records, s.bytes, s.elapsed_s))
    return "\n".join(lines)
