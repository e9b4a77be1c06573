"""The dumper against a scripted memcached (tests/dumper/fakemc.py): the crawl answers and server
limits a real server gives only by chance — a busy crawler, no `metadump hash`, an LRU crawl listing a
key twice, no binary protocol, keys that keep appearing — and what DONE says about each."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.dumper.dumputil import read_dump
from tests.dumper.fakemc import FakeItem, FakeMemcached

BUSY = "BUSY currently processing crawler request"
LOCKED = "ERROR locked try again later"


def items(n: int, prefix: bytes = b"k") -> dict[bytes, FakeItem]:
    return {prefix + b"%d" % i: FakeItem(b"v%d" % i, i) for i in range(n)}


def run(dumper_bin: Path, fake: FakeMemcached, out: Path, *args: str) -> tuple[int, str]:
    import subprocess

    r = subprocess.run(
        [str(dumper_bin), "--host", fake.host, "--port", str(fake.port), "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return r.returncode, r.stderr


def done(out: Path) -> dict[str, object]:
    return json.loads((out / "DONE").read_text())


@pytest.mark.parametrize("ok_line", [False, True], ids=["1.6.18-style", "1.6.43+-style"])
def test_busy_crawler_is_retried_with_backoff(dumper_bin: Path, tmp_path: Path, ok_line: bool) -> None:
    with FakeMemcached(items=items(500), crawl_script=[BUSY, LOCKED, BUSY], ok_line=ok_line) as fake:
        rc, err = run(dumper_bin, fake, tmp_path / "o")
        assert rc == 0, err
        assert fake.crawl_requests == ["hash"] * 4  # retried in the same mode, never another
    assert err.count("retrying in") == 3 and BUSY in err and LOCKED in err
    d = done(tmp_path / "o")
    crawl = d["crawl"]
    assert isinstance(crawl, dict)
    assert crawl["busy_retries"] == 3 and crawl["modes"] == ["hash"] and crawl["fallback"] is None
    # Waits of 0.1, 0.2 and 0.4 s (exponential backoff); recorded, not asserted as a duration.
    assert float(crawl["busy_wait_s"]) > 0
    assert d["complete"] is True
    assert len(read_dump(tmp_path / "o").by_key()) == 500


def test_crawler_busy_past_the_limit_fails_naming_the_problem(dumper_bin: Path, tmp_path: Path) -> None:
    with FakeMemcached(items=items(10), crawl_script=[BUSY] * 100) as fake:
        rc, err = run(dumper_bin, fake, tmp_path / "o", "--crawl-busy-timeout", "0.5")
        assert set(fake.crawl_requests) == {"hash"}
    assert rc == 1
    assert "FAILED, no DONE written" in err and "stayed busy" in err and "--crawl-busy-timeout" in err
    assert BUSY in err and "another crawl is running" in err
    assert not (tmp_path / "o" / "DONE").exists()


def test_no_hash_crawl_falls_back_to_lru_and_says_so(dumper_bin: Path, tmp_path: Path) -> None:
    with FakeMemcached(items=items(300), hash_supported=False, listed_twice={b"k1", b"k2"}) as fake:
        rc, err = run(dumper_bin, fake, tmp_path / "o")
        assert rc == 0, err
        assert fake.crawl_requests[:2] == ["hash", "all"]
    assert "no `lru_crawler metadump hash`" in err and "BADCLASS" in err
    d = done(tmp_path / "o")
    crawl = d["crawl"]
    assert isinstance(crawl, dict)
    assert crawl["modes"] == ["all"]
    assert "hash -> all" in str(crawl["fallback"]) and "BADCLASS" in str(crawl["fallback"])
    comp = d["completeness"]
    assert isinstance(comp, dict)
    assert comp["reconcile_passes"] >= 1 and comp["reconcile_converged"] is True
    assert comp["duplicates_dropped"] == 2
    assert d["complete"] is True
    assert len(read_dump(tmp_path / "o").by_key()) == 300  # asserts no key twice


def test_lru_crawl_listing_a_key_twice_dumps_it_once(dumper_bin: Path, tmp_path: Path) -> None:
    twice = {b"k%d" % i for i in range(0, 2000, 3)}
    with FakeMemcached(items=items(2000), listed_twice=twice) as fake:
        rc, err = run(dumper_bin, fake, tmp_path / "o", "--crawl", "all", "--key-file-size", "4k")
        assert rc == 0, err
    dump = read_dump(tmp_path / "o")
    assert len(dump.by_key()) == 2000  # asserts no key twice
    d = done(tmp_path / "o")
    comp = d["completeness"]
    assert isinstance(comp, dict)
    assert comp["duplicates_dropped"] == len(twice)
    assert comp["keys_listed"] == 2000 and comp["records"] == 2000


def test_key_without_any_protocol_is_named_and_dump_is_incomplete(dumper_bin: Path, tmp_path: Path) -> None:
    long_key = bytes(range(256))[:200]  # binary, 200 bytes: base64 is 268 characters
    its = items(100)
    its[long_key] = FakeItem(b"unreachable", 9)
    with FakeMemcached(items=its, binary=False) as fake:
        rc, err = run(dumper_bin, fake, tmp_path / "o")
    assert rc == 0, err  # the manifest is valid; the populator decides
    assert "does not answer the binary protocol" in err and "INCOMPLETE" in err
    d = done(tmp_path / "o")
    assert d["complete"] is False
    assert "1 keys could not be dumped (named in keys/UNDUMPED)" in str(d["incomplete_reason"])
    comp = d["completeness"]
    assert isinstance(comp, dict)
    assert comp["undumped"] == 1 and comp["undumped_report"] == "keys/UNDUMPED" and comp["records"] == 100
    report = (tmp_path / "o" / "keys" / "UNDUMPED").read_text().splitlines()
    assert len(report) == 1
    url, exp, why = report[0].split(" ", 2)
    from urllib.parse import unquote_to_bytes

    assert unquote_to_bytes(url) == long_key and exp == "-1" and "binary protocol" in why
    totals = d["totals"]
    assert isinstance(totals, dict) and totals["misses"] == 1  # in the key range, not a record
    assert long_key not in read_dump(tmp_path / "o").by_key()


def test_long_binary_key_fetched_with_binary_protocol_keeps_listing_ttl(
    dumper_bin: Path, tmp_path: Path
) -> None:
    exp = int(time.time()) + 5000
    its = {bytes([0, 0x20, 0x0D, 0x0A, 0xFF]) * 40: FakeItem(b"x" * 70000, 4294967295, exp)}
    with FakeMemcached(items=its) as fake:
        rc, err = run(dumper_bin, fake, tmp_path / "o")
    assert rc == 0, err
    rec = read_dump(tmp_path / "o").by_key()[next(iter(its))]
    assert (rec.value, rec.flags) == (b"x" * 70000, 4294967295)
    # The listing's exp is on the source's clock: moved onto the dumper's, never later (the source's
    # `stats time` is whole seconds and lags its clock: up to 2 s earlier).
    assert exp - 2 <= rec.exptime <= exp
    comp = done(tmp_path / "o")["completeness"]
    assert isinstance(comp, dict) and comp["binary_protocol_records"] == 1


def test_reconciliation_that_never_converges_is_an_incomplete_dump(dumper_bin: Path, tmp_path: Path) -> None:
    n = [0]

    def live_writes(fake: FakeMemcached) -> None:  # every crawl finds 50 keys no earlier crawl had
        n[0] += 1
        fake.items.update(items(50, prefix=b"new%d-" % n[0]))

    with FakeMemcached(items=items(100), curr_items=10**6, before_listing=live_writes) as fake:
        rc, err = run(dumper_bin, fake, tmp_path / "o", "--crawl", "all")
    assert rc == 0, err
    assert "INCOMPLETE" in err and "reconciliation pass 4" in err
    d = done(tmp_path / "o")
    assert d["complete"] is False
    assert "did not converge after 4 passes" in str(d["incomplete_reason"])
    comp = d["completeness"]
    assert isinstance(comp, dict)
    assert comp["reconcile_passes"] == 4 and comp["reconcile_converged"] is False
    assert comp["records"] == comp["keys_listed"] == 100 + 5 * 50


def test_misses_are_split_into_expired_and_gone(dumper_bin: Path, tmp_path: Path) -> None:
    now = int(time.time())
    its = items(50)
    its.update({b"exp%d" % i: FakeItem(b"e", 0, now - 100) for i in range(7)})  # listed, already expired

    class Deleting(FakeMemcached):
        def _crawl(self, mode: str) -> bytes:
            listing = super()._crawl(mode)
            for i in range(3):  # deleted right after the crawl listed them
                self.items.pop(b"k%d" % i, None)
            return listing

    with Deleting(items=its) as fake:
        rc, err = run(dumper_bin, fake, tmp_path / "o")
    assert rc == 0, err
    d = done(tmp_path / "o")
    comp = d["completeness"]
    assert isinstance(comp, dict)
    assert (comp["misses_expired"], comp["misses_gone"], comp["records"]) == (7, 3, 47)
    assert d["complete"] is True  # every miss explained
