"""The process pools of the data path (the populator's workers, the warm's final check, verify): each
worker dies with its parent and keeps one read buffer for the data files it reads."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from cachewarm.datapath.format import ReadBuffer

# A pool worker's read buffer, made by worker_init: a worker applies one file at a time, and reusing
# the buffer saves the page faults of reading every file into fresh memory. None in other processes.
_worker_buffer: ReadBuffer | None = None


def read_buffer() -> ReadBuffer | None:
    """This pool worker's read buffer (None outside a pool worker: read into fresh memory)."""
    return _worker_buffer


def worker_init() -> None:
    """Give a pool worker its read buffer and tie its life to its parent: a kill -9 of the populator
    must not leave workers behind on the node (PR_SET_PDEATHSIG on Linux; a parent-pid watch elsewhere)."""
    global _worker_buffer
    _worker_buffer = ReadBuffer()
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


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of `workers` processes started with worker_init."""
    # fork starts workers in milliseconds (spawn costs ~0.3 s of imports each); it is only safe
    # while this process has no other threads (e.g. `warm`'s output pumps), else forkserver.
    ctx = multiprocessing.get_context("fork" if threading.active_count() == 1 else "forkserver")
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=worker_init)
