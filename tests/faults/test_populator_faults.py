"""The real populator (`cachewarm populate`, worker processes, state file) under faults: `kill -9` at
random moments then a restart; the destination memcached killed and restarted mid-populate."""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from cachewarm.datapath.format import Record
from cachewarm.datapath.writer import DirWriter
from cachewarm.testing.memcached import MemcachedServer

from tests.faults.harness import (
    CLI,
    Tally,
    children_of,
    fetch_all,
    kill9,
    survivors,
    tmp_leftovers,
    trials,
    wait_until,
)

FILES = 30
PER_FILE = 200


@dataclass(frozen=True)
class DumpDir:
    path: Path
    records: dict[bytes, Record]


def make_dump(path: Path, files: int = FILES, per_file: int = PER_FILE, node: str = "src") -> DumpDir:
    far = int(time.time()) + 3600
    w = DirWriter(path, node=node)
    recs: dict[bytes, Record] = {}
    for f in range(files):
        batch = []
        for j in range(per_file):
            i = f * per_file + j
            r = Record(b"key:%d" % i, (i * 2654435761) & 0xFFFFFFFF, -1 if i % 2 else far, b"v%d-" % i * 8)
            batch.append(r)
            recs[r.key] = r
        w.write(f, 0, batch)
    w.done()
    return DumpDir(path, recs)


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> DumpDir:
    return make_dump(tmp_path_factory.mktemp("dump") / "vol")


def populate_cmd(d: DumpDir, dst: MemcachedServer, state: Path, rate: int) -> list[str]:
    return [
        *CLI,
        "populate",
        *("--from", str(d.path), "--to", dst.address, "--state-file", str(state)),
        *("--workers", "2", "--poll-interval", "0.05", "--max-items-per-second", str(rate)),
        *("--destination-timeout", "60", "--bad-file-timeout", "30", "--json"),
        "--accept-no-recheck",  # no source here: the re-check's faults are the live-traffic scenario's
    ]


def audit_destination(d: DumpDir, dst: MemcachedServer, t: Tally, trial: int) -> None:
    got = fetch_all(dst, d.records)
    for k, r in d.records.items():
        it = got.get(k)
        if it is None:
            t.lost += 1
            if t.lost < 4:
                t.note(f"trial {trial}: {k!r} missing in the destination")
        elif it.value != bytes(r.value) or it.flags != r.flags or (r.exptime == -1) != (it.ttl == -1):
            t.corrupt += 1
            t.note(f"trial {trial}: {k!r} wrong in the destination ({it.flags}, ttl {it.ttl})")


def test_populator_kill9_then_restart(dump: DumpDir, memcached, tmp_path: Path, tally) -> None:
    t = tally("populator kill -9 → restart")
    for trial in range(trials()):
        rng = random.Random(9000 + trial)
        dst = memcached(memory_mb=64)
        state = tmp_path / f"t{trial}" / "state.json"
        kills = 2 if trial % 3 == 2 else 1
        for _ in range(kills):
            proc = subprocess.Popen(
                populate_cmd(dump, dst, state, rate=6000), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            # Startup (imports, spawning workers) is ~0.5-1 s; the writes then take ~1 s.
            time.sleep(rng.uniform(0.2, 2.0))
            # Orphaned pool workers are test_populator_workers_die_with_it's business; end any here
            # so this scenario measures what reaches the destination.
            for p in kill9(proc):
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()
        r = subprocess.run(
            populate_cmd(dump, dst, state, rate=1_000_000), capture_output=True, text=True, timeout=300
        )
        t.trials += 1
        if r.returncode != 0:
            t.lost += len(dump.records)
            t.note(f"trial {trial}: restart exited {r.returncode}: {r.stderr.strip()[-300:]}")
            continue
        summary = json.loads(r.stdout.strip().splitlines()[-1])
        if summary["records"] != len(dump.records):
            t.lost += abs(len(dump.records) - summary["records"])
            t.note(f"trial {trial}: summary says {summary['records']} records")
        # Nothing else writes here: an NS on the re-run is our own earlier write, never a live one.
        if summary["already_present"]:
            t.corrupt += summary["already_present"]
            t.note(f"trial {trial}: {summary['already_present']} of our own writes counted as live writes")
        audit_destination(dump, dst, t, trial)
        left_tmp = tmp_leftovers(state.parent)
        t.leaked += len(left_tmp)
        dst.stop()
    t.check()


def test_destination_restart_mid_populate(dump: DumpDir, memcached, tmp_path: Path, tally) -> None:
    t = tally("destination memcached killed+restarted mid-populate")
    for trial in range(trials()):
        rng = random.Random(9500 + trial)
        dst = memcached(memory_mb=64)
        state = tmp_path / f"t{trial}" / "state.json"
        proc = subprocess.Popen(
            populate_cmd(dump, dst, state, rate=5000),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        target = rng.randint(1, FILES - 2)
        hit = False
        for line in proc.stdout:
            ev = json.loads(line)
            if ev.get("event") == "file" and ev["files_consumed"] >= target:
                hit = True
                break
        if hit:
            dst.kill()
            time.sleep(rng.uniform(0.0, 1.0))
            dst.start()  # same port, empty
        out, err = proc.communicate(timeout=300)
        t.trials += 1
        if not hit:
            t.note(f"trial {trial}: the populator finished before the restart")
        if proc.returncode != 0:
            t.lost += len(dump.records)
            t.note(f"trial {trial}: populator exited {proc.returncode}: {err.strip()[-300:]}")
            continue
        summary = json.loads(out.strip().splitlines()[-1])
        if hit and summary["restarts_detected"] < 1:
            t.note(f"trial {trial}: restart not detected")
        audit_destination(dump, dst, t, trial)
        dst.stop()
    t.check()


# Found by this suite (workers outlived a kill -9 indefinitely); fixed in 1eb3e22 (PR_SET_PDEATHSIG).
def test_populator_workers_die_with_it(dump: DumpDir, memcached, tmp_path: Path, tally) -> None:
    t = tally("populator kill -9: no orphaned worker processes")
    for trial in range(trials()):
        rng = random.Random(9300 + trial)
        dst = memcached(memory_mb=64)
        proc = subprocess.Popen(
            populate_cmd(dump, dst, tmp_path / f"t{trial}.json", rate=6000),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # Wait for the pool to exist, then kill at a random moment of the run.
        wait_until(lambda p=proc: len(children_of(p)) >= 2, timeout=20)
        time.sleep(rng.uniform(0.0, 0.8))
        # Generous: under load a worker can take seconds to notice; an orphan stays forever.
        left = survivors(kill9(proc), grace=15.0)
        t.trials += 1
        if left:
            t.leaked += len(left)
            t.note(f"trial {trial}: {len(left)} processes alive 15 s after the populator's kill -9")
        dst.stop()
    t.check()
