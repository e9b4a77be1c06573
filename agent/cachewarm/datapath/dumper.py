"""`cachewarm-dump` (the C++ dumper, dumper-cpp/) seen from Python: its command line and its progress
lines. `cachewarm warm` and the node agent's dump job both run it through `DumperCommand`, and
`DumperProgress.parse` is the only place that knows the progress fields' names; `DumperRun` reads a
running dumper's output.

The dumper prints one JSON object a line on stdout (dumper-cpp/src/dumper.cc, `PrintProgress`):
`{"event": "progress"|"done", "phase", "keys_listed", "items", "bytes", "files", "misses",
"skipped_min_ttl", "items_per_s", "limit_items_per_s", "batch_cap", "backing_off", "backoffs", "probe_us",
"probe_p99_us", "probe_baseline_us", "backed_off_ms", "time_ms"}` (the pace: items/s over the last
interval, the limit now and the most keys per batch, 0 = none; whether the adaptive guard is backing
off, its probes' p99 in the last second and with no dump, and the time it spent backed off —
dumper-cpp/src/source_guard.h); diagnostics go to stderr.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cachewarm.datapath.format import NODE_RE

BINARY = "cachewarm-dump"
PROGRESS_EVENTS = ("progress", "done")


def find_dumper(explicit: str | os.PathLike[str] | None, installed: str | os.PathLike[str]) -> Path | None:
    """The first of `explicit` (--dumper), $CACHEWARM_DUMP, `installed` (where a build or an install
    puts it) and cachewarm-dump on PATH that is an executable file; None if none is."""
    for cand in (explicit, os.environ.get("CACHEWARM_DUMP"), installed, shutil.which(BINARY)):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return Path(cand)
    return None


def terminate_child(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """Stop a child this process started (the dumper, an agent's command) when the caller is failing
    or interrupted: SIGTERM, then SIGKILL after `grace_s`; never leave it running."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def dumper_node_id(node_id: str) -> str:
    """The dumper's node id allows `[A-Za-z0-9_.]{1,64}` (docs/data-format.md): map the rest to `_`."""
    mapped = re.sub(r"[^A-Za-z0-9_.]", "_", node_id)[:64] or "node"
    assert NODE_RE.fullmatch(mapped)
    return mapped


@dataclass(frozen=True)
class SourceProtection:
    """How the dumper spares the live source (docs/performance.md, "Protecting the source"): a bytes/s
    ceiling (None = unlimited), the adaptive guard and its threshold (None = the dumper's 1.5), the
    crawl's own pace (`lru_crawler sleep`, microseconds; None = the server's) and the order (recency |
    crawl; None = the dumper's default, recency). One value for warm, the stream mode and the node
    agent's dump and stream jobs."""

    max_bytes_per_second: int | None = None
    adaptive: bool = False
    adaptive_target: float | None = None
    crawl_sleep_us: int | None = None
    order: str | None = None

    def argv(self) -> list[str]:
        argv: list[str] = []
        if self.max_bytes_per_second:
            argv += ["--max-bytes-per-second", str(self.max_bytes_per_second)]
        if self.adaptive:
            argv.append("--adaptive")
            if self.adaptive_target is not None:
                argv += ["--adaptive-target", str(self.adaptive_target)]
        if self.crawl_sleep_us is not None:
            argv += ["--crawl-sleep-us", str(self.crawl_sleep_us)]
        if self.order is not None:
            argv += ["--order", self.order]
        return argv


@dataclass(frozen=True)
class DumperCommand:
    """The argument list of one `cachewarm-dump` run; options left None are not passed (the
    dumper's defaults apply)."""

    binary: str | os.PathLike[str]
    host: str
    port: int
    out: Path
    node_id: str | None = None
    threads: int | None = None
    max_items_per_second: int | None = None
    data_file_size: str | None = None
    progress_interval: float | None = None
    resume: bool = False
    protection: SourceProtection = SourceProtection()
    extra_args: Sequence[str] = ()

    def argv(self) -> list[str]:
        argv = [str(self.binary), "--host", self.host, "--port", str(self.port), "--out", str(self.out)]
        if self.node_id is not None:
            argv += ["--node-id", self.node_id]
        if self.threads:
            argv += ["--threads", str(self.threads)]
        if self.max_items_per_second:
            argv += ["--max-items-per-second", str(self.max_items_per_second)]
        if self.data_file_size is not None:
            argv += ["--data-file-size", self.data_file_size]
        if self.progress_interval is not None:
            argv += ["--progress-interval", str(self.progress_interval)]
        argv += self.protection.argv()
        if self.resume:
            argv.append("--resume")
        return argv + list(self.extra_args)


@dataclass(frozen=True)
class DumperProgress:
    """One progress line of the dumper (`done` is the last)."""

    event: str
    phase: str = ""
    keys_listed: int = 0
    items: int = 0
    bytes: int = 0
    files: int = 0
    misses: int = 0
    skipped_min_ttl: int = 0
    time_ms: int = 0
    items_per_s: int = 0
    limit_items_per_s: int = 0  # 0 = unlimited
    batch_cap: int = 0
    backing_off: bool = False
    backoffs: int = 0
    probe_us: int = 0
    probe_p99_us: int = 0  # the guard's probes' p99 over its last 1-s window (0: no guard)
    probe_baseline_us: int = 0  # the same with no dump
    backed_off_ms: int = 0

    @staticmethod
    def parse(line: str | bytes) -> DumperProgress | None:
        """The progress in one line of the dumper's stdout, or None for anything else."""
        try:
            obj = json.loads(line)
        except ValueError:
            return None
        if not isinstance(obj, dict) or obj.get("event") not in PROGRESS_EVENTS:
            return None
        try:
            return DumperProgress(
                event=str(obj["event"]),
                phase=str(obj.get("phase", "")),
                keys_listed=int(obj.get("keys_listed", 0)),
                items=int(obj.get("items", 0)),
                bytes=int(obj.get("bytes", 0)),
                files=int(obj.get("files", 0)),
                misses=int(obj.get("misses", 0)),
                skipped_min_ttl=int(obj.get("skipped_min_ttl", 0)),
                time_ms=int(obj.get("time_ms", 0)),
                items_per_s=int(obj.get("items_per_s", 0)),
                limit_items_per_s=int(obj.get("limit_items_per_s", 0)),
                batch_cap=int(obj.get("batch_cap", 0)),
                backing_off=bool(obj.get("backing_off", False)),
                backoffs=int(obj.get("backoffs", 0)),
                probe_us=int(obj.get("probe_us", 0)),
                probe_p99_us=int(obj.get("probe_p99_us", 0)),
                probe_baseline_us=int(obj.get("probe_baseline_us", 0)),
                backed_off_ms=int(obj.get("backed_off_ms", 0)),
            )
        except (TypeError, ValueError):
            return None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


@dataclass
class DumperRun:
    proc: subprocess.Popen[bytes]
    last_progress: DumperProgress | None = None
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    ended_at: float | None = None
    on_progress: Callable[[DumperProgress], None] | None = None

    def pump(self) -> None:
        def out() -> None:
            assert self.proc.stdout is not None
            for raw in self.proc.stdout:
                p = DumperProgress.parse(raw)
                if p is None:
                    self.stderr_tail.append(raw.decode(errors="replace").rstrip())
                else:
                    self.last_progress = p
                    if self.on_progress is not None:
                        self.on_progress(p)

        def err() -> None:
            assert self.proc.stderr is not None
            for raw in self.proc.stderr:
                self.stderr_tail.append(raw.decode(errors="replace").rstrip())

        threading.Thread(target=out, daemon=True).start()
        threading.Thread(target=err, daemon=True).start()

    def failure(self) -> str | None:
        rc = self.proc.poll()
        if rc is None:
            return None
        if self.ended_at is None:
            self.ended_at = time.monotonic()
        if rc == 0:
            return None
        tail = " | ".join(list(self.stderr_tail)[-5:])
        return f"cachewarm-dump failed with exit code {rc}: {tail}"
