"""The in-memory KNN's product on two cores (`builtin_index._matvec`): the same numbers as one
product, a kept helper, nothing shared between concurrent searches, and a forked child's own."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_limits

from memoryd.builtin_index import _matvec
from memoryd.builtin_index._matvec import SPLIT_MIN_ELEMENTS, matvec, matvec_top, top_rows

DIMS = 384
SPLIT_ROWS = SPLIT_MIN_ELEMENTS // DIMS + 1  # the fewest rows that are split


@pytest.fixture(autouse=True)
def one_blas_thread() -> Iterator[None]:
    """As in memoryd's processes (`embeddings.local._limit_blas_threads`)."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _data(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((rows, DIMS)).astype(np.float32)
    return m, rng.standard_normal(DIMS).astype(np.float32)


@pytest.mark.parametrize(
    "rows", [1, 7, SPLIT_ROWS - 1, SPLIT_ROWS, SPLIT_ROWS + 1, SPLIT_ROWS + 63, 12_685, 30_001]
)
def test_every_score_is_bit_for_bit_the_unsplit_products(rows: int) -> None:
    """A split off a block boundary changed the last rows of each half by ~1e-6, enough to
    reorder near-ties; the split is block-aligned so that nothing changes."""
    m, v = _data(rows, rows)
    got = matvec(m, v)
    assert got.dtype == np.float32 and got.shape == (rows,)
    assert np.array_equal(got, m @ v)


def test_the_helper_is_kept_and_large_products_are_split(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, str]] = []
    real = np.matmul

    def spy(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
        seen.append((a.shape[0], threading.current_thread().name))
        return real(a, b, out=out)

    monkeypatch.setattr(np, "matmul", spy)  # numpy is imported where _matvec uses it
    m, v = _data(12_685)
    for _ in range(5):
        matvec(m, v)
    assert len(seen) == 10  # two halves each time
    assert sum(rows for rows, _ in seen[:2]) == 12_685
    assert {name for _, name in seen} == {_matvec.THREAD_NAME, threading.current_thread().name}
    helpers = [t.name for t in threading.enumerate()].count(_matvec.THREAD_NAME)
    assert helpers == 1
    seen.clear()
    small, v = _data(SPLIT_ROWS - 1)
    matvec(small, v)
    assert seen == []  # whole, on the caller's thread (`@`, not the split's `np.matmul`)


def test_concurrent_searches_each_get_their_own_scores() -> None:
    """One helper serves one search: the others compute alone, none sees another's numbers."""
    data = [_data(9_000 + 64 * i, i) for i in range(6)]
    want = [m @ v for m, v in data]
    got: dict[int, list[np.ndarray]] = {i: [] for i in range(6)}
    start = threading.Barrier(6)

    def search(i: int) -> None:
        start.wait()
        for _ in range(20):
            got[i].append(matvec(*data[i]))

    threads = [threading.Thread(target=search, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i in range(6):
        assert len(got[i]) == 20 and all(np.array_equal(g, want[i]) for g in got[i])


def test_a_failing_half_raises_in_the_caller_and_the_helper_lives_on() -> None:
    m, _ = _data(12_685)
    with pytest.raises(ValueError):
        matvec(m, np.ones(DIMS + 1, dtype=np.float32))
    m, v = _data(12_685, 1)
    assert np.array_equal(matvec(m, v), m @ v)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_a_forked_child_splits_on_a_helper_of_its_own() -> None:
    """The parent's helper does not exist in a forked child: one that counted on it would wait
    forever for its first half."""
    m, v = _data(12_685)
    matvec(m, v)  # the parent's helper now waits idle
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if its product comes back right
        code = 1
        try:
            got: list[np.ndarray] = []
            t = threading.Thread(target=lambda: got.append(matvec(m, v)), daemon=True)
            t.start()
            t.join(10)
            code = 0 if got and np.array_equal(got[0], m @ v) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from([0.1, 0.5, 0.5, 0.7, 0.7, 0.7, 0.9, -0.2, 0.31]), min_size=1, max_size=60
    ),
    st.integers(1, 70),
)
def test_top_rows_are_the_best_scores_ties_by_row(values: list[float], k: int) -> None:
    # many equal scores (duplicate chunks have equal vectors): the cut and the order must be
    # the sorted order's, whatever the partition does inside
    sims = np.array(values, dtype=np.float32)
    expected = sorted(range(len(sims)), key=lambda i: (-sims[i], i))[:k]
    assert top_rows(sims, k).tolist() == expected


def test_top_rows_rank_a_nan_score_last() -> None:
    sims = np.array([0.2, np.nan, 0.9, 0.5], dtype=np.float32)
    assert top_rows(sims, 3).tolist() == [2, 3, 0]
    assert top_rows(sims, 4).tolist()[:3] == [2, 3, 0]
    assert top_rows(sims, 0).tolist() == []


@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("k", [1, 24, 200])
def test_each_half_finds_its_own_top_rows_and_together_they_are_the_whole(
    split: bool, k: int
) -> None:
    # duplicate rows (equal scores, across the split and within a half) and a NaN row
    m, v = _data(SPLIT_ROWS + 500, k)
    m[-100:] = m[:100]
    m[SPLIT_ROWS // 2 + 3] = m[5]
    m[40, 0] = np.nan
    held = None if split else _matvec._busy
    if held is not None:
        held.acquire()  # the helper busy with another search: the whole product here
    try:
        sims, top = matvec_top(m, v, k)
    finally:
        if held is not None:
            held.release()
    expected = m @ v
    assert np.array_equal(sims, expected, equal_nan=True)
    assert top.tolist() == top_rows(expected, k).tolist()
    keys = np.where(np.isnan(expected), -np.inf, expected)
    assert top.tolist() == sorted(range(len(keys)), key=lambda i: (-keys[i], i))[:k]
