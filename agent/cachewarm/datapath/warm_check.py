"""After the populate of a files warm (`warm.py`, `s3warm.py`): the target check — every dumped,
unexpired key that fits its node looked up there — the `--check-sample` compare, and the summary.
"""

from __future__ import annotations

import functools
import struct
import time
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from cachewarm.datapath import format as df
from cachewarm.datapath import presence
from cachewarm.datapath.encode import ItemLimit
from cachewarm.datapath.keytext import keys_text
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.nodes import Node, resolve_nodes
from cachewarm.datapath.populate import PopulateSummary
from cachewarm.datapath.routing import Routing
from cachewarm.datapath.verify import _compare
from cachewarm.datapath.warm_config import WarmConfig, probe_dir, sample_rate
from cachewarm.datapath.warm_errors import WarmError
from cachewarm.datapath.warm_summary import WarmSummary


def _check_file(
    path: Path, targets: list[Node], routing: Routing, limits: list[ItemLimit], source: Node | None = None
) -> tuple[int, list[bytes]]:
    """(keys checked, keys missing) for one dump file's unexpired keys that fit their target node
    (the populator never sends the others: it counts and names them) (runs in a pool process). With
    `source`, a key missing there that the source no longer holds as read is explained, not missing."""
    v = df.check_file(path)
    if not v.ok or v.data is None:
        raise WarmError(f"{path.name} no longer verifies: {v.reason}")
    ring = routing.ring(targets)
    now = int(time.time()) + 1
    per_node: list[list[bytes]] = [[] for _ in targets]
    for r in df.iter_records(v.data):
        if r.exptime != -1 and r.exptime <= now:
            continue
        i = ring.index_for(r.key) if ring else 0
        if limits[i].fits(len(r.key), len(r.value), r.flags):
            per_node[i].append(r.key)
    checked = 0
    gone: list[bytes] = []
    stamps: dict[bytes, bytes] = {}
    for n, keys in zip(targets, per_node, strict=True):
        with MetaConnection(n.connect_host, n.port) as rd:
            gone += rd.missing(keys)
        checked += len(keys)
    if source is not None and gone:
        if v.header is not None and v.header.version == df.VERSION_3:
            want = set(gone)
            stamps = {
                r.key: struct.pack("<Qqq", r.source_cas, r.source_exp, len(r.value))
                for r in df.iter_records(v.data)
                if r.key in want
            }
        explained = presence.explained_at_source(
            source, gone, [stamps.get(k, presence.NO_STAMP) for k in gone]
        )
        checked -= len(explained)
        gone = [k for k in gone if k not in explained]
    return checked, gone


def _check_one(
    path: Path,
    targets: list[Node],
    routing: Routing,
    limits: list[ItemLimit],
    probes: Path | None,
    sample_rate: float = 0.0,
    source: Node | None = None,
) -> tuple[int, list[bytes], list[bytes]]:
    """One file's target check: the lookups its populate kept (presence.py), else a walk of the file
    (no sample then). Returns (checked, missing, a sample of the keys present); a key the source no
    longer holds as the dump read it is not missing (presence.explained_at_source)."""
    if (
        probes is not None
        and (kept := presence.check_kept(probes, path.name, targets, sample_rate, source)) is not None
    ):
        return kept
    return (*_check_file(path, targets, routing, limits, source), [])


@dataclass
class CheckResult:
    checked: int = 0
    missing: int = 0
    examples: list[bytes] = field(default_factory=list)
    # --check-sample: keys found present, to compare value, flags and TTL with the source.
    sample: list[bytes] = field(default_factory=list)

    def add(self, checked: int, gone: list[bytes], sample: list[bytes]) -> None:
        self.checked += checked
        self.missing += len(gone)
        self.examples.extend(gone[: max(0, 5 - len(self.examples))])
        self.sample += sample


