"""A search's embedding budget holds within a batch: the vector phase sizes batches to the time left.

The provider here is the deterministic hashing embedder at a fixed cost per text, standing in for
a local model on a slow machine. Its cost is paid on a fake clock that the index's vector phase
reads too (`fake_clock`), so the budget's arithmetic is checked exactly and no figure depends on
how loaded the machine is. What is checked is behaviour: how many chunks a budget lets through,
and that a budgeted sync stops at its deadline instead of after a whole batch.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Sequence
from pathlib import Path

import pytest

from hashing_embedder import HashingEmbedder
from helpers import agent_for, index_for, write
from memoryd.builtin_index import _sync as index_mod
from memoryd.embeddings.base import DeadlineReached, Matrix

PER_TEXT_S = 0.0625  # a binary fraction: sums of it are exact


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The time the index's vector phase measures its budget and its embedding rate by."""
    fake = Clock()
    monkeypatch.setattr(
        index_mod,
        "time",
        types.SimpleNamespace(monotonic=fake, perf_counter=time.perf_counter, time=time.time),
    )
    return fake


class SlowEmbedder(HashingEmbedder):
    """Hashing vectors at a fixed cost per text on the fake clock; records each batch's size."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.batches: list[int] = []
        self.per_text_s = PER_TEXT_S

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        self.batches.append(len(texts))
        self.clock.now += self.per_text_s * len(texts)
        time.sleep(0)
        return super().embed_documents(texts)


def _notes(ws: Path, n: int) -> None:
    for i in range(n):
        write(ws / "memory" / f"2024-01-{i % 28 + 1:02d}-{i}.md", f"# note {i}\nfact number {i}\n")


def test_a_budgeted_sync_stops_near_its_deadline_not_after_a_batch(
    workspace: Path, clock: Clock
) -> None:
    _notes(workspace, 15)  # within reach: 15 × the assumed rate fits FUTILE_BACKLOG_BUDGETS
    provider = SlowEmbedder(clock)
    idx = index_for(agent_for(workspace), provider)
    budget = 0.5
    t = clock()
    report = idx.sync(embed_budget_s=budget)
    # a full batch would take EMBED_BATCH × 62.5 ms = 1 s of embedding alone
    assert provider.batches[0] == 1, "the first budgeted batch measures the rate on one chunk"
    assert len(provider.batches) > 1 and max(provider.batches) < index_mod.EMBED_BATCH
    assert 0 < report.vectors_embedded < 15
    assert report.vectors_pending == 15 - report.vectors_embedded
    assert clock() - t == sum(provider.batches) * PER_TEXT_S <= budget
    idx.close()


def test_without_a_budget_batches_are_full(workspace: Path, clock: Clock) -> None:
    _notes(workspace, 40)
    provider = SlowEmbedder(clock)
    idx = index_for(agent_for(workspace), provider)
    report = idx.sync()
    assert report.vectors_embedded == 40 and report.vectors_pending == 0
    assert provider.batches[0] == index_mod.EMBED_BATCH
    idx.close()


def test_a_spent_budget_embeds_nothing_and_later_syncs_finish(
    workspace: Path, clock: Clock
) -> None:
    _notes(workspace, 20)
    provider = SlowEmbedder(clock)
    idx = index_for(agent_for(workspace), provider)
    first = idx.sync(embed_budget_s=0)
    assert first.vectors_embedded == 0 and first.vectors_pending == 20
    rest = idx.sync()
    assert rest.vectors_embedded == 20 and rest.vectors_pending == 0
    idx.close()


def test_budgeted_syncs_in_a_row_embed_everything_exactly_once(
    workspace: Path, clock: Clock
) -> None:
    _notes(workspace, 10)
    provider = SlowEmbedder(clock)
    idx = index_for(agent_for(workspace), provider)
    embedded = 0
    for _ in range(40):
        idx.dirty = True
        report = idx.sync(embed_budget_s=0.3)
        embedded += report.vectors_embedded
        if report.vectors_pending == 0:
            break
    assert embedded == 10 and provider.embedded_texts == 10
    idx.close()


class StallingEmbedder(HashingEmbedder):
    """Every call is still on its first chunk at the deadline (a crushed machine): it stops
    there, as the local model's workers do; says if it was given one."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = False

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        if deadline is None:
            threading.Event().wait()  # never returns: the test's timeout reports it
        assert deadline is not None
        time.sleep(max(0.0, deadline - time.monotonic()))
        self.cancelled = True
        raise DeadlineReached


