"""`MemoryService`: the one object agents, the CLI and MCP talk to.

It owns one manager per agent (created lazily, cached), applies scope rules and citations to
every search, and never lets an exception reach the agent: tool calls return plain dicts with
`disabled`/`error` or `scopeDenied` instead.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ..builtin_index import MemoryIndex
from ..citations import apply_citations
from ..config import MemorydConfig, ResolvedAgent, agent_ids, resolve_agent
from ..errors import MemorydError
from ..scope_rules import evaluate_scope

log = logging.getLogger("memoryd")


class MemoryService:
    """Memory for every configured agent (built-in backend; qmd plugs in via the supervisor)."""

    def __init__(
        self,
        config: MemorydConfig,
        *,
        workspace: str | os.PathLike[str] | None = None,
        cwd: Path | None = None,
        search_embed_budget_s: float | None = None,
    ) -> None:
        self.config = config
        self._workspace = workspace
        self._cwd = cwd
        self._agents: dict[str, ResolvedAgent] = {}
        self._indexes: dict[str, MemoryIndex] = {}
        #: one-shot callers (the CLI without a server) embed pending chunks for this long first
        self.search_embed_budget_s = search_embed_budget_s

    # ------------------------------------------------------------------ agents and managers

    def agent(self, agent_id: str | None = None) -> ResolvedAgent:
        key = agent_id or "main"
        if key not in self._agents:
            self._agents[key] = resolve_agent(self.config, key, workspace=self._workspace, cwd=self._cwd)
        return self._agents[key]

    def agent_ids(self) -> list[str]:
        return agent_ids(self.config)

    def index(self, agent_id: str | None = None) -> MemoryIndex:
        agent = self.agent(agent_id)
        if agent.agent_id not in self._indexes:
            self._indexes[agent.agent_id] = MemoryIndex(agent)
        return self._indexes[agent.agent_id]

    async def aclose(self) -> None:
        for idx in self._indexes.values():
            await idx.aclose()
        self._indexes.clear()

    async def __aenter__(self) -> MemoryService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ tools

    async def memory_search(
        self,
        query: str,
        *,
        agent_id: str | None = None,
        session_key: str | None = None,
        max_results: int | None = None,
        min_score: float | None = None,
    ) -> dict[str, Any]:
        """The `memory_search` tool: results or a visible denial/error, never an exception."""
        try:
            agent = self.agent(agent_id)
            decision = evaluate_scope(agent.memory.effective_scope, session_key)
            if not decision.allowed:
                log.warning(decision.log_message())
                return {"results": [], "scopeDenied": True, "reason": decision.log_message()}
            idx = self.index(agent.agent_id)
            if self.search_embed_budget_s is not None:
                await idx.sync(embed_budget_s=self.search_embed_budget_s)
            outcome = await idx.search(query, max_results=max_results, min_score=min_score)
            results = apply_citations(
                outcome.results,
                agent.memory.citations,
                session_key=session_key,
                max_injected_chars=agent.memory_search.query.max_injected_chars,
            )
            return {
                "results": [r.to_dict() for r in results],
                "backend": "builtin",
                "provider": outcome.provider,
                "model": outcome.model,
                "mode": outcome.mode,
                "fallback": outcome.fallback,
                "citations": any(r.citation for r in results),
                "notes": outcome.notes,
            }
        except MemorydError as err:
            return {"results": [], "disabled": True, "error": str(err)}

    async def memory_get(
        self,
        path: str,
        *,
        from_line: int | None = None,
        lines: int | None = None,
        agent_id: str | None = None,
    ) -> dict[str, Any]:
        """The `memory_get` tool: `{path, text}` or `{path, text: "", disabled, error}`."""
        try:
            return self.index(agent_id).get(path, from_line, lines).to_dict()
        except MemorydError as err:
            return {"path": path, "text": "", "disabled": True, "error": str(err)}

    async def status(self, agent_id: str | None = None) -> dict[str, Any]:
        idx = self.index(agent_id)
        st = idx.status()
        st["requestedBackend"] = idx.agent.memory.backend
        return st
