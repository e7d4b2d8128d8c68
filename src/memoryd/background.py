"""Background work on threads: each runs until its owner's stop event is set, then is joined."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # the event loop's side is loaded by `serve` and MCP only
    import anyio

T = TypeVar("T")

log = logging.getLogger("memoryd")


class Background:
    """Daemon threads that share one stop event (`stopping`); `stop()` sets it and joins them."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def spawn(self, name: str, target: Callable[[], object]) -> None:
        """Run `target()` on a thread of its own; it should return once `stopping` is set."""

        def run() -> None:
            try:
                target()
            except Exception:  # a background failure is logged, never raised into nothing
                log.exception("background work %s failed", name)

        thread = threading.Thread(target=run, name=f"memoryd-{name}", daemon=True)
        with self._lock:
            if self.stopping.is_set():
                return
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def every(self, name: str, seconds: float, fn: Callable[[], object]) -> None:
        """Call `fn()` every `seconds` (the first call one interval from now) until stopped."""

        def loop() -> None:
            while not self.stopping.wait(seconds):
                fn()

        self.spawn(name, loop)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every thread and wait (at most `timeout_s` in all) for them to finish."""
        self.stopping.set()
        with self._lock:
            threads, self._threads = self._threads, []
        until = time.monotonic() + timeout_s
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, until - time.monotonic()))


async def run_blocking(fn: Callable[[], T], limiter: anyio.CapacityLimiter) -> T:
    """`fn()` on a daemon thread (so shutdown never waits for it), at most `limiter`'s number at once."""
    import anyio
    import anyio.from_thread
    import anyio.lowlevel

    # The thread gives its slot back when it ends, not when the awaiting task does: a request
    # cancelled mid-call must not let another thread start beside the one still running.
    borrower = object()
    await limiter.acquire_on_behalf_of(borrower)
    done = anyio.Event()
    token = anyio.lowlevel.current_token()
    outcome: list[Any] = []

    def finished() -> None:
        limiter.release_on_behalf_of(borrower)
        done.set()

    def run() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as err:  # handed to the awaiting task
            outcome.append((False, err))
        with contextlib.suppress(anyio.RunFinishedError):
            anyio.from_thread.run_sync(finished, token=token)

    try:
        threading.Thread(target=run, name="memoryd-request", daemon=True).start()
    except BaseException:
        limiter.release_on_behalf_of(borrower)
        raise
    await done.wait()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


async def close_shielded(close: Callable[[], object]) -> None:
    """`close()` (a service's) off the event loop, even in a cancelled task, for at most 10 s."""
    import anyio

    with anyio.CancelScope(shield=True), anyio.move_on_after(10):
        await run_blocking(close, anyio.CapacityLimiter(1))


async def stop_on_signal(stop: Callable[[], object], command: str) -> None:
    """Call `stop()` at the first SIGINT or SIGTERM, saying so on stderr."""
    import anyio

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            print(f"memoryd {command}: {name}, shutting down", file=sys.stderr, flush=True)
            stop()
            return
