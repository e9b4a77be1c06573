"""The process pools of the data path (the populator's workers, the warm's final check, verify): each
worker dies with its parent."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor


def worker_init() -> None:
    """Tie a pool worker's life to its parent: a kill -9 of the populator must not leave workers
    behind on the node (PR_SET_PDEATHSIG on Linux; a parent-pid watch elsewhere). A Ctrl-C reaches
    the whole process group: the parent reports it (one line, exit 130) and stops the run; a worker
    just ends, without the traceback multiprocessing would print for its KeyboardInterrupt."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # a background job ignores it: so do we
        signal.signal(signal.SIGINT, _quiet_exit)
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
            raise OSError(ctypes.get_errno(), "prctl failed")
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
        return
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _quiet_exit(signum: int, frame: object) -> None:
    os._exit(128 + signum)


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of `workers` processes started with worker_init."""
    # fork starts workers in milliseconds (spawn costs ~0.3 s of imports each); it is only safe
    # while this process has no other threads (e.g. `warm`'s output pumps), else forkserver.
    ctx = multiprocessing.get_context("fork" if threading.active_count() == 1 else "forkserver")
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=worker_init)


def _ready() -> None:
    pass


def started_pool(workers: int) -> ProcessPoolExecutor:
    """`process_pool` with its workers running now: called while this process has no other thread,
    they are forked (in milliseconds) instead of started by a fork server (measured in `warm`: the
    first file waited ~0.4 s for workers importing the data path, and the populator never caught up
    with the dumper)."""
    pool = process_pool(workers)
    pool.submit(_ready).result()  # a fork pool starts all its workers at the first task
    return pool
