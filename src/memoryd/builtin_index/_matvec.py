"""The in-memory KNN's matrix-vector product on two cores.

A search's exact KNN is one product of the index's vectors with the query's: at 12.7k × 384
float32 it streams 19.5 MB and took ~2.0 ms on one core here, because memoryd limits BLAS to
one thread per caller (`embeddings.local._limit_blas_threads`: document embedding runs its own
workers, each on one BLAS thread). The product's rows are independent, so half of them go to a
helper thread that waits for the next search (waking it takes ~0.05 ms; starting a thread per
search cost 1.4–2.7 ms, `embeddings/_prefetch.py`) while the caller computes the other half:
~1.3 ms (`bench/bench_builtin_index.py`). numpy releases the GIL inside the product, so both
halves run at once; each row's dot product is bit for bit the one it would be unsplit (tested).

One helper serves one search at a time: a search that finds it busy (concurrent searches under
`serve`) computes its whole product itself, as does a product too small to be worth a wake-up.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
else:
    from ..lazy import numpy as np

#: Below this many matrix elements (~1M: ~2,700 vectors of 384 dimensions, 0.2 ms on one
#: core) the product is computed whole: the helper's wake-up would be a visible share of it.
SPLIT_MIN_ELEMENTS = 1 << 20
#: The first half's rows are a multiple of this (see `matvec`).
SPLIT_ALIGN = 64
THREAD_NAME = "memoryd-knn-helper"


class _Job:
    __slots__ = ("done", "error", "matrix", "out", "vector")

    def __init__(self, matrix: Any, vector: Any, out: Any) -> None:
        self.matrix, self.vector, self.out = matrix, vector, out
        self.error: BaseException | None = None
        self.done = threading.Event()


_lock = threading.Lock()
_busy = threading.Lock()  # held by the search whose half the helper computes
_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_started = False


def _work(jobs: queue.SimpleQueue[_Job]) -> None:
    while True:
        job = jobs.get()
        try:
            np.matmul(job.matrix, job.vector, out=job.out)
        except BaseException as err:  # handed to the caller, who raises it; the helper lives on
            job.error = err
        job.done.set()


def matvec(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """`matrix @ vector` (float32, C-contiguous rows), its rows split over two threads when
    the matrix is large and the helper is free."""
    global _started
    rows = matrix.shape[0]
    if matrix.size < SPLIT_MIN_ELEMENTS or not _busy.acquire(blocking=False):
        out: np.ndarray = matrix @ vector
        return out
    try:
        with _lock:
            if not _started:
                threading.Thread(target=_work, args=(_jobs,), name=THREAD_NAME, daemon=True).start()
                _started = True
        result = np.empty(rows, dtype=np.result_type(matrix, vector))
        # BLAS sums a block of rows at a time and a last partial block another way: a split
        # on a block boundary (whatever the kernel's block, up to 64) keeps every row's sum
        # exactly what the unsplit product gives
        half = rows // 2 // SPLIT_ALIGN * SPLIT_ALIGN
        job = _Job(matrix[half:], vector, result[half:])
        _jobs.put(job)
        try:
            np.matmul(matrix[:half], vector, out=result[:half])
        finally:  # the helper is free again, and done with `result`, only once its half is
            job.done.wait()
        if job.error is not None:
            raise job.error
        return result
    finally:
        _busy.release()


def _after_fork_in_child() -> None:
    """A forked child has no helper thread: it starts its own, with a fresh queue."""
    global _lock, _busy, _jobs, _started
    _lock = threading.Lock()
    _busy = threading.Lock()
    _jobs = queue.SimpleQueue()
    _started = False


os.register_at_fork(after_in_child=_after_fork_in_child)
