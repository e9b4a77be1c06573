"""Add mode's re-check, decided before anything is written (docs/reliability.md "Live traffic during
the warm"): every stored item is re-checked against the source, which needs the source (its CAS on),
the destinations' CAS and their binary protocol. If one is missing the run is refused (exit 2) unless
the user accepted running without the re-check. At the end, the source must still be the memcached
the dump read, or the re-check's CAS comparisons meant nothing."""

from __future__ import annotations

from dataclasses import dataclass

from cachewarm.datapath import format as df
from cachewarm.datapath.meta import ServerIdentity
from cachewarm.datapath.populate.config import PopulateConfig, PopulateError, PopulateSettingError
from cachewarm.datapath.populate.destinations import DestinationProbe, read_source


@dataclass(frozen=True)
class Liveops:
    # How items are written (WorkerParams.store).
    store: str = "binary"
    # Why the re-check is off (None: on).
    recheck_off: str | None = None
    # The source's identity (pid, start time) when it was reached.
    source_ident: tuple[int, int] | None = None


def preflight(c: PopulateConfig, probe: DestinationProbe) -> Liveops:
    if c.mode != "add":
        return Liveops()
    why: list[str] = []
    if off := probe.without_binary():
        why.append(
            f"destination(s) {', '.join(off)} do not speak memcached's binary protocol (-B ascii): "
            "add mode stores with binary ADDs, whose answers carry each stored item's CAS"
        )
    if off := probe.without_cas():
        why.append(f"destination(s) {', '.join(off)} run with CAS off (memcached -C)")
    ident: tuple[int, int] | None = None
    if c.source is None:
        why.append(
            "no source memcached given (--source HOST:PORT): the re-check reads every stored item there"
        )
    else:
        ident, cas = read_source(c.source, c.destination_timeout)
        if not cas:
            why.append(f"the source {c.source.address} runs with CAS off (memcached -C)")
    if why and not c.accept_no_recheck:
        raise PopulateSettingError(
            "add mode re-checks every item it stores against the source, so that a delete, touch or "
            f"increment the source gets during the warm is not undone; it cannot here: {'; '.join(why)}. "
            "Fix that, or pass --accept-no-recheck to warm without the re-check"
        )
    store = "text" if probe.without_binary() else "binary-unchecked" if why else "binary"
    return Liveops(store, "; ".join(why) or None, ident)


def check_source_identity(c: PopulateConfig, manifest: df.Manifest, now: tuple[int, int] | None) -> None:
    """The re-checks compared the files with the source as the populate found it (`now`): the one
    DONE says the dump read (its `clock`: pid and start time)."""
    clock = manifest.raw.get("clock")
    if now is None or not isinstance(clock, dict):
        return
    pid, started = clock.get("source_pid"), clock.get("source_started")
    if not isinstance(pid, int) or not isinstance(started, int):
        return
    if not ServerIdentity(pid, started).same_as(ServerIdentity(*now)):
        where = c.source.address if c.source else "?"
        raise PopulateError(
            f"the source {where} is not the memcached the dump read (pid {pid}, started {started}; now "
            f"pid {now[0]}, started {now[1]}): it restarted, or --source "
            "names another; the re-check compared the dump with it. Warm again from the source as it is"
        )
