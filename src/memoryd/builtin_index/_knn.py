"""Cosine KNN over the float32 vectors a long-lived process holds in memory."""

from __future__ import annotations

import numpy as np

#: Up to this many vectors a query scans them all; above, that scan (memory-bound: it reads
#: every vector) is most of a hybrid search, so sign bits pick candidates scored exactly.
EXACT_MAX_VECTORS = 20_000
#: The sign bits pass on at least this many candidates and 1/CANDIDATE_SHARE of all, with all
#: ties: a share, since the exact top k lies deeper in a larger index (`bench/bench_knn.py`).
CANDIDATES = 1000
CANDIDATE_SHARE = 20
_BLOCK = 8192  # rows packed at a time: no (n, dims) temporary on the way


class VectorMatrix:
    """Row ids and unit vectors; above EXACT_MAX_VECTORS also each vector's signs about the
    mean vector (ranking by q·x is ranking by q·(x - mean)), packed in 64-bit words, a column
    of the matrix per word so a query XORs and counts over contiguous arrays."""

    def __init__(self, ids: np.ndarray, rows: np.ndarray) -> None:
        self.ids, self.rows = ids, rows
        self._signs: tuple[np.ndarray, np.ndarray] | None = None
        if len(ids) > EXACT_MAX_VECTORS and rows.shape[1] % 64 == 0:
            mean = rows.mean(axis=0, dtype=np.float64).astype(np.float32)
            words = np.empty((len(ids), rows.shape[1] // 64), np.uint64)
            for start in range(0, len(ids), _BLOCK):
                part = np.packbits(rows[start : start + _BLOCK] > mean, axis=1)
                words[start : start + _BLOCK] = part.view(np.uint64)
            self._signs = (mean, np.ascontiguousarray(words.T))

    def search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(id, cosine) of the `k` best rows, best first."""
        q = query.astype(np.float32)
        rows = self._candidates(q, k)
        sims = (self.rows if rows is None else self.rows[rows]) @ q
        top = top_rows(sims, k)
        best = top if rows is None else rows[top]
        return list(zip(self.ids[best].tolist(), sims[top].tolist(), strict=True))

    def _candidates(self, q: np.ndarray, k: int) -> np.ndarray | None:
        """The rows whose signs differ least from the query's, ascending; None: scan them all."""
        if self._signs is None or not np.isfinite(q).all():
            return None
        mean, columns = self._signs
        words = np.packbits(q > mean).view(np.uint64)
        distance = np.bitwise_count(columns[0] ^ words[0]).astype(np.uint16)
        for column, word in zip(columns[1:], words[1:], strict=True):
            distance += np.bitwise_count(column ^ word)
        # the cut is a distance, not a count: rows at it all come, whatever their order
        reached = np.cumsum(np.bincount(distance, minlength=len(q) + 1))
        cut = int(np.searchsorted(reached, max(CANDIDATES, len(self.ids) // CANDIDATE_SHARE, k)))
        return np.flatnonzero(distance <= cut)


def top_rows(sims: np.ndarray, k: int) -> np.ndarray:
    """The rows of the `k` highest scores, best first, equal scores by row and NaN last: which
    of several duplicate chunks makes the cut must not depend on the selection algorithm."""
    n = sims.shape[0]
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, dtype=np.intp)
    keys = np.where(np.isnan(sims), -np.inf, sims)
    kth = keys[np.argpartition(keys, n - k)[n - k :]].min()
    rows = np.flatnonzero(keys >= kth)
    best: np.ndarray = rows[np.lexsort((rows, -keys[rows]))][:k]
    return best
