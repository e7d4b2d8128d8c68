"""The in-memory KNN (`_knn.VectorMatrix`): exact up to EXACT_MAX_VECTORS, sign-bit candidates
rescored exactly above it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memoryd.builtin_index import _knn
from memoryd.builtin_index._knn import VectorMatrix, top_rows
from memoryd.builtin_index._store import Store


def unit_rows(n: int, dims: int = 128, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((n, dims)).astype(np.float32)
    out: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def store_with_vectors(tmp_path: Path, n: int, seed: int) -> tuple[Store, list[int], np.ndarray]:
    """A store of `n` chunks in one file, each with a 64-dimension unit vector."""
    store = Store(tmp_path / "index.sqlite")
    chunks = [(i, i, f"h{i}", f"chunk {i}", 2) for i in range(1, n + 1)]
    store.replace_file("a.md", "/w/a.md", "memory", "f", 1.0, 10, chunks)
    ids = [cid for cid, *_ in store.pending_chunks(n + 10)]
    rows = unit_rows(n, dims=64, seed=seed)
    store.write_vectors(list(zip(ids, rows, strict=True)))
    return store, ids, rows


def exact(rows: np.ndarray, ids: np.ndarray, q: np.ndarray, k: int) -> list[tuple[int, float]]:
    sims = rows @ q
    top = top_rows(sims, k)
    return list(zip(ids[top].tolist(), sims[top].tolist(), strict=True))


def test_small_matrices_are_scanned_exactly() -> None:
    rows = unit_rows(500)
    ids = np.arange(1000, 1500)
    vm = VectorMatrix(ids, rows)
    for q in unit_rows(5, seed=9):
        assert vm.search(q, 24) == exact(rows, ids, q, 24)
        assert vm._candidates(q, 24) is None


def test_above_the_threshold_candidates_are_rescored_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_knn, "EXACT_MAX_VECTORS", 100)
    monkeypatch.setattr(_knn, "CANDIDATES", 300)
    rows = unit_rows(3000)
    ids = np.arange(3000) * 7
    vm = VectorMatrix(ids, rows)
    planted = np.arange(0, 3000, 75)
    noisy = rows[planted] + 0.5 * unit_rows(len(planted), seed=5)
    for row, q in zip(planted, noisy / np.linalg.norm(noisy, axis=1, keepdims=True), strict=True):
        cand = vm._candidates(q, 24)
        assert cand is not None and 300 <= len(cand) < 3000
        assert np.all(np.diff(cand) > 0)  # ascending rows: ties go by row, as in the scan
        got = vm.search(q, 24)
        # every cosine returned is the exact one, best first
        assert [s for _, s in got] == pytest.approx([float(rows[i // 7] @ q) for i, _ in got])
        assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
        assert got[0] == exact(rows, ids, q, 1)[0] and got[0][0] == ids[row]


def test_the_cut_keeps_every_row_at_its_distance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_knn, "EXACT_MAX_VECTORS", 10)
    monkeypatch.setattr(_knn, "CANDIDATES", 5)
    rows = np.repeat(unit_rows(2, dims=64), 50, axis=0)  # two vectors, 50 copies each
    vm = VectorMatrix(np.arange(100), rows)
    cand = vm._candidates(rows[0], 3)
    assert cand is not None and cand.tolist() == list(range(50))
    assert [i for i, _ in vm.search(rows[0], 3)] == [0, 1, 2]


def test_dims_that_pack_into_no_whole_word_are_scanned_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_knn, "EXACT_MAX_VECTORS", 10)
    rows = unit_rows(200, dims=100)
    vm = VectorMatrix(np.arange(200), rows)
    q = rows[3]
    assert vm._candidates(q, 6) is None
    assert vm.search(q, 6) == exact(rows, np.arange(200), q, 6)


def test_a_store_above_the_threshold_answers_through_the_prefilter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_knn, "EXACT_MAX_VECTORS", 0)
    monkeypatch.setattr(_knn, "CANDIDATES", 20)
    store, ids, rows = store_with_vectors(tmp_path, 200, seed=3)
    try:
        for row in (5, 77, 190):
            got = store.vector_search(rows[row], 6)
            assert got[0][0] == ids[row] and got[0][1] == pytest.approx(1.0, abs=1e-3)
            assert "matrix" in store._by_version
            held = store._by_version["matrix"][1]  # the stored (int8) vectors, as searched
            by_id = dict(zip(held.ids.tolist(), held.rows @ rows[row], strict=True))
            assert [s for _, s in got] == pytest.approx([by_id[cid] for cid, _ in got], abs=1e-6)
        assert store._by_version["matrix"][1]._signs is not None
    finally:
        store.close()


def test_a_vector_of_other_dimensions_is_left_out_of_the_matrix(tmp_path: Path) -> None:
    store, ids, rows = store_with_vectors(tmp_path, 10, seed=4)
    try:
        with store.transaction():
            store._w.execute(
                "update chunk_vectors set vector = ? where chunk_id = ?", (b"\1" * 7, ids[0])
            )
        got = store.vector_search(rows[3], 10)
        assert got[0][0] == ids[3]
        assert {cid for cid, _ in got} == set(ids[1:])  # the damaged one is missing, no stand-in
    finally:
        store.close()
