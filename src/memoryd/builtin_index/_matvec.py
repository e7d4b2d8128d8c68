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

#: Below this many matrix elements (~1M: ~2,700 vectors of 384 dimensions, 0.2 ms on one
#: core) the product is computed whole: the helper's wake-up would be a visible share of it.
SPLIT_MIN_ELEMENTS = 1 << 20
#: The first half's rows are a multiple of this (see `matvec`).
SPLIT_ALIGN = 64
THREAD_NAME = "memoryd-knn-helper"


class _Job:
    __slots__ = ("done", "error", "k", "keys", "matrix", "out", "rows", "vector")

    def __init__(self, matrix: Any, vector: Any, out: Any, k: int = 0) -> None:
        self.matrix, self.vector, self.out, self.k = matrix, vector, out, k
        self.rows: Any = None  # with k: the half's rows at or above its k-th score, and
        self.keys: Any = None  # their scores (NaN as -inf)
        self.error: BaseException | None = None
        self.done = threading.Event()


_lock = threading.Lock()
_busy = threading.Lock()  # held by the search whose half the helper computes
_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_started = False


def _work(jobs: queue.SimpleQueue[_Job]) -> None:
    import numpy as np

    while True:
        job = jobs.get()
        try:
            np.matmul(job.matrix, job.vector, out=job.out)
            if job.k:
                job.rows, job.keys = _at_or_above_kth(job.out, job.k)
        except BaseException as err:  # handed to the caller, who raises it; the helper lives on
            job.error = err
        job.done.set()


def _at_or_above_kth(sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose score is at least the k-th highest, and those scores with NaN as -inf
    (one partition; numpy lets go of the GIL for it, so both halves' run at once)."""
    import numpy as np

    n = sims.shape[0]
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=sims.dtype)
    kth = sims[np.argpartition(sims, n - k)[n - k :]].min()
    if np.isnan(kth):  # the partition ranks NaN highest; a vector gone bad ranks last
        sims = np.where(np.isnan(sims), -np.inf, sims)
        kth = sims[np.argpartition(sims, n - k)[n - k :]].min()
    rows = np.flatnonzero(sims >= kth)
    return rows, sims[rows]


def _best(rows: np.ndarray, keys: np.ndarray, k: int) -> np.ndarray:
    import numpy as np

    order: np.ndarray = rows[np.lexsort((rows, -keys))][:k]
    return order


def top_rows(sims: np.ndarray, k: int) -> np.ndarray:
    """The rows of the `k` highest scores, best first; equal scores by row (duplicate chunks
    have equal vectors, and which of them makes the cut must not depend on the selection
    algorithm's internals). One partition of the scores as they are (a negated copy first
    cost ~0.06 ms at 10k), then the few rows at or above the k-th score sorted."""
    return _best(*_at_or_above_kth(sims, k), k)


def matvec_top(matrix: np.ndarray, vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(`matvec(matrix, vector)`, `top_rows` of it for `k`), each half's candidates for the
    top rows found on its own thread. The same rows: a row among the k best overall is among
    the k best of its half, so at or above that half's k-th score."""
    return _product(matrix, vector, k)


def matvec(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """`matrix @ vector` (float32, C-contiguous rows), its rows split over two threads when
    the matrix is large and the helper is free."""
    return _product(matrix, vector, 0)[0]


def _product(matrix: np.ndarray, vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    global _started
    rows = matrix.shape[0]
    if matrix.size < SPLIT_MIN_ELEMENTS or not _busy.acquire(blocking=False):
        out: np.ndarray = matrix @ vector
        return out, top_rows(out, k)
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
        job = _Job(matrix[half:], vector, result[half:], k)
        _jobs.put(job)
        try:
            np.matmul(matrix[:half], vector, out=result[:half])
            if k:
                mine, my_keys = _at_or_above_kth(result[:half], k)
        finally:  # the helper is free again, and done with `result`, only once its half is
            job.done.wait()
        if job.error is not None:
            raise job.error
        if not k:
            return result, np.zeros(0, dtype=np.intp)
        both = np.concatenate([mine, job.rows + half])
        return result, _best(both, np.concatenate([my_keys, job.keys]), k)
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
