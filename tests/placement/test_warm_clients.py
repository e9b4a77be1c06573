"""The acceptance of issue 24: `cachewarm warm --placement ...` (files and --stream) from one
source into N = 3 and 25 destinations on distinct loopback addresses, then every key read back
through the cluster's own client or proxy — nutcracker, pylibmc (libmemcached), pymemcache's
HashClient, gomemcache (built with Go when Go and its module proxy are there, else zlib's crc32);
mcrouter (not installable here) through a pure-Python furc pinned to its published values and zlib.
0 keys may be missing."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cachewarm.datapath import _speedups
from cachewarm.datapath.nodes import Node
from cachewarm.testing.memcached import MemcachedServer, free_port
from pymemcache.client.hash import HashClient

from tests.conftest import DEFAULT_VERSION
from tests.ketama_oracle import KetamaRing
from tests.placement.conftest import DEBIAN_PYTHON
from tests.placement.keys import corpus
from tests.placement.proxies import get_many, nutcracker, set_many

pytestmark = [
    pytest.mark.usefixtures("nutcracker_installed", "pylibmc_installed"),
    pytest.mark.memcached_versions(DEFAULT_VERSION),  # placement is decided on our side
]

CLI = [sys.executable, "-c", "from cachewarm.cli import run; run()"]
KEYS = corpus(2000)


def value(k: bytes) -> bytes:
    return b"v:" + k[-20:]


def warm(
    dumper: Path,
    workdir: Path,
    src: MemcachedServer,
    dsts: list[MemcachedServer],
    placement: str,
    warm_args: list[str],
) -> None:
    env = {**os.environ, "CACHEWARM_DUMP": str(dumper)}
    args = ["warm", "--source", src.address, "--target", ",".join(d.address for d in dsts)]
    args += ["--workdir", str(workdir), "--placement", placement, "--workers", "2", *warm_args]
    r = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sum(int(d.stats()["curr_items"]) for d in dsts) == len(KEYS)


def flush(srvs: list[MemcachedServer]) -> None:
    for s in srvs:
        with socket.create_connection((s.host, s.port), timeout=10) as c:
            c.sendall(b"flush_all\r\n")
            assert c.recv(100) == b"OK\r\n"


def missing_via_nutcracker(
    tmp_path: Path, dsts: list[MemcachedServer], conf: Path, listen: int
) -> list[bytes]:
    with nutcracker(conf, tmp_path):
        found = get_many("127.0.0.1", listen, KEYS)
    assert all(found[k] == value(k) for k in found)
    return [k for k in KEYS if k not in found]


def missing_via_pylibmc(dsts: list[MemcachedServer], behaviors: dict[str, object]) -> list[bytes]:
    conf = json.dumps({"servers": [d.address for d in dsts], "behaviors": behaviors})
    out = subprocess.run(
        [DEBIAN_PYTHON, str(Path(__file__).with_name("pylibmc_get.py")), conf],
        input="\n".join(k.hex() for k in KEYS),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [bytes.fromhex(x) for x in out.split()]


def _utf8(k: bytes) -> bool:
    try:
        k.decode()
        return True
    except UnicodeDecodeError:
        return False


def missing_via_pymemcache(dsts: list[MemcachedServer], keys: str, prefix: bytes = b"") -> list[bytes]:
    servers = [(d.host, d.port) for d in dsts]
    plain = HashClient(servers, allow_unicode_keys=True)
    prefixed = HashClient(servers, allow_unicode_keys=True, key_prefix=prefix)
    gone = []
    for k in KEYS:
        client, key = (prefixed, k[len(prefix) :]) if prefix and k.startswith(prefix) else (plain, k)
        # how the application passed the key: a str (its UTF-8 text) unless it could not have
        as_str = keys == "str" and _utf8(key)
        if client.get(key.decode() if as_str else key) != value(k):
            gone.append(k)
    plain.quit()
    prefixed.quit()
    return gone


def _furc(key: bytes, m: int) -> int:
    """mcrouter's furc_hash in Python, independent of hashkit (pinned below to its published values)."""
    mask = (1 << 64) - 1
    mul = 0xC6A4A7935BD1E995

    def murmur64a(data: bytes, seed: int) -> int:
        h = (seed ^ (len(data) * mul)) & mask
        n8 = len(data) // 8 * 8
        for i in range(0, n8, 8):
            k = int.from_bytes(data[i : i + 8], "little") * mul & mask
            k = (k ^ (k >> 47)) * mul & mask
            h = ((h ^ k) * mul) & mask
        rest = data[n8:]
        if rest:
            h = ((h ^ int.from_bytes(rest, "little")) * mul) & mask
        h = (h ^ (h >> 47)) * mul & mask
        return h ^ (h >> 47)

    if m <= 1:
        return 0
    words: list[int] = []

    def bit(i: int) -> int:
        while len(words) <= i >> 6:
            words.append(murmur64a(key if not words else words[-1].to_bytes(8, "little"), 4193360111))
        return (words[i >> 6] >> (i & 63)) & 1

    d = (m - 1).bit_length()
    a = d
    for _ in range(32):
        while not bit(a):
            d -= 1
            if d == 0:
                return 0
            a = d
        a += 23
        num = 1
        for _ in range(d - 1):
            num = (num << 1) | bit(a)
            a += 23
        if num < m:
            return num
    return 0


