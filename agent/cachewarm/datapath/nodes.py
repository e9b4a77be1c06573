"""A memcached node as the user names it (`HOST[:PORT]`), parsed and resolved once per run, as the
EVCache client resolves its nodes."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Node:
    host: str
    port: int
    # The address `host` resolved to (`resolve_nodes`, once per run, as the EVCache client does): the
    # node key's {ip}, and where we connect. None: not resolved (an IP address needs no resolving).
    ip: str | None = None

    @property
    def address(self) -> str:
        """HOST:PORT as the user named it."""
        return f"{self.host}:{self.port}"

    @property
    def connect_host(self) -> str:
        return self.ip or self.host


Resolver = Callable[..., list[tuple[Any, ...]]]


def resolve(node: Node, resolver: Resolver = socket.getaddrinfo) -> Node:
    """The node with `ip` set: the host itself if it is an IP address, else its first IPv4 address
    (Java, and so the EVCache client, prefers IPv4), else its first IPv6 one. Raises ValueError
    naming a host that does not resolve."""
    try:
        ipaddress.ip_address(node.host)
        return replace(node, ip=node.host)
    except ValueError:
        pass
    try:
        infos = resolver(node.host, node.port, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise ValueError(f"cannot resolve {node.host!r}: {e}") from e
    addrs = [(fam, sa[0]) for fam, _, _, _, sa in infos]
    for want in (socket.AF_INET, socket.AF_INET6):
        for fam, ip in addrs:
            if fam == want:
                return replace(node, ip=str(ip))
    raise ValueError(f"{node.host!r} resolves to no IP address")


def resolve_nodes(nodes: Sequence[Node], resolver: Resolver = socket.getaddrinfo) -> list[Node]:
    return [resolve(n, resolver) for n in nodes]


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\.?$")


def valid_host(host: str) -> bool:
    """A DNS name, an IPv4 address, or an IPv6 address (given in brackets on the command line)."""
    if len(host) > 253:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOSTNAME.fullmatch(host))


DEFAULT_PORT = 11211


def parse_nodes(spec: str, what: str = "destination", default_port: int | None = None) -> list[Node]:
    """`HOST[:PORT][,HOST[:PORT]...]` -> nodes, in order. Raises ValueError naming `what` (the flag or
    role, e.g. "--source") and the bad part. A missing port is `default_port` (the command line passes
    memcached's 11211); without one, the port is required."""
    nodes = []
    for part in spec.split(","):
        part = part.strip()
        host, sep, port_s = part.rpartition(":")
        if (part.startswith("[") and part.endswith("]")) or (not sep and default_port is not None):
            host, sep, port_s = part, ":", str(default_port)
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        form = "HOST[:PORT]" if default_port is not None else "HOST:PORT"
        if not sep or not host or not port_s.isdigit():
            raise ValueError(f"bad {what} {part!r}: expected {form}")
        if not 0 < int(port_s) < 65536:
            raise ValueError(f"bad {what} {part!r}: port {port_s} is not in 1..65535")
        if not valid_host(host):
            raise ValueError(f"bad {what} {part!r}: {host!r} is not a host name or IP address")
        nodes.append(Node(host, int(port_s)))
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"{what} list {spec!r} names a node twice")
    return nodes
