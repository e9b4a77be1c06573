"""The end of a populate, once every file DONE lists is consumed: what was applied must be what DONE
says was dumped (format version, records per file and in total, every record counted once as
stored, present, re-sent, expired or oversize); then the summary is judged (`report.judge`) and the
run is complete, or PopulateIncomplete names every reason it is not that the user did not accept."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cachewarm.datapath import format as df
from cachewarm.datapath.populate.config import DumpDataError, PopulateConfig, PopulateIncomplete
from cachewarm.datapath.populate.report import PopulateSummary, judge
from cachewarm.datapath.populate.state import ConsumedFile


def check_applied(
    manifest: df.Manifest, consumed: Mapping[str, ConsumedFile], versions: Mapping[str, int]
) -> list[ConsumedFile]:
    """The consumed files in DONE's order, each checked against DONE (DumpDataError if one lies)."""
    files = [consumed[f.name] for f in manifest.files]
    if lying := sorted(n for n, v in versions.items() if v != manifest.version):
        raise DumpDataError(
            f"DONE says data format version {manifest.version}, but {lying[0]} is version "
            f"{versions[lying[0]]} ({len(lying)} files)"
        )
    return files


def check_counts(manifest: df.Manifest, files: list[ConsumedFile]) -> None:
    for mf, cf in zip(manifest.files, files, strict=True):
        if cf.records != mf.records:
            raise DumpDataError(f"{mf.name}: applied {cf.records} records, DONE says {mf.records}")
        t = cf.total()
        if t.items != cf.records:
            raise DumpDataError(
                f"{mf.name}: stored {t.stored} + present {t.present} + resent {t.resent} + expired "
                f"{t.expired} + oversize {t.oversize} != records {cf.records}"
            )
    records = sum(f.records for f in files)
    if records != manifest.total_records:
        raise DumpDataError(f"applied {records} records, DONE's totals say {manifest.total_records}")


def conclude(summary: PopulateSummary, c: PopulateConfig, warn: Callable[[str], None]) -> PopulateSummary:
    """Warn of every reason the destinations may not hold every item; raise unless all are accepted."""
    for why in judge(summary, c):
        warn(why + (" (accepted)" if why in summary.accepted else ""))
    if not summary.ok:
        raise PopulateIncomplete(summary.failure(), summary)
    return summary
