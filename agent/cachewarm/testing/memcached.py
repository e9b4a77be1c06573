"""Start and stop real memcached servers on 127.0.0.1 (tests, benchmarks, `cachewarm demo`), of a
given release: `memcached_binary("1.6.45")` finds its binary (see there)."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# Where `make memcached-versions` (tests/memcached/build.sh) puts the releases it builds.
REPO_BUILDS = Path(__file__).resolve().parents[3] / "build" / "memcached"
# Overrides REPO_BUILDS: a directory holding <version>/memcached.
BUILDS_ENV = "CACHEWARM_MEMCACHED_DIR"


class MemcachedNotFound(LookupError):
    """No binary of the asked release: the message says where it was looked for and how to build it."""


@functools.cache
def binary_version(binary: str) -> str | None:
    """The release a memcached binary reports (`memcached -V`), or None if it does not run."""
    try:
        out = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return None
    parts = out.split()
    return parts[1] if len(parts) == 2 and parts[0] == "memcached" else None


def memcached_binary(version: str | None = None) -> str:
    """The binary of memcached `version` (None: the one on PATH): `$CACHEWARM_MEMCACHED_DIR/<v>/memcached`,
    else `build/memcached/<v>/memcached`, else the `memcached` on PATH if it is that release
    (Debian 12's package is 1.6.18). Each candidate's `-V` must name the release."""
    system = shutil.which("memcached") or "/usr/bin/memcached"
    if version is None:
        return system
    builds = Path(os.environ.get(BUILDS_ENV) or REPO_BUILDS)
    candidates = [str(builds / version / "memcached"), system]
    for c in candidates:
        if Path(c).is_file() and binary_version(c) == version:
            return c
    raise MemcachedNotFound(
        f"memcached {version} not found (looked at {', '.join(candidates)}): run "
        f"`make memcached-versions` (tests/memcached/build.sh {version} build) or set {BUILDS_ENV}"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PortTaken(RuntimeError):
    """The port was taken by another process between free_port() and memcached's bind."""


def _parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


@dataclass
class MemcachedServer:
    """A memcached process this code started; `stop()` (or the context manager) ends it."""

    memory_mb: int = 256
    threads: int = 2
    max_item_size: str | None = None  # e.g. "8m"
    extra_args: list[str] = field(default_factory=list)
    port: int = 0
    host: str = "127.0.0.1"
    # The memcached binary (see memcached_binary); None = the one on PATH.
    binary: str | None = None
    # A command the server is started under, e.g. ["faketime", "-f", "-600s"] (a clock 600 s behind).
    launcher: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> MemcachedServer:
        if self.proc is not None and self.proc.poll() is None:
            # A second start would leak the first process (and its memory) when stop() ends the second.
            raise RuntimeError(f"memcached on port {self.port} is already started")
        if self.port != 0:
            return self._start_once()
        # A port from free_port() is free only until someone binds it: another test process (several
        # suites, or pytest-xdist workers, share this host) may take it first. Then try another.
        for attempt in range(5):
            self.port = free_port()
            try:
                return self._start_once()
            except PortTaken:
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self) -> MemcachedServer:
        binary = self.binary or memcached_binary()
        args = [
            *self.launcher,
            binary,
            "-l",
            self.host,
            "-p",
            str(self.port),
            "-U",
            "0",
            "-m",
            str(self.memory_mb),
            "-t",
            str(self.threads),
            "-c",
            "4096",
        ]
        if self.max_item_size:
            args += ["-I", self.max_item_size]
        if os.geteuid() == 0:  # memcached refuses to run as root without -u
            args += ["-u", "root"]
        args += self.extra_args
        # stderr into an unnamed file, not a pipe: nobody reads a pipe while the server runs, and a
        # memcached that fills one (warnings, -v) would block in write() and stall every test using it.
        with tempfile.TemporaryFile() as errors:  # the server keeps its own descriptor
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=errors)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    errors.seek(0)
                    err = errors.read().decode(errors="replace")
                    self.proc = None
                    if "Address already in use" in err:
                        raise PortTaken(f"memcached could not listen on port {self.port}: {err}")
                    raise RuntimeError(f"memcached exited at start (port {self.port}): {err}")
                try:
                    with socket.create_connection((self.host, self.port), timeout=0.2) as s:
                        s.sendall(b"version\r\n")
                        if s.recv(64).startswith(b"VERSION"):
                            break
                except OSError:
                    time.sleep(0.02)
            else:
                self.stop()
                raise RuntimeError(f"memcached did not answer on port {self.port}")
        # The server that answered may be another process's that took the port first (ours then exits
        # at bind): the answering server must be ours (or, under a launcher, our process's child).
        pid = int(self.stats().get("pid", "0"))
        if pid != self.proc.pid and _parent_pid(pid) != self.proc.pid:
            self.kill()
            raise PortTaken(f"port {self.port} answered from another process (pid {pid})")
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: for fault tests, and a fast teardown (a graceful stop takes memcached ~0.5 s)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        """Stop and start again on the same port: memcached comes back empty."""
        self.stop()
        self.start()

    def __enter__(self) -> MemcachedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def command(self, line: bytes, until: bytes = b"END\r\n") -> bytes:
        """Send one text command and read until `until` (small replies: stats, version)."""
        with socket.create_connection((self.host, self.port), timeout=10) as s:
            s.sendall(line)
            buf = b""
            while not buf.endswith(until):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            return buf

    def stats(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for ln in self.command(b"stats\r\n").decode().splitlines():
            parts = ln.split(" ", 2)
            if len(parts) == 3 and parts[0] == "STAT":
                out[parts[1]] = parts[2]
        return out
