"""`HOST[:PORT]` lists as the command lines take them (datapath/nodes.py)."""

from __future__ import annotations

import pytest
from cachewarm.datapath.nodes import Node, parse_nodes


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="bad destination"):
        parse_nodes("host")
    with pytest.raises(ValueError, match="twice"):
        parse_nodes("h:1,h:1")
    assert parse_nodes("a:1, b:2") == [Node("a", 1), Node("b", 2)]


@pytest.mark.parametrize("host", ["$(touch x)", "`id`", "x;y", "x|y", "a b", "x\ny", "-x", "a..b"])
def test_hosts_that_are_not_hostnames_are_refused(host: str) -> None:
    with pytest.raises(ValueError, match="not a host name"):
        parse_nodes(f"{host}:11211")


def test_ipv6_and_names_are_accepted() -> None:
    assert parse_nodes("[::1]:11211,cache-1.example.com:11212,10.0.0.1:1") == [
        Node("::1", 11211),
        Node("cache-1.example.com", 11212),
        Node("10.0.0.1", 1),
    ]
