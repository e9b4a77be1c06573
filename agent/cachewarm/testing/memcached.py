"""Start and stop real memcached servers on 127.0.0.1 (tests, benchmarks, `cachewarm demo`)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class MemcachedServer:
    """A memcached process this code started; `stop()` (or the context manager) ends it."""

    memory_mb: int = 256
    threads: int = 2
    max_item_size: str | None = None  # e.g. "8m"
    extra_args: list[str] = field(default_factory=list)
    port: int = 0
    host: str = "127.0.0.1"
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> MemcachedServer:
        if self.proc is not None and self.proc.poll() is None:
            # A second start would leak the first process (and its memory) when stop() ends the second.
            raise RuntimeError(f"memcached on port {self.port} is already started")
        binary = shutil.which("memcached") or "/usr/bin/memcached"
        if self.port == 0:
            self.port = free_port()
        args = [
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
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"memcached exited at start (port {self.port}): {err}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2) as s:
                    s.sendall(b"version\r\n")
                    if s.recv(64).startswith(b"VERSION"):
                        return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"memcached did not answer on port {self.port}")

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
        """SIGKILL, for fault tests."""
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
