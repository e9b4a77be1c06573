"""The real dumper under faults: `kill -9` at random moments then `--resume`; the source memcached
restarted mid-dump (the dump fails loudly, a re-run succeeds); a deliberately slow output while the
crawl reader buffers and spills, killed and resumed."""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

from cachewarm.datapath import format as df
from cachewarm.testing.memcached import MemcachedServer

from tests.dumper.dumputil import dump_cmd, load_numbered, run_dump
from tests.faults.harness import Tally, kill9, survivors, tmp_leftovers, trials

N_ITEMS = 6000
VALUE_SIZE = 64
# Rate-limited with small chunks/parts so a kill can land in every phase (crawl, dump,
# reconciliation, publish) and a trial still takes about a second.
SLOW = [
    *("--key-file-size", "8k", "--data-file-size", "8k"),
    *("--batch", "40", "--max-items-per-second", "8000"),
]


def expected_keys() -> set[bytes]:
    return {b"k%d" % i for i in range(N_ITEMS)}


def audit_dump(out: Path, t: Tally, trial: int, expect_done: bool) -> None:
    """Every published file verifies, no key twice, values/flags as loaded, DONE lists exactly the
    published files, all keys present (when expect_done)."""
    names = sorted(p.name for p in out.iterdir() if df.parse_name(p.name) is not None)
    seen: dict[bytes, int] = {}
    for n in names:
        v = df.check_file(out / n)
        if not v.ok or v.data is None:
            t.corrupt += 1
            t.note(f"trial {trial}: published {n} does not verify: {v.status} {v.reason}")
            continue
        for r in df.iter_records(v.data):
            seen[r.key] = seen.get(r.key, 0) + 1
            i = int(r.key[1:])
            if bytes(r.value) != b"x" * VALUE_SIZE or r.flags != i & 0xFFFF or r.exptime != -1:
                t.corrupt += 1
                t.note(f"trial {trial}: {r.key!r} dumped wrong (flags {r.flags}, exptime {r.exptime})")
    dup = sum(c - 1 for c in seen.values() if c > 1)
    if dup:
        t.corrupt += dup
        t.note(f"trial {trial}: {dup} keys published twice")
    done = out / "DONE"
    if expect_done:
        missing = expected_keys() - set(seen)
        if missing:
            t.lost += len(missing)
            t.note(f"trial {trial}: {len(missing)} keys missing, e.g. {sorted(missing)[:3]!r}")
        if not done.exists():
            t.lost += 1
            t.note(f"trial {trial}: no DONE after a successful run")
        else:
            m = df.read_manifest(done)
            if sorted(f.name for f in m.files) != names:
                t.corrupt += 1
                t.note(f"trial {trial}: DONE does not list exactly the published files")
    elif done.exists():
        t.corrupt += 1
        t.note(f"trial {trial}: DONE written by a dump that should have failed")


