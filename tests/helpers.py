"""Builders the tests share: agents from config dicts, engines from agents, small file helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memoryd.builtin_index import MemoryIndex
from memoryd.config import ResolvedAgent, resolve_agent, validate_config
from memoryd.embeddings import HashingEmbedder
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


class CountingQueries(HashingEmbedder):
    """The hashing embedder, recording every query text it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def embed_query(self, text: str) -> Vector:
        self.texts.append(text)
        return await super().embed_query(text)
