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


class _Prefetch:
    def __init__(self) -> None:
        self.started = threading.Event()
        self.done = threading.Event()
        self.vector: Any = None


_lock = threading.Lock()
_pending: dict[Hashable, _Prefetch] = {}
_jobs: queue.SimpleQueue[tuple[_Prefetch, Callable[[], Any]]] = queue.SimpleQueue()
#: Prefetch threads of this process, waiting on `_jobs` between searches (daemons: a prefetch
#: its search gave up on never holds the command's exit), and the prefetches still embedding.
_threads = _busy = 0


def start(key: Hashable, embed: Callable[[], Any], wait_started: float = 0.0) -> None:
    """Run `embed()` on a prefetch thread; `take(key)` collects what it returns."""
    global _threads, _busy
    with _lock:
        if key in _pending or _busy >= MAX_PREFETCHING:
            return
        while len(_pending) >= MAX_PENDING:
            del _pending[next(iter(_pending))]
        job = _pending[key] = _Prefetch()
        _busy += 1
        spawn = _threads < _busy  # each prefetch in flight has a thread of its own
        _threads += spawn
    _jobs.put((job, embed))
    if spawn:
        threading.Thread(target=_work, name=THREAD_NAME, daemon=True).start()
    if wait_started > 0:
        job.started.wait(wait_started)


def _work() -> None:
    global _busy
    while True:
        job, embed = _jobs.get()
        job.started.set()
        try:
            job.vector = embed()
        except BaseException:  # the taker embeds again and reports the real error
            job.vector = None  # (and this thread lives on for the next prefetch)
        with _lock:
            _busy -= 1  # before `done`: the next prefetch finds this thread free
        job.done.set()


def pending(key: Hashable) -> bool:
    """Whether a prefetch of `key` was started and not taken yet (under way or done)."""
    return key in _pending


def running(key: Hashable) -> bool:
    """Whether the prefetch of `key` is still under way (False once done, or if none is)."""
    job = _pending.get(key)  # one dict read: no lock needed
    return job is not None and not job.done.is_set()


def take(key: Hashable) -> Any:
    """The prefetched vector for `key` (waited for), or None if there is none."""
    job = _pending.get(key)
    if job is None:
        return None
    job.done.wait()
    with _lock:
        if _pending.get(key) is job:
            del _pending[key]
    return job.vector


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's threads: it starts its own, with a fresh queue."""
    global _lock, _pending, _jobs, _threads, _busy
    _lock = threading.Lock()
    _pending = {}
    _jobs = queue.SimpleQueue()
    _threads = _busy = 0


os.register_at_fork(after_in_child=_after_fork_in_child)