def test_the_deadline_holds_even_when_one_chunk_outlasts_it(workspace: Path) -> None:
    """The vector phase's hard stop: the stalled call is cancelled at the deadline (the real
    clock's here: the budget is the only bound, the test's own timeout the backstop)."""
    _notes(workspace, 5)
    provider = StallingEmbedder()
    idx = index_for(agent_for(workspace), provider)
    report = idx.sync(embed_budget_s=0.25)
    assert provider.cancelled
    assert report.vectors_embedded == 0 and report.vectors_pending == 5
    idx.close()


def test_a_backlog_no_budget_could_dent_is_left_to_index_and_the_sync_returns_at_once(
    workspace: Path, clock: Clock
) -> None:
    """First contact on a large workspace: embedding 3 of 200 chunks would not change the
    ranking, so a budgeted (search) sync embeds none and returns; `memoryd index` does them."""
    _notes(workspace, 200)
    provider = SlowEmbedder(clock)
    idx = index_for(agent_for(workspace), provider)
    report = idx.sync(embed_budget_s=2.0)
    assert provider.batches == [] and report.vectors_pending == 200
    full = idx.sync()
    assert full.vectors_embedded == 200 and full.vectors_pending == 0
    idx.close()


def test_a_measured_rate_decides_what_a_budget_can_finish(tmp_path: Path, clock: Clock) -> None:
    """The same backlog is embedded by a search's sync once this process has measured that it
    fits, and left alone on a fresh index, where only the assumed rate is known."""
    cheap = 2**-9  # seconds per text: 100 chunks fit a 0.5 s budget easily

    class FastEmbedder(SlowEmbedder):
        def __init__(self) -> None:
            super().__init__(clock)
            self.per_text_s = cheap

    measured_ws, fresh_ws = tmp_path / "measured", tmp_path / "fresh"
    _notes(measured_ws, 10)
    measured = index_for(agent_for(measured_ws), FastEmbedder())
    assert (measured.sync()).vectors_pending == 0  # unbudgeted: embeds, measures the rate
    for ws in (measured_ws, fresh_ws):
        for i in range(100):
            write(ws / "memory" / f"2024-02-{i % 28 + 1:02d}-{i}.md", f"# later {i}\nfact {i}\n")
    measured.dirty = True
    assert (measured.sync(embed_budget_s=0.5)).vectors_pending == 0
    fresh = index_for(agent_for(fresh_ws), FastEmbedder())
    assert (fresh.sync(embed_budget_s=0.5)).vectors_pending == 100
    measured.close()
    fresh.close()


class LoadingEmbedder(SlowEmbedder):
    """Its first call loads a model (1.25 s) before the fixed per-text cost, as the local one."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.per_text_s = 2**-7
        self.loaded = False

    @property
    def documents_ready(self) -> bool:
        return self.loaded

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        if not self.loaded:
            self.clock.now += 1.25
            self.loaded = True
        return super().embed_documents(texts)


def test_a_model_load_does_not_count_as_the_embedding_rate(workspace: Path, clock: Clock) -> None:
    """First contact with the local model: the first chunk's call also loads the model. Taken
    as the rate, it made a 2 s budget stop after that chunk (the README demo answered with
    "4 chunks still waiting"); the load is not the rate, so the small backlog is finished."""
    _notes(workspace, 12)
    provider = LoadingEmbedder(clock)
    idx = index_for(agent_for(workspace), provider)
    report = idx.sync(embed_budget_s=2.0)
    assert provider.batches[0] == 1 and provider.batches[1] == 1  # the load, then the measure
    assert report.vectors_embedded == 12 and report.vectors_pending == 0
    idx.close()