def test_dumper_kill9_then_resume(dumper_bin: Path, memcached, tmp_path: Path, tally) -> None:
    t = tally("dumper kill -9 → --resume")
    srv: MemcachedServer = memcached()
    load_numbered(srv, N_ITEMS, value_size=VALUE_SIZE)
    for trial in range(trials()):
        rng = random.Random(7000 + trial)
        out = tmp_path / f"t{trial}"
        kills = 2 if trial % 3 == 2 else 1  # every third trial also kills the resumed run
        for k in range(kills):
            args = SLOW if k == 0 else ["--resume", *SLOW]
            if k > 0 and not (out / "keys" / "META").exists():
                args = SLOW
            proc = subprocess.Popen(
                dump_cmd(dumper_bin, srv, out, *args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            time.sleep(rng.uniform(0.0, 0.9))
            leftover_procs = survivors(kill9(proc), grace=2.0)
            t.leaked += len(leftover_procs)
        resume = (out / "keys" / "META").exists()  # killed before META: nothing to resume, start over
        r = run_dump(dumper_bin, srv, out, *(["--resume"] if resume else []))
        t.trials += 1
        if r.returncode != 0:
            t.lost += N_ITEMS
            t.note(f"trial {trial}: resume exited {r.returncode}: {r.stderr.strip()[-300:]}")
            continue
        audit_dump(out, t, trial, expect_done=True)
        left = tmp_leftovers(out)
        if left:
            t.leaked += len(left)
            t.note(f"trial {trial}: temp files left after the resumed run: {left[:3]}")
    t.check()


def _wait_items(proc: subprocess.Popen[str], n: int) -> bool:
    assert proc.stdout is not None
    return any(line.startswith("{") and int(json.loads(line).get("items", 0)) >= n for line in proc.stdout)


def test_source_restart_mid_dump_fails_loudly_then_rerun_succeeds(
    dumper_bin: Path, memcached, tmp_path: Path, tally
) -> None:
    t = tally("source memcached restarted mid-dump → loud failure, re-run")
    srv: MemcachedServer = memcached()
    for trial in range(trials()):
        rng = random.Random(8000 + trial)
        if trial:
            srv.restart()  # each trial starts from a fresh, fully loaded source
        load_numbered(srv, N_ITEMS, value_size=VALUE_SIZE)
        out = tmp_path / f"t{trial}"
        # ~2 s of dumping at this rate: the crash lands while the dumper is still reading.
        slower = [*SLOW[:-1], "3000"]
        proc = subprocess.Popen(
            [*dump_cmd(dumper_bin, srv, out, *slower), "--progress-interval", "0.05"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_items(proc, rng.randint(1, N_ITEMS // 2))
        still_running = proc.poll() is None
        # A crash and a restart (SIGKILL: a SIGTERM lets memcached finish serving the dumper first,
        # and then the dump is rightly complete). It comes back empty on the same port; refill it.
        srv.kill()
        srv.start()
        load_numbered(srv, N_ITEMS, value_size=VALUE_SIZE)
        _, err = proc.communicate(timeout=120)
        if not still_running:  # not this scenario: counted out, noted
            t.note(f"trial {trial}: the dumper had finished before the crash (rc {proc.returncode})")
            continue
        t.trials += 1
        # Loud: non-zero, a message naming the cause, no DONE; whatever was published verifies.
        if proc.returncode == 0 or "no DONE" not in err or "restart" not in err:
            t.corrupt += 1
            t.note(f"trial {trial}: restart not loud: rc {proc.returncode}, {err.strip()[-300:]!r}")
        audit_dump(out, t, trial, expect_done=False)
        left = tmp_leftovers(out)
        t.leaked += len(left)
        if left:
            t.note(f"trial {trial}: temp files left by the failed dump: {left[:3]}")
        # --resume of a dump of the old incarnation must refuse; a fresh re-run must succeed.
        if (out / "keys" / "META").exists():
            r = run_dump(dumper_bin, srv, out, "--resume")
            if r.returncode == 0:
                t.corrupt += 1
                t.note(f"trial {trial}: --resume continued a dump of a restarted source")
        again = tmp_path / f"t{trial}-rerun"
        r = run_dump(dumper_bin, srv, again)
        if r.returncode != 0:
            t.lost += N_ITEMS
            t.note(f"trial {trial}: re-run failed: {r.stderr.strip()[-300:]}")
            continue
        audit_dump(again, t, trial, expect_done=True)
    t.check()


def test_slow_output_spill_kill9_then_resume(dumper_bin: Path, memcached, tmp_path: Path, tally) -> None:
    """Every fsync of the output takes 20 ms and the crawl reader has 1 MiB: it spills the rest of the
    crawl to --spill-dir (never the output). Killed at a random moment, resumed at full speed: every
    key once, DONE complete, no spill file or temporary file left anywhere."""
    t = tally("slow output, crawl reader spilling, kill -9 → --resume")
    srv: MemcachedServer = memcached()
    n = 40_000
    load_numbered(srv, n, value_size=VALUE_SIZE)
    slow = [
        *("--key-file-size", "16k", "--crawl-buffer", "1M"),
        *("--debug-sync-delay-us", "20000", "--debug-write-delay-us", "200"),
    ]
    for trial in range(trials()):
        rng = random.Random(9000 + trial)
        out = tmp_path / f"t{trial}"
        spill = tmp_path / f"spill{trial}"
        spill.mkdir()
        proc = subprocess.Popen(
            dump_cmd(dumper_bin, srv, out, *slow, "--spill-dir", str(spill)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.05, 1.5))
        t.leaked += len(survivors(kill9(proc), grace=2.0))
        resume = (out / "keys" / "META").exists()
        r = run_dump(dumper_bin, srv, out, *(["--resume"] if resume else []), "--spill-dir", str(spill))
        t.trials += 1
        if r.returncode != 0:
            t.lost += n
            t.note(f"trial {trial}: resume exited {r.returncode}: {r.stderr.strip()[-300:]}")
            continue
        seen: dict[bytes, int] = {}
        for f in df.read_manifest(out / "DONE").files:
            v = df.check_file(out / f.name)
            if not v.ok or v.data is None:
                t.corrupt += 1
                t.note(f"trial {trial}: {f.name} does not verify")
                continue
            for rec in df.iter_records(v.data):
                seen[rec.key] = seen.get(rec.key, 0) + 1
        t.corrupt += sum(c - 1 for c in seen.values() if c > 1)
        missing = {b"k%d" % i for i in range(n)} - set(seen)
        t.lost += len(missing)
        if missing:
            t.note(f"trial {trial}: {len(missing)} keys missing")
        done = json.loads((out / "DONE").read_text())
        if done.get("complete") is not True:
            t.corrupt += 1
            t.note(f"trial {trial}: DONE not complete: {done.get('incomplete_reason')}")
        left = tmp_leftovers(out) + [p.name for p in spill.iterdir()]
        t.leaked += len(left)
        if left:
            t.note(f"trial {trial}: left behind: {left[:3]}")
    t.check()
