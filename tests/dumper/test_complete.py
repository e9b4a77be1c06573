"""Zero missing keys: 1,000,000 items, 2 worker threads, every key in the dump, several runs.

memcached's LRU crawler (`metadump all`) skips items whose lock is busy while values are fetched; the
dumper crawls the hash table instead (`metadump hash`, blocking bucket locks) and runs a reconciliation
crawl (docs/data-format.md section 6) whenever the first crawl may have missed keys. The three runs
cover: the default, the LRU crawl (which does miss keys, so reconciliation must find them), and the
default with reconciliation forced.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cachewarm.datapath import format as dataformat

from tests.dumper.dumputil import load_numbered, run_dump

N = 1_000_000


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [[], ["--crawl", "all"], ["--reconcile", "always"]],
    ids=["hash", "lru+reconcile", "hash+reconcile"],
)
def test_million_items_none_missing(dumper_bin: Path, memcached, tmp_path: Path, args: list[str]) -> None:
    srv = memcached(memory_mb=1024)
    load_numbered(srv, N, value_size=10)
    assert int(srv.stats()["curr_items"]) == N
    out = tmp_path / "o"
    r = run_dump(dumper_bin, srv, out, "--threads", "2", *args, timeout=300)
    assert r.returncode == 0, r.stderr
    manifest = dataformat.read_manifest(out / "DONE")
    keys: set[bytes] = set()
    count = 0
    for f in manifest.files:
        v = dataformat.check_file(out / f.name)
        assert v.ok, f"{f.name}: {v.reason}"
        assert v.data is not None
        for rec in dataformat.iter_records(v.data):
            keys.add(rec.key)
            count += 1
    assert count == len(keys), "a key was dumped twice"
    missing = N - len(keys & {b"k%d" % i for i in range(N)})
    assert missing == 0, f"{missing} keys missing (reconciled {manifest.totals['reconciled_keys']})"
    assert manifest.totals["records"] == N and manifest.totals["misses"] == 0
    assert manifest.raw["complete"] is True, manifest.raw["incomplete_reason"]
    print(f"{args}: reconciled_keys={manifest.totals['reconciled_keys']}")