def check_target(
    cfg: WarmConfig, dump_dir: Path, manifest: df.Manifest, summary: PopulateSummary, pool: Executor
) -> CheckResult:
    """Look up every dumped, unexpired key that fits its node on that node, files in parallel
    processes: with the lookups the populate kept (routed, no file read again) where it kept them."""
    targets = resolve_nodes(cfg.targets)
    limits = [
        ItemLimit(int(d["item_size_max"]), bool(d["cas"]))
        for d in (summary.destinations[t.address] for t in targets)
    ]
    check = functools.partial(
        _check_one,
        targets=targets,
        routing=cfg.routing,
        limits=limits,
        probes=probe_dir(cfg),
        sample_rate=sample_rate(cfg, manifest.total_records),
        source=resolve_nodes([cfg.source])[0],
    )
    paths = [dump_dir / mf.name for mf in manifest.files]
    parts = list(pool.map(check, paths))
    # Live traffic goes on meanwhile: a client's op reaches the two replicas up to settle_seconds
    # apart, so a key deleted on the target may still be on the source when it is looked up there.
    # The files with misses are checked again after that delay; a key counts only if missing twice.
    again = [i for i, part in enumerate(parts) if part[1]]
    if again and cfg.settle_seconds > 0:
        time.sleep(cfg.settle_seconds)
        for i, (checked, gone, _) in zip(again, pool.map(check, [paths[i] for i in again]), strict=True):
            first = set(parts[i][1])
            parts[i] = (checked, [k for k in gone if k in first], parts[i][2])
    res = CheckResult()
    for part in parts:
        res.add(*part)
    return res


def compare_sample(
    cfg: WarmConfig, keys: list[bytes], stream: IO[str], problems: list[str]
) -> tuple[int, int]:
    """--check-sample: the value, flags and TTL of `keys` on the source and their target node
    (`cachewarm verify`'s rules; a key gone from the source meanwhile is not compared). Returns
    (compared, different); differences are a problem of the warm, with examples on `stream`."""
    if not keys:
        return 0, 0
    keys = keys[: cfg.check_sample]
    rep = _compare(
        resolve_nodes([cfg.source])[0], resolve_nodes(cfg.targets), keys, ttl_tolerance=5, routing=cfg.routing
    )
    if rep.keys_different or rep.missing:
        stream.write(rep.text() + "\n")
        problems.append(
            f"{rep.differences} of {rep.checked} sampled keys differ between the source and the target"
        )
    return rep.checked, rep.differences


def conclude(
    cfg: WarmConfig,
    dump_dir: Path,
    summary: PopulateSummary,
    pool: Executor,
    problems: list[str],
    stream: IO[str],
    start: float,
    dump_end: float,
    pop_end: float,
) -> WarmSummary:
    """After the populate: the target check (unless --no-check) and the warm's summary, from the
    DONE in `dump_dir` (the dump's, or the S3 warm's staging copy)."""
    manifest = df.read_manifest(dump_dir / df.MANIFEST_NAME)
    checked = missing = sampled = different = 0
    if cfg.check:
        res = check_target(cfg, dump_dir, manifest, summary, pool)
        presence.forget(cfg.workdir / "probes")
        checked, missing, examples = res.checked, res.missing, res.examples
        sampled, different = compare_sample(cfg, res.sample, stream, problems)
        if missing:
            stream.write(
                f"target is missing {missing:,} of {checked:,} keys; {len(examples)} examples of "
                f"{missing:,}: {keys_text(examples)}\n"
            )
            # Accepted evictions explain as many missing keys as were evicted, no more.
            if not (cfg.accept.get("accept_evictions") and missing <= summary.destination_evictions):
                problems.append(f"the target is missing {missing} items")
    total = time.monotonic() - start
    t = manifest.totals
    return WarmSummary(
        ok=not problems,
        items_dumped=manifest.total_records,
        keys_listed=int(t.get("keys_listed", 0)),
        dump_misses=int(t.get("misses", 0)),
        copied=summary.stored,
        already_present=summary.already_present,
        skipped_expired=summary.expired,
        bytes=summary.bytes,
        files=summary.files,
        missing_in_target=missing,
        checked_in_target=checked,
        dump_s=round(dump_end - start, 3),
        populate_s=round(pop_end - start, 3),
        total_s=round(total, 3),
        mb_per_s=round(summary.bytes / 1e6 / (pop_end - start), 1),
        populate=asdict(summary),
        problems=problems,
        items_per_s=round(manifest.total_records / (pop_end - start), 1),
        sample_compared=sampled,
        sample_different=different,
    )
