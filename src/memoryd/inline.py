"""Running memoryd's async code without an event loop, for one-off commands.

A one-off `memoryd search`, `get` or `context` of the built-in index (when its embedding
provider is none or the local model), or `append`, awaits nothing that needs an event loop:
its awaits are thread offloads (SQLite, file and model work), a lock no other task contends
for and time limits.
Inside `run`, those three go through this module and happen in place, the coroutine finishes
in its first step, and the process never imports asyncio and anyio's asyncio backend (60-80 ms
of every such command on a 2-core host, docs/performance.md). The code that runs is the same
code `serve` and MCP run on their event loop; only these primitives change.

A time limit cannot cancel work in place, so inside `run` `move_on_after` sets `deadline()`
instead: work that can stop early (the local model's document embedding checks it at its
yield points) raises `DeadlinePassed`, which the scope catches, as a cancel scope catches its
cancellation. A search's embedding budget (`searchWaitMs`) holds this way without a loop.

What cannot run this way says so before doing anything: `require(False, why)` (asked for what
has not been proven loop-free: the qmd backend, PostgreSQL, a remote embedding provider)
raises `NeedsEventLoop`, and the CLI then runs the command with `anyio.run` as before. A
coroutine that suspends anyway (something awaited a real loop primitive) is closed and reported
the same way; `tests/test_inline.py` checks that every supported command finishes in one step,
answers exactly as on the loop, and imports no asyncio.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Final, TypeVar

if TYPE_CHECKING:
    import anyio
else:  # loaded on first use: a one-off command run by `memoryd.inline` never touches it
    from .lazy import anyio


T = TypeVar("T")

_INLINE: Final = contextvars.ContextVar("memoryd_inline", default=False)
_one_off_process = False


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
    """This command, in this configuration, must run on an event loop (`anyio.run`).

    `midway` is True when the coroutine had already run (it suspended, or called anyio with no
    loop): running it again is then only safe for commands that read or re-sync, not for a
    write (`memoryd append` treats it as an error instead).
    """

    def __init__(self, why: str, *, midway: bool = False) -> None:
        super().__init__(why)
        self.midway = midway


def active() -> bool:
    """True inside `run`: primitives below happen in place."""
    return _INLINE.get()


@contextlib.contextmanager
def one_off_process() -> Iterator[None]:
    """Within: this process runs one command and exits (the CLI, for all but `serve` and
    `mcp`), so engines prefer what loads fastest over what runs fastest once loaded."""
    global _one_off_process
    before, _one_off_process = _one_off_process, True
    try:
        yield
    finally:
        _one_off_process = before


def one_off() -> bool:
    """True in a one-off command's process (inline or on a loop), False in a long-lived one."""
    return _one_off_process or _INLINE.get()


def require(ok: bool, why: str) -> None:
    """Inside `run`, refuse (before any work) what has not been proven to run without a loop."""
    if not ok and _INLINE.get():
        raise NeedsEventLoop(why)


async def run_sync(fn: Callable[..., T], *args: Any) -> T:
    """`anyio.to_thread.run_sync`, or a plain call inside `run` (one task: nothing to yield to)."""
    if _INLINE.get():
        return fn(*args)
    return await anyio.to_thread.run_sync(fn, *args)


class DeadlinePassed(BaseException):
    """Raised, inside `run`, by work that checks `deadline()` and finds it passed: the
    in-place counterpart of anyio's cancellation, so (like it) `except Exception` lets it
    through to the `move_on_after` scope that set the deadline."""


class _Scope:
    """What `move_on_after` yields inside `run`: anyio's `cancelled_caught`, and the deadline."""

    __slots__ = ("cancelled_caught", "deadline")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.cancelled_caught = False


_DEADLINE: Final = contextvars.ContextVar("memoryd_inline_deadline", default=math.inf)


def deadline() -> float | None:
    """Inside `run`, the `time.monotonic()` by which the innermost `move_on_after` wants its
    work back (None when none bounds it): long work that can stop early checks it and raises
    `DeadlinePassed`. Always None on a loop, where the cancel scope does the stopping."""
    if not _INLINE.get():
        return None
    when = _DEADLINE.get()
    return None if when == math.inf else when


@contextlib.contextmanager
def move_on_after(seconds: float | None) -> Iterator[Any]:
    """`anyio.move_on_after`, or its in-place counterpart inside `run`.

    On the loop the scope stops *waiting* for the bounded work, which runs in a worker thread
    the scope does not interrupt. Inside `run` there is no other task to get back to: the
    scope sets `deadline()`, and work that can stop early (the local model's document
    embedding) checks it and raises `DeadlinePassed`, which the scope catches and reports in
    `cancelled_caught`, as anyio's does. Work that does not check keeps its own limits
    (`wait_ms` on the write lock), as the thread does on the loop.
    """
    if not _INLINE.get():
        with anyio.move_on_after(seconds) as cancel_scope:
            yield cancel_scope
        return
    own = math.inf if seconds is None else time.monotonic() + max(seconds, 0.0)
    scope = _Scope(own)
    token = _DEADLINE.set(min(own, _DEADLINE.get()))
    try:
        yield scope
    except DeadlinePassed:
        if time.monotonic() < own:  # an outer scope's deadline: not this one's to catch
            raise
        scope.cancelled_caught = True
    finally:
        _DEADLINE.reset(token)


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
    cannot. Refused by `require`, nothing was done; `midway`, it had run: a read or an index
    sync may then run again on a loop (it does again or finds done what it did), a write not."""
    token = _INLINE.set(True)
    coro = fn(*args)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    except Exception as err:
        if isinstance(err, _no_loop_errors()):  # an anyio call this module does not route
            raise NeedsEventLoop(
                f"{getattr(fn, '__name__', fn)} needs an event loop: {err}", midway=True
            ) from None
        raise
    finally:
        _INLINE.reset(token)
    coro.close()
    raise NeedsEventLoop(f"{getattr(fn, '__name__', fn)} waited on an event loop", midway=True)
