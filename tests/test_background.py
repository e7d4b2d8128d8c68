"""`memoryd.background.run_blocking`: requests of `serve` and MCP on daemon threads, bounded."""

from __future__ import annotations

import threading

import anyio
import pytest

from memoryd.background import run_blocking


def test_a_cancelled_request_keeps_its_slot_until_its_thread_ends() -> None:
    release = threading.Event()
    first_started = threading.Event()
    second_started = threading.Event()

    def first() -> str:
        first_started.set()
        release.wait(30)
        return "first"

    def second() -> str:
        second_started.set()
        return "second"

    async def main() -> None:
        limiter = anyio.CapacityLimiter(1)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_blocking, first, limiter)
                await anyio.to_thread.run_sync(first_started.wait, 30)
                scope.cancel()  # the request goes; its thread runs on
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_blocking, second, limiter)
            await anyio.sleep(0.2)
            assert not second_started.is_set()  # the slot is still the first thread's
            release.set()
        assert second_started.is_set()

    anyio.run(main)


def test_an_error_reaches_the_awaiting_task() -> None:
    def fails() -> None:
        raise ValueError("boom")

    async def main() -> None:
        with pytest.raises(ValueError, match="boom"):
            await run_blocking(fails, anyio.CapacityLimiter(2))

    anyio.run(main)
