"""The populator's rate limit: items/s and bytes/s, one limiter per worker (the config splits the
limits over the workers). Used by the v1 loop (worker.py) and the v2 sender's Python twin (send_v2.py);
the C sender (_v2send.c) paces by the same rule."""

from __future__ import annotations

import time


class RateLimiter:
    """Items/s and bytes/s (either None = unlimited): sleeps once the batches sent so far are ahead
    of the tighter of the two."""

    def __init__(self, rate: float | None, byte_rate: float | None = None) -> None:
        self.rate = rate
        self.byte_rate = byte_rate
        self.start = time.monotonic()
        self.count = 0
        self.nbytes = 0

    def take(self, n: int, nbytes: int = 0) -> None:
        if not self.rate and not self.byte_rate:
            return
        self.count += n
        self.nbytes += nbytes
        due = max(
            self.count / self.rate if self.rate else 0.0,
            self.nbytes / self.byte_rate if self.byte_rate else 0.0,
        )
        ahead = due - (time.monotonic() - self.start)
        if ahead > 0:
            time.sleep(ahead)
