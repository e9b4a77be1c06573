"""A tiny HTTP proxy in front of moto's S3 server that injects S3's faults: `503 SlowDown` answers,
part uploads that fail with 500, listings that leave objects out (a torn listing), and GETs that
return fewer bytes than asked (an object listed but read partial). The clients talk to the proxy as
their S3 endpoint; everything it does not break it relays unchanged."""

from __future__ import annotations

import http.client
import random
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

SLOWDOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
INTERNAL = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message></Error>"
)
_CONTENTS = re.compile(rb"<Contents>.*?</Contents>", re.S)


@dataclass
class Faults:
    """What the proxy breaks; counters say what it did."""

    seed: int = 0
    # Every request answers 503 SlowDown with this probability (botocore retries it).
    slowdown: float = 0.0
    # UploadPart requests of keys containing this text answer 500, this many times in all.
    fail_parts_of: str | None = None
    fail_parts: int = 0
    # The first `torn_listings` listings leave out every object but the first `listed_keep`.
    torn_listings: int = 0
    listed_keep: int = 1
    # The first `short_reads` ranged GETs of data objects return half the bytes asked.
    short_reads: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    # Requests relayed or answered, by HTTP method (what went through the proxy at all).
    requests: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def take(self, what: str, budget_attr: str) -> bool:
        with self.lock:
            left = getattr(self, budget_attr)
            if left <= 0:
                return False
            setattr(self, budget_attr, left - 1)
            self.counts[what] = self.counts.get(what, 0) + 1
            return True

    def roll(self, p: float, what: str) -> bool:
        with self.lock:
            hit = p > 0 and self.rng.random() < p
            if hit:
                self.counts[what] = self.counts.get(what, 0) + 1
            return hit


def _handler(upstream: tuple[str, int], faults: Faults) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def _relay(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            url = urlsplit(self.path)
            query = parse_qs(url.query, keep_blank_values=True)
            with faults.lock:
                faults.requests[self.command] = faults.requests.get(self.command, 0) + 1
            if faults.roll(faults.slowdown, "slowdown"):
                return self._answer(503, SLOWDOWN)
            if (
                self.command == "PUT"
                and "partNumber" in query
                and faults.fail_parts_of is not None
                and faults.fail_parts_of in url.path
                and faults.take("part_failed", "fail_parts")
            ):
                return self._answer(500, INTERNAL)
            conn = http.client.HTTPConnection(*upstream, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            out_headers = [
                (k, v) for k, v in resp.getheaders() if k.lower() not in ("transfer-encoding", "connection")
            ]
            status = resp.status
            conn.close()
            is_listing = self.command == "GET" and query.get("list-type") == ["2"]
            if is_listing and status == 200 and faults.take("torn_listing", "torn_listings"):
                kept = 0

                def drop(m: re.Match[bytes]) -> bytes:
                    nonlocal kept
                    kept += 1
                    return m.group(0) if kept <= faults.listed_keep else b""

                data = _CONTENTS.sub(drop, data)
            ranged = self.command == "GET" and self.headers.get("Range") and not url.path.endswith("/DONE")
            if ranged and status == 206 and len(data) > 1 and faults.take("short_read", "short_reads"):
                data = data[: len(data) // 2]
                out_headers = [(k, v) for k, v in out_headers if k.lower() != "content-range"]
            self.send_response(status)
            for k, v in out_headers:
                if k.lower() != "content-length" or self.command == "HEAD":
                    self.send_header(k, v)
            if self.command == "HEAD":  # no body: the object's length stays the upstream's
                self.end_headers()
                return
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

    return Handler


@contextmanager
def s3_proxy(upstream_url: str, faults: Faults) -> Iterator[str]:
    """Serve the proxy on 127.0.0.1 (a free port) in front of `upstream_url`; yields its URL."""
    up = urlsplit(upstream_url)
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), _handler((up.hostname or "127.0.0.1", up.port or 80), faults)
    )
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="s3-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
