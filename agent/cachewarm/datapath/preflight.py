"""Check before you cost: `cachewarm warm` reaches, identifies (`stats` pid and start time) and sizes
the source and every target before the dumper starts, so nothing is dumped for a warm that cannot
finish. A target that does not answer fails now (exit 6), not after the whole source is dumped; a
target that *is* the source is refused (exit 2);
an empty source and a target with a smaller item limit are named; in add mode, a source or target with
CAS off or a target without the binary protocol is refused (exit 2) unless the user accepts a warm
without the re-check (docs/reliability.md "Live traffic during the warm"). `--plan` prints what the
warm would do from the same look and moves nothing."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass

from cachewarm.datapath.binproto import speaks_binary
from cachewarm.datapath.meta import MetaConnection, ServerIdentity
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate.destinations import reason
from cachewarm.datapath.warm_config import WarmConfig
from cachewarm.datapath.warm_errors import SettingError, Unreachable


def check_reachable(node: Node, role: str = "source", timeout: float = 5.0) -> None:
    """Fail at once, naming it, when a memcached does not answer within `timeout` seconds (for the
    source, the dumper would only say so after the populator has started)."""
    look(node, role, timeout)


@dataclass(frozen=True)
class ServerLook:
    """What `warm` knows of a memcached before anything moves: who it is and how full."""

    address: str
    identity: ServerIdentity
    items: int  # stats curr_items
    bytes: int  # stats bytes
    limit_maxbytes: int
    item_size_max: int
    # `stats settings` cas_enabled (memcached -C: off), and (targets) whether it speaks the binary
    # protocol (-B ascii: no).
    cas: bool = True
    binary_protocol: bool = True


def look(node: Node, role: str, timeout: float = 5.0) -> ServerLook:
    """One look at a memcached (`stats`, `stats settings`); Unreachable names `role` and the address."""
    try:
        with MetaConnection(node.connect_host, node.port, timeout) as c:
            stats = c.stats()
            settings = c.stats(b"settings")
        return ServerLook(
            address=node.address,
            identity=ServerIdentity(int(stats["pid"]), int(stats["time"]) - int(stats["uptime"])),
            items=int(stats.get("curr_items", 0)),
            bytes=int(stats.get("bytes", 0)),
            limit_maxbytes=int(stats.get("limit_maxbytes", 0)),
            item_size_max=int(settings.get("item_size_max", 1 << 20)),
            cas=settings.get("cas_enabled", "yes") == "yes",
            binary_protocol=role == "source" or speaks_binary(node.connect_host, node.port, timeout),
        )
    except (OSError, ValueError, KeyError) as e:  # refused, a timeout, a name that does not resolve
        raise Unreachable(f"{role} {node.address} unreachable: {reason(e)}") from e


@dataclass(frozen=True)
class Preflight:
    source: ServerLook
    targets: list[ServerLook]
    # Said before anything moves (stderr) and again in the summary.
    warnings: list[str]


def preflight(source: Node, targets: list[Node], mode: str = "add", recheck: bool = False) -> Preflight:
    """Reach, identify and size the source and every target before the dumper starts: a target
    that cannot be reached fails now (exit 6), not after the whole source is dumped; a target that
    *is* the source (same pid and start time, whatever the address says: localhost = 127.0.0.1) is
    refused (exit 2) — in set mode it would rewrite the live source with its own values. `recheck`
    (add mode, not accepted otherwise): CAS on at both ends and the binary protocol at the targets,
    or refused (exit 2)."""
    src = look(source, "source")
    looks = [look(t, "target") for t in targets]
    if recheck:
        why = [f"the source {src.address} runs with CAS off (memcached -C)"] if not src.cas else []
        why += [f"the target {t.address} runs with CAS off (memcached -C)" for t in looks if not t.cas]
        why += [
            f"the target {t.address} does not speak memcached's binary protocol (-B ascii)"
            for t in looks
            if not t.binary_protocol
        ]
        if why:
            raise SettingError(
                "add mode re-checks every item it stores against the source, so that a delete, touch or "
                f"increment the source gets during the warm is not undone; it cannot here: {'; '.join(why)}. "
                "Fix that, or pass --accept-no-recheck to warm without the re-check"
            )
    for t in looks:
        if t.identity.same_as(src.identity):
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(src.identity.started))
            harm = "rewrite the live source with its own values" if mode == "set" else "copy it onto itself"
            raise SettingError(
                f"target {t.address} is the source {src.address}: the same memcached (pid "
                f"{src.identity.pid}, up since {since}); a warm would {harm}"
            )
    for i, a in enumerate(looks):
        for b in looks[i + 1 :]:
            if a.identity.same_as(b.identity):
                raise SettingError(
                    f"targets {a.address} and {b.address} are the same memcached (pid {a.identity.pid}): "
                    "name each target node once"
                )
    warnings = []
    if src.items == 0:
        warnings.append(
            f"the source {src.address} holds no items (stats curr_items 0): nothing to copy; is it the "
            "right server?"
        )
    for t in looks:
        if t.item_size_max < src.item_size_max and src.items:
            warnings.append(
                f"the target {t.address} takes items up to {mib(t.item_size_max)} (-I), the source "
                f"{src.address} up to {mib(src.item_size_max)}: larger items will be skipped and named "
                "(exit 8 unless --accept-oversize)"
            )
    return Preflight(src, looks, warnings)


def mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n / 1024:g} KiB"


def plan_text(cfg: WarmConfig, checked: Preflight) -> str:
    """`warm --plan`: what the warm would do, from the look before it — and nothing moved."""
    src = checked.source
    lines = [
        f"plan: warm {src.address} -> {', '.join(t.address for t in checked.targets)} "
        f"({cfg.mode} mode, {'stream: no data files' if cfg.stream else 'data files'}); nothing was moved",
        f"  source              {src.items:>12,} items, {src.bytes / 1e6:,.1f} MB (stats curr_items, bytes)",
    ]
    for t in checked.targets:
        lines.append(
            f"  target              {t.items:>12,} items now, memory limit {t.limit_maxbytes / 1e6:,.0f} MB, "
            f"items up to {mib(t.item_size_max)}  ({t.address})"
        )
    memory = sum(t.limit_maxbytes for t in checked.targets)
    if memory and src.bytes > memory:
        lines.append(
            f"  WARNING: the targets' memory ({memory / 1e6:,.0f} MB) is less than the source's data "
            f"({src.bytes / 1e6:,.0f} MB): they will evict (exit 8 unless --accept-evictions)"
        )
    need = 0 if cfg.stream else src.bytes
    where = cfg.workdir if cfg.workdir.exists() else next(p for p in cfg.workdir.parents if p.exists())
    free = shutil.disk_usage(where).free
    what = "stream: key lists only" if cfg.stream else "about the source's bytes"
    lines.append(
        f"  workdir             {need / 1e6:>12,.1f} MB needed ({what}), {free / 1e6:,.0f} MB free on "
        f"{where}; it stays after the warm"
    )
    if need > free:
        lines.append("  WARNING: not enough free disk for the dump: use another --workdir")
    rate = cfg.source_rate
    if rate:
        lines.append(
            f"  time                at least {src.items / rate:,.0f}s at {rate:,} items/s from the source"
        )
    else:
        lines.append("  time                unlimited rate: as fast as the source and this machine allow")
    lines += [f"  WARNING: {w}" for w in checked.warnings]
    return "\n".join(lines)
