"""What a warm reports (`WarmSummary`): the JSON line of `--json` and the text a person reads."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from cachewarm.datapath.populate.report import event_time
from cachewarm.datapath.progress import plural, speed_line


@dataclass
class WarmSummary:
    ok: bool
    items_dumped: int
    keys_listed: int
    dump_misses: int
    copied: int
    already_present: int
    skipped_expired: int
    bytes: int
    files: int
    missing_in_target: int
    checked_in_target: int
    dump_s: float
    populate_s: float
    total_s: float
    mb_per_s: float
    populate: dict[str, Any]
    # Why the target does not hold every item (empty when ok): the populator's reasons the user did
    # not accept, and keys the target check did not find.
    problems: list[str] = field(default_factory=list)
    # Items dumped per second of dump + populate (overlapped; the target check not counted), like mb_per_s.
    items_per_s: float = 0.0
    # What the look before the warm found suspicious (an empty source): said, never silent.
    warnings: list[str] = field(default_factory=list)
    # The stream mode: no data files (`files` counts the checkpoint's acknowledged parts).
    stream: bool = False
    # The work directory stays after the warm (the dump or key lists, the populator's state): where
    # and how large, so it is not forgotten on a disk.
    workdir: str = ""
    workdir_bytes: int = 0
    # `--via-s3`: the transport's counts (objects, bytes, requests each way, objects deleted).
    s3: dict[str, int] = field(default_factory=dict)
    # --check-sample: keys whose value, flags and TTL were compared with the source, and how many differed.
    sample_compared: int = 0
    sample_different: int = 0

    def to_json(self) -> str:
        fields = asdict(self)
        if not self.s3:
            del fields["s3"]
        return json.dumps({"event": "warm_summary", "time": event_time(), **fields}, separators=(",", ":"))

    def text(self) -> str:
        lines = [
            f"warm {'OK' if self.ok else 'FAILED'} in {self.total_s:.1f}s "
            f"(dump {self.dump_s:.1f}s, populate {self.populate_s:.1f}s, "
            + ("upload with the dump, then download and populate, overlapped)" if self.s3 else "overlapped)"),
            f"  items dumped        {self.items_dumped:>12,}  (keys listed {self.keys_listed:,}, "
            f"gone before fetch {self.dump_misses:,})",
            f"  items copied        {self.copied:>12,}",
            f"  already present     {self.already_present:>12,}  (fresher values kept: add mode)",
            f"  skipped (expired)   {self.skipped_expired:>12,}",
            f"  bytes               {self.bytes:>12,}  "
            + ("(streamed: no data files)" if self.stream else f"({plural(self.files, 'data file')})"),
        ]
        p = self.populate
        if p.get("resent_own"):
            lines.append(f"  resent (own retry)  {p['resent_own']:>12,}  (stored by an earlier attempt)")
        if p.get("binary_protocol"):
            lines.append(f"  binary protocol     {p['binary_protocol']:>12,}  (keys of 187..250 bytes)")
        if p.get("oversize"):
            lines.append(
                f"  too large, skipped  {p['oversize']:>12,}  (never sent: see {p.get('oversize_report')})"
            )
        ev = int(p.get("destination_evictions", 0))
        if ev:
            lines.append(f"  WARNING: the target evicted {ev:,} items during the warm (too small)")
        if p.get("dump_complete") is False:
            lines.append(f"  WARNING: the dump is incomplete: {p.get('dump_incomplete_reason')}")
        if self.checked_in_target:
            lines.append(
                f"  target check        {self.checked_in_target - self.missing_in_target:>12,} of "
                f"{self.checked_in_target:,} unexpired keys present"
            )
        if self.sample_compared:
            lines.append(
                f"  sample compared     {self.sample_compared - self.sample_different:>12,} of "
                f"{self.sample_compared:,} the same as the source (value, flags, TTL)"
            )
        check = self.total_s - self.populate_s
        after = f" (+{check:.1f}s target check)" if self.checked_in_target else ""
        if self.workdir:
            lines.append(
                f"  workdir kept        {self.workdir_bytes / 1e6:>12,.1f} MB  ({self.workdir}; "
                "remove it when done, or --resume continues from it)"
            )
        if self.s3:
            c = self.s3
            requests = c["upload_requests"] + c["download_requests"]
            lines.append(
                f"  via S3              {c['uploaded_files']:>12,} objects up, {c['downloaded_files']:,} "
                f"down; {requests:,} requests; {c['objects_deleted']:,} objects deleted afterwards"
            )
        lines += [f"  WARNING: {w}" for w in self.warnings]
        lines.append(speed_line(self.items_dumped, self.bytes, self.populate_s, after))  # always last
        return "\n".join(lines)
