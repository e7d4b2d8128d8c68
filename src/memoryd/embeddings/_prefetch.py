"""Query embeddings started ahead of time, in a thread, and collected by the search that asked.

A search knows its query before it needs the query's vector: a one-off search first syncs the
index and imports numpy, a warm one runs its keyword side. `start` embeds the query meanwhile
on a daemon thread (the local engines release the GIL while they compute), `take` collects
the vector, waiting for it if it is still under way. Used by the local model's engines
(`local.LocalE5Provider.prefetch_query`); nothing here imports numpy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

#: Prefetched vectors nobody took yet are dropped beyond this many (oldest first).
MAX_PENDING = 8
#: Prefetches embedding at once; past that a search embeds its own query when it gets to it
#: (a burst of concurrent searches under `serve` does not start a thread each).
MAX_PREFETCHING = 2

_lock = threading.Lock()
_pending: dict[Hashable, _Prefetch] = {}
_slots = threading.BoundedSemaphore(MAX_PREFETCHING)


class _Prefetch:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.vector: Any = None


def start(key: Hashable, embed: Callable[[], Any]) -> None:
    """Run `embed()` (loading its engine first if need be) in a daemon thread; `take(key)`
    collects what it returns. (`embed` holds the provider's query priority itself.)

    It embeds on its own thread only: the caller keeps the other core busy. A failure is left
    for the taker, who embeds again and reports the real error.
    """
    with _lock:
        if key in _pending or not _slots.acquire(blocking=False):
            return
        while len(_pending) >= MAX_PENDING:
            del _pending[next(iter(_pending))]
        job = _pending[key] = _Prefetch()

    def run() -> None:
        try:
            job.vector = embed()
        except Exception:  # the taker embeds again and reports the real error
            job.vector = None
        finally:
            _slots.release()
            job.done.set()

    threading.Thread(target=run, name="memoryd-query-prefetch", daemon=True).start()


def take(key: Hashable) -> Any:
    """The prefetched vector for `key` (waiting for it if under way), or None if none was."""
    with _lock:
        job = _pending.pop(key, None)
    if job is None:
        return None
    job.done.wait()
    return job.vector
