"""Query embeddings started ahead of time, in a thread, and collected by the search that asked."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Hashable
from typing import Any

#: Prefetched vectors nobody took yet are dropped beyond this many (oldest first).
MAX_PENDING = 8
#: Prefetches embedding at once; past that a search embeds its own query (so bursts never queue).
MAX_PREFETCHING = 2
THREAD_NAME = "memoryd-query-prefetch"

_lock = threading.Lock()
_pending: dict[Hashable, _Prefetch] = {}
_slots = threading.BoundedSemaphore(MAX_PREFETCHING)
_jobs: queue.SimpleQueue[tuple[_Prefetch, Callable[[], Any], threading.BoundedSemaphore]] = (
    queue.SimpleQueue()
)
_idle = 0  # prefetch threads waiting for a job nobody has claimed (at most MAX_PREFETCHING)


class _Prefetch:
    def __init__(self) -> None:
        self.started = threading.Event()
        self.done = threading.Event()
        self.vector: Any = None


def start(key: Hashable, embed: Callable[[], Any], wait_started: float = 0.0) -> None:
    """Run `embed()` on a prefetch thread; `take(key)` collects what it returns."""
    global _idle
    with _lock:
        slots = _slots  # released by the thread that runs the job, whatever `_slots` is by then
        if key in _pending or not slots.acquire(blocking=False):
            return
        while len(_pending) >= MAX_PENDING:
            del _pending[next(iter(_pending))]
        job = _pending[key] = _Prefetch()
        # each prefetch in flight has a thread of its own (slots bound them to the threads)
        spawn = _idle == 0
        if not spawn:
            _idle -= 1
    _jobs.put((job, embed, slots))
    if spawn:
        threading.Thread(target=_work, name=THREAD_NAME, daemon=True).start()
    if wait_started > 0:
        job.started.wait(wait_started)


def _work() -> None:
    global _idle
    while True:
        job, embed, slots = _jobs.get()
        job.started.set()
        try:
            job.vector = embed()
        except BaseException:  # the taker embeds again and reports the real error
            job.vector = None  # (and this thread lives on: `start` counts on it)
        with _lock:
            _idle += 1  # before the slot is free: the next prefetch finds this thread
        slots.release()
        job.done.set()


def pending(key: Hashable) -> bool:
    """Whether a prefetch of `key` was started and not taken yet (under way or done)."""
    return key in _pending


def running(key: Hashable) -> bool:
    """Whether the prefetch of `key` is still under way (False once done, or if none is)."""
    job = _pending.get(key)  # one dict read: no lock needed
    return job is not None and not job.done.is_set()


#: What `take` returns when its `timeout` passed first (the prefetch stays for a later take).
NOT_YET: Any = object()


def take(key: Hashable, timeout: float | None = None) -> Any:
    """The prefetched vector for `key` (waited for), None if there is none, `NOT_YET` on timeout."""
    with _lock:
        job = _pending.get(key)
    if job is None:
        return None
    if not job.done.wait(timeout):
        return NOT_YET
    with _lock:
        if _pending.get(key) is job:
            del _pending[key]
    return job.vector


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's threads: it starts its own, with a fresh queue."""
    global _lock, _pending, _slots, _jobs, _idle
    _lock = threading.Lock()
    _pending = {}
    _slots = threading.BoundedSemaphore(MAX_PREFETCHING)
    _jobs = queue.SimpleQueue()
    _idle = 0


os.register_at_fork(after_in_child=_after_fork_in_child)
