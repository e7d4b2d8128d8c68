"""Searches first: document embedding waits while a search (or a query embedding) runs and for a
short quiet window after, but never longer than the pause's bound."""

from __future__ import annotations

import threading
import time

import pytest

from memoryd.embeddings.local import QueryPriority


def _waiter(priority: QueryPriority, done: list[float]) -> threading.Thread:
    def run() -> None:
        priority.wait()
        done.append(time.monotonic())

    t = threading.Thread(target=run)
    t.start()
    return t


def test_wait_returns_at_once_when_no_query_ran() -> None:
    priority = QueryPriority(quiet_after_s=5.0)
    t = time.monotonic()
    priority.wait()
    assert time.monotonic() - t < 0.5


@pytest.mark.parametrize("quiet", [0.0, 0.2])
def test_document_work_waits_for_the_query_and_the_quiet_window(quiet: float) -> None:
    priority = QueryPriority(quiet_after_s=quiet)
    done: list[float] = []
    with priority:
        worker = _waiter(priority, done)
        time.sleep(0.2)
        assert done == [], "a document worker must not run while a query embeds"
        ended = time.monotonic()
    worker.join(5)
    assert len(done) == 1
    assert done[0] >= ended + quiet - 0.01


def test_overlapping_queries_hold_document_work_until_the_last_ends() -> None:
    priority = QueryPriority(quiet_after_s=0.0)
    done: list[float] = []
    priority.__enter__()
    priority.__enter__()
    worker = _waiter(priority, done)
    priority.__exit__(None, None, None)
    time.sleep(0.15)
    assert done == []
    last = time.monotonic()
    priority.__exit__(None, None, None)
    worker.join(5)
    assert done and done[0] >= last


def test_a_slow_query_keeps_document_work_quiet_twice_as_long() -> None:
    priority = QueryPriority(quiet_after_s=0.0)
    done: list[float] = []
    with priority:
        time.sleep(0.2)
        worker = _waiter(priority, done)
        ended = time.monotonic()
    worker.join(5)
    assert done and done[0] >= ended + 0.35


def test_a_pause_never_outlasts_its_bound() -> None:
    """A search that itself waits on document embedding (or hangs) cannot stall it for good."""
    priority = QueryPriority(quiet_after_s=0.0, max_pause_s=0.3)
    done: list[float] = []
    with priority:
        started = time.monotonic()
        worker = _waiter(priority, done)
        worker.join(5)  # returns while the search still holds the priority
        assert done and 0.25 <= done[0] - started < 2.0
    # nor does the quiet window after a long hold
    t = time.monotonic()
    priority.wait()
    assert time.monotonic() - t <= 0.35