def test_python_furc_reproduces_mcrouters_published_values() -> None:
    assert _furc(b"sample", 100) == 97 and _furc(b"", 100) == 72 and _furc(b"sample", 1) == 0
    assert _furc(b"", 1 << 23) == 6173600 and _furc(b"sample", 1 << 23) == 5167780
    signed = bytes(range(128, 256)) + bytes(range(128))
    assert _furc(signed, 99999) == 31015 and _furc(bytes(reversed(signed)), 99999) == 67101


def missing_on_predicted_nodes(dsts: list[MemcachedServer], index_for) -> list[bytes]:  # type: ignore[no-untyped-def]
    per: dict[int, list[bytes]] = {}
    for k in KEYS:
        per.setdefault(index_for(k), []).append(k)
    gone = []
    for i, keys in per.items():
        found = get_many(dsts[i].host, dsts[i].port, keys)
        gone += [k for k in keys if found.get(k) != value(k)]
    return gone


@pytest.fixture(scope="module")
def gomemcache_get(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """gomemcache_get/ built with Go and the gomemcache module (None without Go or the module proxy:
    the gomemcache check falls back to zlib's crc32, which is Go's crc32.ChecksumIEEE)."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        return None
    work = tmp_path_factory.mktemp("gomemcache")
    shutil.copytree(Path(__file__).with_name("gomemcache_get"), work / "src")
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    out = subprocess.run(
        [go, "build", "-o", str(work / "gomemcache_get"), "."],
        cwd=work / "src",
        capture_output=True,
        env=env,
        timeout=300,
    )
    return work / "gomemcache_get" if out.returncode == 0 else None


def missing_via_gomemcache(binary: Path, dsts: list[MemcachedServer]) -> list[bytes]:
    out = subprocess.run(
        [str(binary), *(d.address for d in dsts)],
        input="\n".join(k.hex() for k in KEYS),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [bytes.fromhex(x) for x in out.split()]


def mcrouter_routing_key(k: bytes, salt: bytes) -> bytes:
    cut = k.find(b"|#|")
    return (k if cut < 0 else k[:cut]) + salt


@pytest.mark.parametrize("n", [3, 25])
def test_every_scheme_every_key_found_by_the_real_client(
    n: int, memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str], gomemcache_get: Path | None
) -> None:  # type: ignore[no-untyped-def]
    import zlib

    if n > 3 and warm_args:
        pytest.skip("one hashkit core (dumper-cpp/hashkit) places keys on both paths: 25 nodes on files only")
    src = memcached(memory_mb=64)
    set_many(src.host, src.port, [(k, value(k)) for k in KEYS])
    port = free_port()
    dsts = [memcached(host=f"127.0.0.{2 + i}", port=port, memory_mb=16, threads=1) for i in range(n)]
    missing: dict[str, int] = {}
    runs = 0

    def run(name: str, placement: str, check) -> None:  # type: ignore[no-untyped-def]
        nonlocal runs
        runs += 1
        warm(dumper_bin, tmp_path / f"w{runs}", src, dsts, placement, warm_args)
        missing[name] = len(check())
        flush(dsts)

    # twemproxy: the default pool (fnv1a_64 ketama) with a hash_tag, and md5 modula with weights
    listen = free_port()
    for name, extra in {
        "twemproxy ketama fnv1a_64 hash_tag": {"hash_tag": "{}"},
        "twemproxy modula md5 weights": {"hash": "md5", "distribution": "modula"},
    }.items():
        weighted = extra.get("distribution") == "modula"
        conf = tmp_path / f"nutcracker{runs}.yml"
        servers = [f"{d.host}:{d.port}:{1 + i % 3 if weighted else 1}" for i, d in enumerate(dsts)]
        conf.write_text(
            yaml.safe_dump({"cache": {"listen": f"127.0.0.1:{listen}", **extra, "servers": servers}})
        )
        run(
            name,
            f"twemproxy,config={conf},pool=cache",
            lambda c=conf: missing_via_nutcracker(tmp_path, dsts, c, listen),
        )

    run("libmemcached modula", "libmemcached", lambda: missing_via_pylibmc(dsts, {}))
    run(
        "libmemcached ketama",
        "libmemcached,distribution=ketama",
        lambda: missing_via_pylibmc(dsts, {"distribution": "consistent ketama"}),
    )
    run(
        "libmemcached ketama weighted",
        "libmemcached,distribution=ketama-weighted",
        lambda: missing_via_pylibmc(dsts, {"ketama_weighted": True}),
    )
    run(
        "pymemcache str keys, key_prefix",
        "pymemcache,prefix=app1:",
        lambda: missing_via_pymemcache(dsts, "str", b"app1:"),
    )
    run("pymemcache bytes keys", "pymemcache,keys=bytes", lambda: missing_via_pymemcache(dsts, "bytes"))
    if gomemcache_get is not None:
        run("gomemcache", "gomemcache", lambda: missing_via_gomemcache(gomemcache_get, dsts))
    else:
        run("gomemcache", "gomemcache", lambda: missing_on_predicted_nodes(dsts, lambda k: zlib.crc32(k) % n))
    # spymemcached (no Java here): cachewarm's own pure-Python ring, pinned to its published vectors
    ring = KetamaRing([Node(d.host, d.port) for d in dsts], "{host}:{port}")
    run("spymemcached", "spymemcached", lambda: missing_on_predicted_nodes(dsts, ring.index_for))

    conf = tmp_path / "mcrouter.json"
    pools = {"A": {"servers": [d.address for d in dsts]}}
    conf.write_text(
        json.dumps({"pools": pools, "route": {"type": "PoolRoute", "pool": "A", "hash": {"salt": "s1"}}})
    )
    run(
        "mcrouter Ch3 salt",
        f"mcrouter,config={conf},pool=A",
        lambda: missing_on_predicted_nodes(dsts, lambda k: _furc(mcrouter_routing_key(k, b"s1"), n)),
    )
    conf.write_text(
        json.dumps({"pools": pools, "route": {"type": "PoolRoute", "pool": "A", "hash": "Crc32"}})
    )
    run(
        "mcrouter Crc32",
        f"mcrouter,config={conf},pool=A",
        lambda: missing_on_predicted_nodes(
            dsts, lambda k: (zlib.crc32(mcrouter_routing_key(k, b"")) & 0x7FFFFFFF) % n
        ),
    )
    weights = [round(1.0 - 0.6 * i / n, 3) for i in range(n)]
    route = {"type": "PoolRoute", "pool": "A", "hash": {"hash_func": "WeightedCh3", "weights": weights}}
    conf.write_text(json.dumps({"pools": pools, "route": route}))
    run(
        "mcrouter WeightedCh3",  # hashkit's WeightedCh3 is pinned to mcrouter's published values
        f"mcrouter,config={conf},pool=A",
        lambda: missing_on_predicted_nodes(
            dsts, lambda k: _speedups.wch3_hash(mcrouter_routing_key(k, b""), weights)
        ),
    )
    assert len(missing) == 12
    assert missing == {k: 0 for k in missing}
    # the control: EVCache's ketama (the default) is not where nutcracker looks
    conf = tmp_path / "nutcracker0.yml"
    conf.write_text(
        yaml.safe_dump(
            {"cache": {"listen": f"127.0.0.1:{listen}", "servers": [f"{d.address}:1" for d in dsts]}}
        )
    )
    warm(dumper_bin, tmp_path / "control", src, dsts, "evcache", warm_args)
    assert len(missing_via_nutcracker(tmp_path, dsts, conf, listen)) > len(KEYS) // 3


def test_a_misconfigured_scheme_is_refused_before_any_item_is_sent(
    memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str]
) -> None:  # type: ignore[no-untyped-def]
    src = memcached(memory_mb=16)
    set_many(src.host, src.port, [(k, value(k)) for k in KEYS[:50]])
    port = free_port()
    dsts = [memcached(host=f"127.0.0.{2 + i}", port=port, memory_mb=16, threads=1) for i in range(3)]
    conf = tmp_path / "nutcracker.yml"
    conf.write_text(yaml.safe_dump({"cache": {"servers": [f"{d.address}:1" for d in dsts[:2]]}}))
    env = {**os.environ, "CACHEWARM_DUMP": str(dumper_bin)}
    base = ["warm", "--source", src.address, "--target", ",".join(d.address for d in dsts)]
    cases = {
        f"twemproxy,config={conf},pool=kache": "has no pool 'kache' (its pools: cache)",
        f"twemproxy,config={conf},pool=cache": f"does not list the destination(s) {dsts[2].address}",
        f"mcrouter,config={tmp_path / 'none.json'},pool=A": "No such file or directory",
        "libmemcached,distribution=maglev": "libmemcached distribution 'maglev'",
        "twemproxy,pool=cache": "twemproxy needs config=",
    }
    for i, (placement, message) in enumerate(cases.items()):
        r = subprocess.run(
            [*CLI, *base, "--workdir", str(tmp_path / f"w{i}"), "--placement", placement, *warm_args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert r.returncode == 2 and message in " ".join(r.stderr.split()), r.stderr
        assert not (tmp_path / f"w{i}").exists()  # not even a dump was started
    assert [int(d.stats()["curr_items"]) for d in dsts] == [0, 0, 0]


def test_verify_and_resume_follow_the_placement(
    memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str]
) -> None:  # type: ignore[no-untyped-def]
    src = memcached(memory_mb=32)
    set_many(src.host, src.port, [(k, value(k)) for k in KEYS])
    port = free_port()
    dsts = [memcached(host=f"127.0.0.{2 + i}", port=port, memory_mb=16, threads=1) for i in range(3)]
    warm(dumper_bin, tmp_path / "w", src, dsts, "pymemcache,keys=bytes", warm_args)
    env = {**os.environ, "CACHEWARM_DUMP": str(dumper_bin)}
    targets = ["--source", src.address, "--target", ",".join(d.address for d in dsts)]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, env=env)

    assert cli("verify", *targets, "--placement", "pymemcache,keys=bytes").returncode == 0
    wrong = cli("verify", *targets, "--placement", "pymemcache")  # str keys: other nodes
    assert wrong.returncode != 0 and "missing" in wrong.stdout
    again = cli(
        "warm",
        *targets,
        "--workdir",
        str(tmp_path / "w"),
        "--resume",
        "--placement",
        "gomemcache",
        *warm_args,
    )
    assert again.returncode != 0, again.stderr[-2000:]
    if not warm_args:  # the populator's state names the placement it was written with
        assert "gomemcache" in again.stderr and "pymemcache" in again.stderr, again.stderr[-2000:]
    else:  # a finished stream resumes as a no-op (not re-checked against the routing); the check fails
        assert "target is missing" in again.stderr, again.stderr[-2000:]
