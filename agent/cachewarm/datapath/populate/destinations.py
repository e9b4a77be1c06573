"""The populator's look at its destinations, before writing and between files: who each one is (a
memcached that restarted came back empty), what it can hold (`version`, `stats settings`: its item
size limit decides which items are never sent; with evictions off a full destination fails stores:
the run fails, and in set mode each failed store deletes its key's value) and how many items it
evicted since the populate began (evictions mean the warm is not complete)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import tenacity

from cachewarm.datapath.binproto import speaks_binary
from cachewarm.datapath.encode import ItemLimit
from cachewarm.datapath.meta import MetaConnection, ServerClock
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate.config import DestinationUnreachable
from cachewarm.datapath.wire import DestinationUnavailable, retry_while_unavailable

# The meta protocol (every write of ours) is memcached 1.6's.
MIN_VERSION = (1, 6, 0)
# Seconds between measurements of one server's clock: memcached's 1-s timer is re-armed after each
# tick, so its phase slips (tens of ms in seconds on a loaded host), and past a second it jumps.
CLOCK_REMEASURE_S = 30.0
# Seconds one look may take (connect included): a silent host is reported as such within seconds,
# then retried with backoff until the destination timeout.
PROBE_TIMEOUT_S = 5.0


def parse_version(text: str) -> tuple[int, ...] | None:
    """(1, 6, 45) of "1.6.45" (or "1.6.45-rc1"); None when it is no release number."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(x) for x in m.groups()) if m else None


def reason(e: BaseException) -> str:
    """Why a connection failed, for a message that names the destination already: without the
    address and errno prefixes ("cannot connect: Connection refused")."""
    return re.sub(r"\[Errno -?\d+\] ", "", re.sub(r"^\S+:\d+: ", "", str(e)))


@dataclass(frozen=True)
class DestinationInfo:
    address: str
    version: str
    pid: int
    started: int
    item_size_max: int
    cas: bool
    # `evictions on` (the default): a full memcached evicts; off (-M): it refuses stores.
    evictions_enabled: bool
    evictions: int
    # It answers the binary protocol (add mode's ADDs: `-B auto`, the default; not `-B ascii`).
    binary_protocol: bool = True

    @property
    def limit(self) -> ItemLimit:
        return ItemLimit(self.item_size_max, self.cas)

    @property
    def identity(self) -> tuple[int, int]:
        return self.pid, self.started


def read_info(node: Node, timeout: float = PROBE_TIMEOUT_S) -> DestinationInfo:
    """One look at a destination. Raises DestinationUnavailable (also for answers we cannot use)."""
    c = MetaConnection(node.connect_host, node.port, timeout)
    try:
        ident = c.connect()
        stats = c.stats()
        settings = c.stats(b"settings")
        version = c.version()
    finally:
        c.close()
    binary = speaks_binary(node.connect_host, node.port, timeout)
    try:
        return DestinationInfo(
            address=node.address,
            version=version,
            pid=ident.pid,
            started=ident.started,
            item_size_max=int(settings["item_size_max"]),
            cas=settings.get("cas_enabled", "yes") == "yes",
            evictions_enabled=settings.get("evictions", "on") == "on",
            evictions=int(stats.get("evictions", "0")),
            binary_protocol=binary,
        )
    except (KeyError, ValueError) as e:
        raise DestinationUnavailable(f"{node.address}: `stats settings` lacks item_size_max: {e}") from e


def read_source(node: Node, timeout: float) -> tuple[tuple[int, int], bool]:
    """The source's identity (pid, start time) and whether its CAS is on (`stats settings`
    cas_enabled), retried while it is unavailable for `timeout`. Raises DestinationUnreachable."""
    try:
        for attempt in retry_while_unavailable(timeout).copy(stop=tenacity.stop_before_delay(timeout)):
            with attempt:
                c = MetaConnection(node.connect_host, node.port, PROBE_TIMEOUT_S)
                try:
                    ident = c.connect()
                    settings = c.stats(b"settings")
                finally:
                    c.close()
    except DestinationUnavailable as e:
        raise DestinationUnreachable(
            f"source {node.address} unavailable for {timeout:g}s: {reason(e)}"
        ) from e
    return (ident.pid, ident.started), settings.get("cas_enabled", "yes") == "yes"


