"""The stream mode (`cachewarm warm --stream`, `cachewarm agent stream`): `cachewarm-dump --to` sends
each item it fetches straight to its destination node — C++ end to end, no data files
(dumper-cpp/src/stream.h). Its work directory keeps only the key lists and the checkpoint of what the
destinations acknowledged (for reconciliation and `--resume`), the oversize report and DONE.

The dumper applies every rule of the file path's populator itself (add mode, the destination
preflight and size rule, exact flags and absolute expiries, every key, ketama routing, SERVER_ERROR
fails, evictions and an incomplete dump make the run incomplete unless accepted) and ends with one
JSON summary line (`"event": "stream_summary"`) on stdout: exit 0 when the destinations hold every
item or every reason they do not was accepted, 1 otherwise (with the summary) or on failure (without).

Here: its command line (`StreamCommand`), running it (`run_stream`), and the local warm on top
(`run_stream_warm`): the same summary and target check as the file path's `warm`.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import re
import subprocess
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from cachewarm.datapath import (
    _speedups,  # required (setup.py)
    presence,
)
from cachewarm.datapath.dumper import DumperCommand, DumperProgress, terminate_child
from cachewarm.datapath.encode import EXPIRY_MARGIN
from cachewarm.datapath.keytext import keys_text
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.nodes import Node, resolve_nodes
from cachewarm.datapath.populate.report import EVICTED, INCOMPLETE_DUMP, OVERSIZE
from cachewarm.datapath.routing import Routing
from cachewarm.datapath.warm_check import compare_sample
from cachewarm.datapath.warm_config import WarmConfig, dumper_command
from cachewarm.datapath.warm_errors import Unreachable, WarmError
from cachewarm.datapath.warm_summary import WarmSummary
from cachewarm.datapath.workdir import STREAM_DIR, prepare_workdir

if TYPE_CHECKING:
    from cachewarm.datapath.progress import Display

# How the dumper says it gave up on a destination (dumper-cpp/src/stream.cc, stream_sink.cc).
_UNAVAILABLE = re.compile(r"destination \S+ unavailable for [^|]*")
SUMMARY_EVENT = "stream_summary"
# Each reason's first words and the flag that accepts it (the C++ summary uses the populator's words).
ACCEPT_FLAGS = {
    OVERSIZE: "--accept-oversize",
    EVICTED: "--accept-evictions",
    INCOMPLETE_DUMP: "--accept-incomplete-dump",
}


@dataclass(frozen=True)
class StreamCommand:
    """`cachewarm-dump` with `--to`: the dump's command line plus the destinations and the rules."""

    dump: DumperCommand
    targets: Sequence[Node]
    mode: str = "add"
    routing: Routing = field(default_factory=Routing)
    # PopulateConfig's accept_* flags by name (accept_oversize, accept_evictions, ...).
    accept: Mapping[str, bool] = field(default_factory=dict)
    # Destination writes (the dump's own --max-items-per-second paces the source reads).
    max_write_items_per_second: int | None = None
    oversize_report: Path | None = None
    # Seconds a destination may refuse connections before the stream fails (None: the dumper's).
    destination_timeout: float | None = None
    # Add mode: a part's re-check on the source waits this long after its writes (None: the dumper's).
    settle_seconds: float | None = None

    def argv(self) -> list[str]:
        argv = self.dump.argv()
        argv += ["--to", ",".join(n.address for n in self.targets), "--mode", self.mode]
        if self.routing.placement is not None:  # the dumper places keys with the same hashkit description
            desc = self.routing.placement.placer(self.targets).description.text()
            argv += ["--placement-description", desc]
        else:
            argv += [
                "--node-key-format",
                self.routing.node_key_format,
                "--ketama-reps",
                str(self.routing.reps),
            ]
            if self.routing.hash_delimiter is not None:
                argv += ["--hash-delimiter", self.routing.hash_delimiter.decode()]
        # The populator's own (the dumper re-checks in add mode, always) are not the dumper's flags.
        argv += [
            f"--{name.replace('_', '-')}"
            for name, on in sorted(self.accept.items())
            if on and name != "accept_no_recheck"
        ]
        if self.max_write_items_per_second:
            argv += ["--max-write-items-per-second", str(self.max_write_items_per_second)]
        if self.oversize_report is not None:
            argv += ["--oversize-report", str(self.oversize_report)]
        if self.destination_timeout is not None:
            argv += ["--destination-timeout", f"{self.destination_timeout:g}"]
        if self.settle_seconds is not None and self.mode == "add":
            argv += ["--settle-seconds", f"{self.settle_seconds:g}"]
        return argv


