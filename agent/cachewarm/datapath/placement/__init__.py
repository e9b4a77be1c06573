"""Where each client puts a key: the `--placement` schemes (docs/placement.md).

`spec.py` parses `--placement SCHEME[,KEY=VALUE...]` and builds a `Placer` for a destination list;
`twemproxy.py` and `mcrouter.py` read the user's own proxy configuration; the hashing itself is
hashkit (C, `dumper-cpp/hashkit/`), through the `_speedups` extension.
"""

from cachewarm.datapath.placement.spec import SCHEMES, PlacementError, PlacementSpec, Placer

__all__ = ["SCHEMES", "PlacementError", "PlacementSpec", "Placer"]