@dataclass
class DestinationProbe:
    nodes: list[Node]
    # How long a destination may refuse connections before the populator gives up.
    timeout: float
    # Per address: (pid, evictions) when first seen with that pid (the state file keeps it).
    evictions_base: dict[str, tuple[int, int]] = field(default_factory=dict)
    info: dict[str, DestinationInfo] = field(default_factory=dict)
    # Told (address, why, seconds waited so far) before each retry while a destination is unavailable.
    on_wait: Callable[[str, str, float], None] | None = None
    _evictions: dict[str, int] = field(default_factory=dict)
    # Per (address, identity): that server's clock against this host's (measure_clock), measured
    # once per server lifetime: every T sent to it is moved by it (ServerClock.shift).
    clocks: dict[tuple[str, tuple[int, int]], ServerClock] = field(default_factory=dict)
    _measured_at: dict[tuple[str, tuple[int, int]], float] = field(default_factory=dict)

    @property
    def evictions(self) -> int:
        """Items the destinations evicted since the first probe."""
        return sum(self._evictions.values())

    def evictions_by_node(self) -> dict[str, int]:
        return {a: n for a, n in self._evictions.items() if n}

    def budgets(self) -> tuple[int, ...]:
        """Per node (in order): the most key + value bytes one of its items may have (encode.ItemLimit)."""
        return tuple(self.info[n.address].limit.budget for n in self.nodes)

    def probe(self) -> dict[str, tuple[int, int]]:
        """Look at each destination (with backoff): its identity (pid, start time) by address.
        Raises DestinationUnreachable when one stays unavailable for `timeout`."""
        seen: dict[str, tuple[int, int]] = {}
        for n in self.nodes:
            # Give up when the next backoff would pass the timeout (not up to one backoff after it).
            retrying = retry_while_unavailable(self.timeout).copy(
                stop=tenacity.stop_before_delay(self.timeout)
            )
            if self.on_wait is not None:
                retrying = retrying.copy(before_sleep=self._waiting(n.address))
            try:
                for attempt in retrying:
                    with attempt:
                        info = read_info(n)
            except DestinationUnavailable as e:
                why = f"unavailable for {self.timeout:g}s (--destination-timeout): {reason(e)}"
                raise DestinationUnreachable(f"destination {n.address} {why}") from e
            self.info[n.address] = info
            seen[n.address] = info.identity
            # Evictions while we write mean the destination is too small: items were dropped.
            first = self.evictions_base.setdefault(n.address, (info.pid, info.evictions))
            if first[0] == info.pid:
                self._evictions[n.address] = info.evictions - first[1]
            else:  # restarted: its counter began at 0, what it evicted before is gone with it
                self.evictions_base[n.address] = (info.pid, 0)
                self._evictions[n.address] = info.evictions
        self._measure_clocks(seen)
        return seen

    def _measure_clocks(self, seen: dict[str, tuple[int, int]]) -> None:
        """Each server not measured in CLOCK_REMEASURE_S, all at once (each watch takes up to a second)."""
        now = time.monotonic()
        todo = [
            n
            for n in self.nodes
            if now - self._measured_at.get((n.address, seen[n.address]), -CLOCK_REMEASURE_S)
            >= CLOCK_REMEASURE_S
        ]
        if not todo:
            return

        def measure(n: Node) -> ServerClock:
            with MetaConnection(n.connect_host, n.port, PROBE_TIMEOUT_S) as c:
                return c.measure_clock()

        with ThreadPoolExecutor(max_workers=min(16, len(todo))) as pool:
            for n, clock in zip(todo, pool.map(measure, todo), strict=True):
                self.clocks[(n.address, seen[n.address])] = clock
                self._measured_at[(n.address, seen[n.address])] = now

    def clock_items(self) -> list[tuple[tuple[str, tuple[int, int]], float]]:
        """((address, identity), lower bound of its clock against this host's) of each server measured."""
        return [(k, c.lo) for k, c in self.clocks.items()]

    def clock_lows(self) -> tuple[float | None, ...]:
        """Per node (in order): the lower bound of its current server's clock against this host's
        (ServerClock.lo), None when not measured."""
        out: list[float | None] = []
        for n in self.nodes:
            info = self.info.get(n.address)
            clock = self.clocks.get((n.address, info.identity)) if info else None
            out.append(None if clock is None else clock.lo)
        return tuple(out)

    def _waiting(self, address: str) -> Callable[[tenacity.RetryCallState], None]:
        def tell(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            if self.on_wait is not None:
                self.on_wait(address, reason(exc) if exc else "unavailable", state.seconds_since_start or 0.0)

        return tell

    def without_cas(self) -> list[str]:
        return [a for a, i in self.info.items() if not i.cas]

    def without_binary(self) -> list[str]:
        return [a for a, i in self.info.items() if not i.binary_protocol]

    def without_evictions(self) -> list[str]:
        return [a for a, i in self.info.items() if not i.evictions_enabled]

    def too_old(self) -> list[str]:
        """Destinations whose release predates the meta protocol ("address (version)")."""
        return [
            f"{a} ({i.version})"
            for a, i in self.info.items()
            if (v := parse_version(i.version)) is not None and v < MIN_VERSION
        ]