def parse_summary(line: str | bytes) -> dict[str, Any] | None:
    """The stream summary in one line of the dumper's stdout, or None for anything else."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) and obj.get("event") == SUMMARY_EVENT else None


def failure_message(summary: Mapping[str, Any]) -> str | None:
    """The error of a summary that is not ok: every reason not accepted and the flags that would."""
    open_ = [r for r in summary.get("incomplete", []) if r not in summary.get("accepted", [])]
    if not open_:
        return None
    flags = [f for r in open_ for head, f in ACCEPT_FLAGS.items() if r.startswith(head)]
    return f"the warm is not complete: {'; '.join(open_)} (to accept: {' '.join(flags)})"


@dataclass
class StreamResult:
    returncode: int
    summary: dict[str, Any] | None
    stderr_tail: list[str]

    def failure(self) -> str:
        tail = " | ".join(self.stderr_tail[-5:])
        return f"cachewarm-dump failed with exit code {self.returncode}: {tail}"


def run_stream(
    argv: Sequence[str], on_progress: Callable[[DumperProgress], None] = lambda p: None
) -> StreamResult:
    """Run `cachewarm-dump --to ...` to its end: progress lines to `on_progress`, the summary kept."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tail: deque[str] = deque(maxlen=20)
    summary: list[dict[str, Any]] = []

    def err() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            tail.append(raw.decode(errors="replace").rstrip())

    drain = threading.Thread(target=err, daemon=True)
    drain.start()
    assert proc.stdout is not None
    try:
        for raw in proc.stdout:
            if (p := DumperProgress.parse(raw)) is not None:
                on_progress(p)
            elif (s := parse_summary(raw)) is not None:
                summary.append(s)
            else:
                tail.append(raw.decode(errors="replace").rstrip())
        proc.wait()
    except BaseException:
        terminate_child(proc, 10)  # never leave the dumper writing to the destinations
        raise
    finally:
        drain.join(timeout=5)
    return StreamResult(proc.returncode, summary[-1] if summary else None, list(tail))


# ---- the local warm ------------------------------------------------------------------------------


def _excluded(out: Path, summary: Mapping[str, Any]) -> frozenset[bytes]:
    """Keys the stream never sent on purpose: too large for their node, or undumpable."""
    keys: set[bytes] = set()
    report = summary.get("oversize_report")
    if report and Path(report).exists():
        for line in Path(report).read_text().splitlines():
            it = json.loads(line)
            keys.add(it["key"].encode() if "key" in it else base64.b64decode(it["key_b64"]))
    undumped = out / "keys" / "UNDUMPED"
    if undumped.exists():
        for line in undumped.read_bytes().splitlines():
            keys.add(urllib.parse.unquote_to_bytes(line.split(b" ", 1)[0]))
    return frozenset(keys)


def _check_list(
    path: Path, targets: list[Node], routing: Routing, excluded: frozenset[bytes], sample_rate: float = 0.0
) -> tuple[int, list[bytes], list[bytes]]:
    """(keys checked, keys missing, a sample of the keys present) of one key list on the target
    nodes (runs in a pool process):
    the C walk routes its keys into lookups (_probes.c), presence.py sends them."""
    now = int(time.time()) + 1
    ring = routing.ring(targets)
    shares = _speedups.probe_keys(
        path.read_bytes(), now, len(targets), ring.c_placement if ring is not None else None
    )
    checked, gone, sample = 0, [], []
    for n, (lookups, expiry, binary) in zip(targets, shares, strict=True):
        c, g, s = presence.missing(
            n, presence.NodeProbes(n.address, lookups, expiry, binary), now, sample_rate
        )
        checked += c
        gone += g
        sample += s
    # The stream never sent these on purpose (too large for their node, undumpable): not its misses.
    skipped = [k for k in gone if k in excluded]
    return checked - len(skipped), [k for k in gone if k not in excluded], sample


