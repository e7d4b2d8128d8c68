"""An open `MemoryService` keeps its index up to date as `memoryd serve` does: it embeds pending
chunks in the background, each search waits up to `sync.searchWaitMs` for a short backlog, and
`background=False` runs no background work."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from helpers import index_for, write
from memoryd.config import validate_config
from memoryd.embeddings import HashingEmbedder
from memoryd.embeddings.base import Matrix
from memoryd.orchestrator import MemoryService

pytestmark = pytest.mark.anyio


class SlowHashing(HashingEmbedder):
    """The hashing embedder at a measurable pace per chunk, as a real model embeds."""

    def __init__(self, seconds_per_chunk: float) -> None:
        super().__init__()
        self.seconds_per_chunk = seconds_per_chunk

    async def embed_documents(self, texts: Sequence[str]) -> Matrix:
        await anyio.sleep(self.seconds_per_chunk * len(texts))
        return await super().embed_documents(texts)


def notes(ws: Path, n: int) -> None:
    for i in range(n):
        write(ws / "memory" / f"2026-10-{i + 1:02d}.md", f"# day {i}\n- pelican sighting {i}\n")


def service(ws: Path, wait_ms: int, **kw: Any) -> tuple[MemoryService, SlowHashing]:
    provider = SlowHashing(0.05)
    cfg = validate_config(
        {
            "agents": {
                "defaults": {
                    "workspace": str(ws),
                    "memorySearch": {"sync": {"searchWaitMs": wait_ms, "watch": False}},
                }
            }
        }
    )
    return MemoryService(cfg, index_factory=lambda a: index_for(a, provider), **kw), provider


async def pending(svc: MemoryService) -> int:
    return (await svc.status_model()).pending_vectors


async def test_an_open_service_embeds_pending_chunks_in_the_background(workspace: Path) -> None:
    notes(workspace, 20)
    svc, provider = service(workspace, wait_ms=0)
    async with svc:
        first = await svc.search("pelican sighting")
        assert first.mode == "keyword" and await pending(svc) == 20
        with anyio.fail_after(30):
            while await pending(svc):
                await anyio.sleep(0.05)
        second = await svc.search("pelican sighting")
    assert second.mode == "hybrid" and not second.notes
    assert provider.embedded_texts == 20


async def test_a_search_waits_up_to_search_wait_ms_for_a_short_backlog(workspace: Path) -> None:
    notes(workspace, 5)
    svc, _ = service(workspace, wait_ms=10_000, background=False)
    async with svc:
        answer = await svc.search("pelican sighting")
        assert await pending(svc) == 0
    assert answer.mode == "hybrid" and not answer.notes


async def test_background_false_leaves_the_backlog_to_the_searches(workspace: Path) -> None:
    notes(workspace, 5)
    svc, provider = service(workspace, wait_ms=0, background=False)
    async with svc:
        answer = await svc.search("pelican sighting")
        await anyio.sleep(1.0)  # time enough for 5 chunks at 0.05 s, had anything started
        assert await pending(svc) == 5
    assert answer.mode == "keyword" and provider.embedded_texts == 0


async def test_closing_the_service_stops_its_background_work(workspace: Path) -> None:
    notes(workspace, 40)
    svc, provider = service(workspace, wait_ms=0)
    async with svc:
        await svc.search("pelican sighting")
        with anyio.fail_after(30):
            while provider.embedded_texts == 0:
                await anyio.sleep(0.02)
    done = provider.embedded_texts
    await anyio.sleep(0.5)
    assert done == provider.embedded_texts < 40  # nothing embeds once the block has ended
