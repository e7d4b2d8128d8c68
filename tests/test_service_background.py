"""An open `MemoryService` keeps its index up to date as `memoryd serve` does: it embeds pending
chunks in the background, each search waits up to `sync.searchWaitMs` for a short backlog, and
`background=False` runs no background work."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hashing_embedder import HashingEmbedder
from helpers import index_for, within, write
from memoryd.config import validate_config
from memoryd.embeddings.base import Matrix
from memoryd.orchestrator import MemoryService


class SlowHashing(HashingEmbedder):
    """The hashing embedder at a measurable pace per chunk, as a real model embeds."""

    def __init__(self, seconds_per_chunk: float) -> None:
        super().__init__()
        self.seconds_per_chunk = seconds_per_chunk
        self.gate = threading.Event()  # cleared: embedding waits until the test sets it
        self.gate.set()

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        self.gate.wait(30)
        time.sleep(self.seconds_per_chunk * len(texts))
        return super().embed_documents(texts)


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


def pending(svc: MemoryService) -> int:
    return (svc.status_model()).pending_vectors


def test_an_open_service_embeds_pending_chunks_in_the_background(workspace: Path) -> None:
    notes(workspace, 20)
    svc, provider = service(workspace, wait_ms=0)
    provider.gate.clear()  # however slow the search, the background cannot finish before it
    with svc:
        first = svc.search("pelican sighting")
        assert first.mode == "keyword"
        # with searchWaitMs = 0 the search does not wait for a background text phase under way
        deadline = time.monotonic() + 30
        while pending(svc) != 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pending(svc) == 20
        provider.gate.set()
        with within(30):
            while pending(svc):
                time.sleep(0.05)
        second = svc.search("pelican sighting")
    assert second.mode == "hybrid" and not second.notes
    assert provider.embedded_texts == 20


def test_a_search_waits_up_to_search_wait_ms_for_a_short_backlog(workspace: Path) -> None:
    notes(workspace, 5)
    svc, _ = service(workspace, wait_ms=10_000, background=False)
    with svc:
        answer = svc.search("pelican sighting")
        assert pending(svc) == 0
    assert answer.mode == "hybrid" and not answer.notes


def test_background_false_leaves_the_backlog_to_the_searches(workspace: Path) -> None:
    notes(workspace, 5)
    svc, provider = service(workspace, wait_ms=0, background=False)
    with svc:
        answer = svc.search("pelican sighting")
        time.sleep(1.0)  # time enough for 5 chunks at 0.05 s, had anything started
        assert pending(svc) == 5
    assert answer.mode == "keyword" and provider.embedded_texts == 0


def test_closing_the_service_stops_its_background_work(workspace: Path) -> None:
    notes(workspace, 40)
    svc, provider = service(workspace, wait_ms=0)
    with svc:
        svc.search("pelican sighting")
        with within(30):
            while provider.embedded_texts == 0:
                time.sleep(0.02)
    done = provider.embedded_texts
    time.sleep(0.5)
    assert done == provider.embedded_texts < 40  # nothing embeds once the block has ended