STAMPS = "STAMPS"


def _stamps(out: Path, keys: Iterable[bytes]) -> dict[bytes, bytes]:
    """The source stamps (presence.READ_STAMP bytes each) the stream's re-check kept for `keys`
    (OUT/keys/STAMPS: u8 key length, key, stamp; a part sent twice: the later one)."""
    want = set(keys)
    path = out / "keys" / STAMPS
    if not want or not path.exists():
        return {}
    data = path.read_bytes()
    got: dict[bytes, bytes] = {}
    i = 0
    while i < len(data):
        n = data[i]
        end = i + 1 + n + presence.READ_STAMP
        if n == 0 or end > len(data):
            break  # a torn tail: the rest is unknown (those keys are judged by presence)
        key = data[i + 1 : i + 1 + n]
        if key in want:
            got[key] = data[i + 1 + n : end]
        i = end
    return got


def _unexplained(
    source: Node, absent: list[bytes], stamps: Mapping[bytes, bytes], checked: int
) -> tuple[list[bytes], int]:
    """Of the keys a target misses, those the source does not explain (gone, rewritten, touched
    shorter since the read, or ending within a copy's margin), and `checked` less the explained."""
    # A copy ends up to EXPIRY_MARGIN + 1 s before its source (docs/populator.md "Expiry"), and the
    # source's `stats time` is up to 1 s behind its clock: one whose source item ends that soon may be
    # gone already, as the files check leaves out records that end by then (a key list's exp is the
    # listing's; a touch may have shortened it since).
    with MetaConnection(source.connect_host, source.port) as src:
        source_now = int(src.stats()["time"])
    ending = {
        k
        for k in absent
        if k in stamps and -1 < _speedups.read_stamp(stamps[k], 0)[1] <= source_now + 1 + EXPIRY_MARGIN + 1
    }
    rest = [k for k in absent if k not in ending]
    explained = presence.explained_at_source(source, rest, [stamps.get(k, presence.NO_STAMP) for k in rest])
    return [k for k in rest if k not in explained], checked - len(ending) - len(explained)


def check_stream_target(
    out: Path,
    source: Node,
    targets: Sequence[Node],
    routing: Routing,
    summary: Mapping[str, Any],
    workers: int,
    sample: int = 0,
    pool: Executor | None = None,
    settle: float = 0.0,
) -> tuple[int, int, list[bytes], list[bytes]]:
    """Look up every listed, unexpired key the stream did not skip on purpose on its target node; a
    key missing there counts only if the source still holds it as the dump read it (its stamp: not
    deleted, rewritten or touched shorter since — the application's doing, or the re-check deleting a
    copy that had gone stale; presence.explained_at_source). Returns (checked, missing, examples,
    about `sample` keys present). Live traffic goes on meanwhile: a key still unexplained is looked at
    again on both sides after `settle` seconds (a client's write reaches the two replicas up to that
    far apart: the lookups of one key may straddle it)."""
    lists = sorted((out / "keys").glob("*.keys"))
    records = int(summary.get("records", 0))
    check = functools.partial(
        _check_list,
        targets=resolve_nodes(targets),
        routing=routing,
        excluded=_excluded(out, summary),
        sample_rate=min(1.0, sample / records) if sample and records else 0.0,
    )
    checked, absent, present = 0, [], []
    # The caller's pool, forked before the dumper's pump threads started (a pool started now would
    # go through a fork server: ~0.3 s of imports per worker); else threads (the lookups wait on the
    # destinations with the GIL released, but under CPU contention the threads queue for it).
    with contextlib.ExitStack() as stack:
        if pool is None:
            pool = stack.enter_context(ThreadPoolExecutor(max(1, workers)))
        for n, gone, some in pool.map(check, lists):
            checked += n
            absent += gone
            present += some
    if absent:
        stamps = _stamps(out, absent)
        absent, checked = _unexplained(source, absent, stamps, checked)
    if absent and settle > 0:
        time.sleep(settle)
        nodes = resolve_nodes(targets)
        ring = routing.ring(nodes)
        per_node: dict[int, list[bytes]] = {}
        for k in absent:
            per_node.setdefault(ring.index_for(k) if ring else 0, []).append(k)
        still: list[bytes] = []
        for i, keys in per_node.items():
            with MetaConnection(nodes[i].connect_host, nodes[i].port) as rd:
                still += rd.missing(keys)
        absent, checked = _unexplained(source, still, stamps, checked)
    return checked, len(absent), absent[:5], present


