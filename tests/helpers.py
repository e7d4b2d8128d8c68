"""Builders the tests share: agents from config dicts, engines from agents, small file helpers."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hashing_embedder import HashingEmbedder
from memoryd.background import Background
from memoryd.builtin_index import MemoryIndex
from memoryd.config import ResolvedAgent, resolve_agent, validate_config
from memoryd.embeddings.base import EmbeddingProvider, ProviderSelection, Vector


def agent_for(
    ws: Path,
    search: dict[str, Any] | None = None,
    *,
    agent_id: str = "main",
    memory: dict[str, Any] | None = None,
    defaults: dict[str, Any] | None = None,
    agents: list[dict[str, Any]] | None = None,
) -> ResolvedAgent:
    """An agent for workspace `ws`: `search` is `agents.defaults.memorySearch`, `memory` is `memory`."""
    cfg: dict[str, Any] = {"agents": {"defaults": {"workspace": str(ws), **(defaults or {})}}}
    if search:
        cfg["agents"]["defaults"]["memorySearch"] = search
    if agents:
        cfg["agents"]["list"] = agents
    if memory:
        cfg["memory"] = memory
    return resolve_agent(validate_config(cfg), agent_id)


def selection(
    provider: EmbeddingProvider | None = None,
    *,
    explicit: bool = False,
    fallback: EmbeddingProvider | None = None,
) -> ProviderSelection:
    """A provider selection for tests (the deterministic hashing embedder by default)."""
    return ProviderSelection(
        provider.id if provider else "none",
        provider,
        "test",
        fallback=fallback,
        explicit=explicit,
    )


def index_for(
    agent: ResolvedAgent,
    provider: EmbeddingProvider | str | None = "hashing",
    **kw: Any,
) -> MemoryIndex:
    """The built-in index of `agent` with a test provider (`None` = keyword only)."""
    prov = HashingEmbedder() if provider == "hashing" else provider
    assert not isinstance(prov, str)
    return MemoryIndex(agent.index_settings(), selection(prov, **kw))


def write(p: Path, text: str = "x\n") -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


#: 2020: any write now gives a file dated then a later time
PAST_NS = 1_600_000_000 * 10**9


def put(p: Path, text: str) -> Path:
    """`write`, the file dated PAST_NS, so a test's next write changes its times."""
    write(p, text)
    os.utime(p, ns=(PAST_NS, PAST_NS))
    return p


class CountingQueries(HashingEmbedder):
    """The hashing embedder, recording every query text it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed_query(self, text: str) -> Vector:
        self.texts.append(text)
        return super().embed_query(text)


class Threads:
    """`start_soon(fn, *args)` runs `fn` on a thread of its own (see `concurrently`)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def start_soon(self, fn: Callable[..., object], *args: Any) -> None:
        def run() -> None:
            try:
                fn(*args)
            except BaseException as err:  # re-raised when the block ends
                self.errors.append(err)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)


@contextlib.contextmanager
def concurrently() -> Iterator[Threads]:
    """Work started in the block runs on threads; leaving it joins them and re-raises the
    first failure, as a task group does."""
    threads = Threads()
    yield threads
    for thread in threads.threads:
        thread.join()
    if threads.errors:
        raise threads.errors[0]


@contextlib.contextmanager
def background() -> Iterator[Background]:
    """A `Background` for engines and services started in the block, stopped when it ends."""
    bg = Background()
    try:
        yield bg
    finally:
        bg.stop()


@contextlib.contextmanager
def within(seconds: float) -> Iterator[None]:
    """The block must finish within `seconds` (a generous backstop, never a speed target)."""
    started = time.monotonic()
    yield
    took = time.monotonic() - started
    assert took < seconds, f"took {took:.2f}s, more than {seconds:g}s"
