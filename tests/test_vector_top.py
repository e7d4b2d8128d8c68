"""The in-memory KNN's cut (`_knn.top_rows`): the best scores, equal scores by row, NaN last."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.builtin_index._knn import top_rows


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


def test_duplicate_rows_and_a_nan_row_cut_as_the_sorted_order_does() -> None:
    rng = np.random.default_rng(3)
    m = rng.standard_normal((3000, 384)).astype(np.float32)
    m[-100:] = m[:100]
    m[40, 0] = np.nan
    sims = m @ rng.standard_normal(384).astype(np.float32)
    keys = np.where(np.isnan(sims), -np.inf, sims)
    for k in (1, 24, 200):
        assert (
            top_rows(sims, k).tolist() == sorted(range(len(keys)), key=lambda i: (-keys[i], i))[:k]
        )
