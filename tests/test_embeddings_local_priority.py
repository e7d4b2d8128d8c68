"""Searches first: document embedding waits while a search (or a query embedding) runs and for a
short quiet window after, but never longer than the pause's bound.

Time is a fake clock the test moves (by binary fractions, which add up exactly); a worker blocked in `wait()` is woken as a real one is (the
search ending notifies it, or its own timed wait runs out), and looks at the clock again. A
worker must not have returned is checked with a short real wait that can only make the test
pass wrongly, never fail wrongly; that it returns is waited for generously.
"""

from __future__ import annotations

import threading

from memoryd.embeddings.local import QueryPriority

PATIENCE_S = 30  # how long a worker that should return may take on a crushed machine


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Worker:
    """A document worker's `wait()` on its own thread; `returned_at` is the fake time it left."""

    def __init__(self, priority: QueryPriority, clock: Clock) -> None:
        self.priority, self.clock = priority, clock
        self.done = threading.Event()
        self.returned_at: float | None = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        self.priority.wait()
        self.returned_at = self.clock()
        self.done.set()

    def still_waiting(self) -> bool:
        return not self.done.wait(0.05)

    def returns(self) -> bool:
        return self.done.wait(PATIENCE_S)


def advance(priority: QueryPriority, clock: Clock, seconds: float) -> None:
    """Move time on and wake the waiters, as their timed wait running out would."""
    clock.now += seconds
    with priority._cond:
        priority._cond.notify_all()


def test_wait_returns_at_once_when_no_query_ran() -> None:
    clock = Clock()
    priority = QueryPriority(quiet_after_s=5.0, clock=clock)
    priority.wait()  # on this thread: returning at all is the check
    assert clock.now == 100.0


def test_document_work_waits_for_the_query_and_the_quiet_window() -> None:
    clock = Clock()
    priority = QueryPriority(quiet_after_s=0.25, clock=clock)
    with priority:
        worker = Worker(priority, clock)
        advance(priority, clock, 0.0625)
        assert worker.still_waiting(), "a document worker must not run while a query embeds"
    ended = clock.now
    assert worker.still_waiting(), "nor in the quiet window after it"
    advance(priority, clock, 0.125)
    assert worker.still_waiting()
    advance(priority, clock, 0.125)
    assert worker.returns() and worker.returned_at == ended + 0.25


def test_without_a_quiet_window_document_work_resumes_when_the_query_ends() -> None:
    clock = Clock()
    priority = QueryPriority(quiet_after_s=0.0, clock=clock)
    with priority:
        worker = Worker(priority, clock)
        assert worker.still_waiting()
    assert worker.returns() and worker.returned_at == 100.0


def test_overlapping_queries_hold_document_work_until_the_last_ends() -> None:
    clock = Clock()
    priority = QueryPriority(quiet_after_s=0.0, clock=clock)
    priority.__enter__()
    priority.__enter__()
    worker = Worker(priority, clock)
    advance(priority, clock, 0.125)
    priority.__exit__(None, None, None)
    assert worker.still_waiting()
    advance(priority, clock, 0.125)
    priority.__exit__(None, None, None)
    assert worker.still_waiting()  # the quiet window: twice the queries' 0.25 s
    advance(priority, clock, 0.5)
    assert worker.returns() and worker.returned_at == 100.75


def test_a_slow_query_keeps_document_work_quiet_twice_as_long() -> None:
    clock = Clock()
    priority = QueryPriority(quiet_after_s=0.0, clock=clock)
    with priority:
        advance(priority, clock, 0.25)
        worker = Worker(priority, clock)
    assert worker.still_waiting()
    advance(priority, clock, 0.375)
    assert worker.still_waiting()
    advance(priority, clock, 0.125)
    assert worker.returns() and worker.returned_at == 100.25 + 0.5


def test_a_pause_never_outlasts_its_bound() -> None:
    """A search that itself waits on document embedding (or hangs) cannot stall it for good."""
    clock = Clock()
    priority = QueryPriority(quiet_after_s=0.0, max_pause_s=0.5, clock=clock)
    with priority:
        worker = Worker(priority, clock)
        advance(priority, clock, 0.375)
        assert worker.still_waiting()
        advance(priority, clock, 0.125)
        # it returns while the search still holds the priority
        assert worker.returns() and worker.returned_at == 100.5
        advance(priority, clock, 4.5)
    # nor does the quiet window after a long hold (twice 5 s, bounded to 0.5 s)
    late = Worker(priority, clock)
    assert late.still_waiting()
    advance(priority, clock, 0.5)
    assert late.returns() and late.returned_at == 105.5