class _Lines:
    """Plain progress lines, at most one a second."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.last = 0.0

    def __call__(self, p: DumperProgress) -> None:
        if time.monotonic() - self.last < 1.0 and p.event != "done":
            return
        self.last = time.monotonic()
        self.stream.write(
            f"streamed {p.items:,} items ({p.bytes / 1e6:.0f} MB, {p.files} parts acknowledged), "
            f"keys listed {p.keys_listed:,}, phase {p.phase}\n"
        )
        self.stream.flush()


def stream_command(cfg: WarmConfig, out: Path) -> StreamCommand:
    target_rate = cfg.target_rate
    return StreamCommand(
        # The file path's dump command (the same workers read the source, with the same protection),
        # writing no data files.
        dump=replace(dumper_command(cfg, out), data_file_size=None),
        targets=cfg.targets,
        mode=cfg.mode,
        routing=cfg.routing,
        accept=cfg.accept,
        max_write_items_per_second=max(1, round(target_rate)) if target_rate else None,
        destination_timeout=cfg.destination_timeout,
        settle_seconds=cfg.settle_seconds,
    )


def run_stream_warm(
    cfg: WarmConfig, stream: IO[str], display: Display | None = None, pool: Executor | None = None
) -> WarmSummary:
    """`warm --stream`: the dumper streams into the targets; then the same target check as `warm`
    (in `pool`'s processes, when given). Progress: plain lines on `stream`, or the dumper's events
    to `display` (`--json`: `dump_progress`)."""
    out = cfg.workdir / STREAM_DIR
    prepare_workdir(cfg)
    start = time.monotonic()
    res = run_stream(
        stream_command(cfg, out).argv(), display.dumper if display is not None else _Lines(stream)
    )
    if display is not None:
        display.close()
    s = res.summary
    if s is None and any(_UNAVAILABLE.search(line) for line in res.stderr_tail):
        # The dumper gave up on a destination after --destination-timeout: exit 6, as the file path.
        why = next(m.group(0) for line in res.stderr_tail if (m := _UNAVAILABLE.search(line)))
        raise Unreachable(f"{why} (--destination-timeout)")
    if s is None or res.returncode not in (0, 1):
        raise WarmError(res.failure())
    elapsed = time.monotonic() - start
    problems = [m] if (m := failure_message(s)) else []
    if res.returncode != 0 and not problems:
        raise WarmError(res.failure())
    checked = missing = sampled = different = 0
    if cfg.check:
        checked, missing, examples, sample = check_stream_target(
            out,
            cfg.source,
            cfg.targets,
            cfg.routing,
            s,
            cfg.workers,
            cfg.check_sample,
            pool,
            cfg.settle_seconds,
        )
        sampled, different = compare_sample(cfg, sample, stream, problems)
        if missing:
            stream.write(
                f"target is missing {missing:,} of {checked:,} keys; {len(examples)} examples of "
                f"{missing:,}: {keys_text(examples)}\n"
            )
            if not (cfg.accept.get("accept_evictions") and missing <= int(s["destination_evictions"])):
                problems.append(f"the target is missing {missing} items")
    total = time.monotonic() - start
    return WarmSummary(
        ok=not problems,
        items_dumped=int(s["records"]),
        keys_listed=int(s["keys_listed"]),
        dump_misses=int(s["dump_misses"]),
        copied=int(s["stored"]),
        already_present=int(s["already_present"]),
        skipped_expired=int(s["expired"]),
        bytes=int(s["bytes"]),
        files=int(s["parts"]),
        missing_in_target=missing,
        checked_in_target=checked,
        dump_s=round(elapsed, 3),
        populate_s=round(elapsed, 3),
        total_s=round(total, 3),
        mb_per_s=round(int(s["bytes"]) / 1e6 / elapsed, 1) if elapsed else 0.0,
        # Add mode: the dumper's re-check (docs/stream.md) — its counts are in the summary.
        populate=dict(s),
        problems=problems,
        stream=True,
        sample_compared=sampled,
        sample_different=different,
    )
