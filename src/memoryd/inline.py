"""Running memoryd's async code without an event loop, for one-off commands.

A one-off `memoryd search`, `get` or `context` of the built-in index with no embedding
provider awaits nothing that needs an event loop: its awaits are thread offloads (the SQLite
and file work), a lock no other task contends for and time limits no other task could enforce.
Inside `run`, those three go through this module and happen in place, the coroutine finishes
in its first step, and the process never imports asyncio and anyio's asyncio backend (60-80 ms
of every such command on a 2-core host, docs/performance.md). The code that runs is the same
code `serve` and MCP run on their event loop; only these primitives change.

What cannot run this way says so before doing anything: `require(False, why)` (the CLI asks it
for the configurations it has not proven loop-free: qmd, an embedding provider, PostgreSQL)
raises `NeedsEventLoop`, and the CLI then runs the command with `anyio.run` as before. A
coroutine that suspends anyway (something awaited a real loop primitive) is closed and reported
the same way; `tests/test_inline.py` checks that every supported command finishes in one step,
answers exactly as on the loop, and imports no asyncio.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")

_INLINE: Final = contextvars.ContextVar("memoryd_inline", default=False)


def _no_loop_errors() -> tuple[type[BaseException], ...]:
    """What anyio raises when asked for the running loop and there is none: its own
    `NoEventLoopError` (anyio >= 4.12, which no longer needs sniffio), sniffio's error before
    (those versions depend on sniffio and have imported it). Never imports sniffio itself."""
    errors: list[type[BaseException]] = []
    if hasattr(anyio, "NoEventLoopError"):
        errors.append(anyio.NoEventLoopError)
    sniffio = sys.modules.get("sniffio")
    if sniffio is not None:
        errors.append(sniffio.AsyncLibraryNotFoundError)
    return tuple(errors)


class NeedsEventLoop(Exception):
    """This command, in this configuration, must run on an event loop (`anyio.run`)."""


def active() -> bool:
    """True inside `run`: primitives below happen in place."""
    return _INLINE.get()


def require(ok: bool, why: str) -> None:
    """Inside `run`, refuse (before any work) what has not been proven to run without a loop."""
    if not ok and _INLINE.get():
        raise NeedsEventLoop(why)


async def run_sync(fn: Callable[..., T], *args: Any) -> T:
    """`anyio.to_thread.run_sync`, or a plain call inside `run` (one task: nothing to yield to)."""
    if _INLINE.get():
        return fn(*args)
    return await anyio.to_thread.run_sync(fn, *args)


@contextlib.contextmanager
def move_on_after(seconds: float | None) -> Iterator[None]:
    """`anyio.move_on_after`, or nothing inside `run`.

    The work it bounds runs in a worker thread, which a cancel scope does not interrupt
    either: on the loop the scope only stops waiting for the result. Inside `run` there is no
    other task to get back to, so the bound work's own limits (`wait_ms` on the write lock)
    are what hold, as they do for the thread on the loop.
    """
    if _INLINE.get():
        yield
        return
    with anyio.move_on_after(seconds):
        yield


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """`anyio.CancelScope(shield=True)`, or nothing inside `run` (nothing can cancel it)."""
    if _INLINE.get():
        yield
        return
    with anyio.CancelScope(shield=True):
        yield


class Lock:
    """An `anyio.Lock`, made on first use on a loop; inside `run` holding it is a no-op."""

    def __init__(self) -> None:
        self._lock: anyio.Lock | None = None

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        if _INLINE.get():
            yield
            return
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            yield

    def locked(self) -> bool:
        return self._lock is not None and self._lock.locked()


def run(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """`fn(*args)` run to completion here, without an event loop; `NeedsEventLoop` when it
    cannot (then nothing it did is lost by running it again on a loop: the commands it is used
    for read, or bring the index up to date, which a second run does again or finds done)."""
    token = _INLINE.set(True)
    coro = fn(*args)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    except Exception as err:
        if isinstance(err, _no_loop_errors()):  # an anyio call this module does not route
            raise NeedsEventLoop(
                f"{getattr(fn, '__name__', fn)} needs an event loop: {err}"
            ) from None
        raise
    finally:
        _INLINE.reset(token)
    coro.close()
    raise NeedsEventLoop(f"{getattr(fn, '__name__', fn)} waited on an event loop")
