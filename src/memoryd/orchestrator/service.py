"""`MemoryService`: the one object agents, the CLI and MCP talk to.

It owns one `AgentBackend` per agent (created lazily, cached), applies scope rules and citations
to every search, and never lets an exception reach the agent: tool calls return plain dicts with
`disabled`/`error` or `scopeDenied` instead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..builtin_index import MemoryIndex
from ..config import MemorydConfig, ResolvedAgent, agent_ids, resolve_agent
from ..core.citations import apply_citations
from ..errors import MemorydError
from ..lifecycle import append_memory, build_session_context, check_flush
from ..scope_rules import evaluate_scope
from ._supervisor import AgentBackend
from .status import MemoryStatus

log = logging.getLogger("memoryd")


class MemoryService:
    """Memory for every configured agent; `async with` it (or `await start(tg)`) to run timers."""

    def __init__(
        self,
        config: MemorydConfig,
        *,
        workspace: str | os.PathLike[str] | None = None,
        cwd: Path | None = None,
        search_embed_budget_s: float | None = None,
        qmd_factory: Callable[[ResolvedAgent], Any] | None = None,
        index_factory: Callable[[ResolvedAgent], MemoryIndex] | None = None,
    ) -> None:
        self.config = config
        self._workspace = workspace
        self._cwd = cwd
        self._agents: dict[str, ResolvedAgent] = {}
        self._backends: dict[str, AgentBackend] = {}
        self._qmd_factory = qmd_factory
        self._index_factory = index_factory
        self._tg: TaskGroup | None = None
        self._started: set[str] = set()
        #: one-shot callers (the CLI without a server) embed pending chunks for this long first
        self.search_embed_budget_s = search_embed_budget_s

    # ------------------------------------------------------------------ agents and backends

    def agent(self, agent_id: str | None = None) -> ResolvedAgent:
        key = agent_id or "main"
        if key not in self._agents:
            self._agents[key] = resolve_agent(
                self.config, key, workspace=self._workspace, cwd=self._cwd
            )
        return self._agents[key]

    def agent_ids(self) -> list[str]:
        return agent_ids(self.config)

    def backend(self, agent_id: str | None = None) -> AgentBackend:
        agent = self.agent(agent_id)
        if agent.agent_id not in self._backends:
            self._backends[agent.agent_id] = AgentBackend(
                agent, qmd_factory=self._qmd_factory, index_factory=self._index_factory
            )
        return self._backends[agent.agent_id]

    def index(self, agent_id: str | None = None) -> MemoryIndex:
        idx = self.backend(agent_id).index
        if idx is None:
            raise MemorydError("no built-in index: memory.qmd.fallback = none (fail closed)")
        return idx

    async def start(self, tg: TaskGroup, agent_ids: list[str] | None = None) -> None:
        """Start every agent's timers (qmd update/embed, watcher, recovery) in `tg`."""
        self._tg = tg
        for aid in agent_ids or self.agent_ids():
            await self._ensure_started(aid)

    async def _ensure_started(self, agent_id: str | None) -> AgentBackend:
        b = self.backend(agent_id)
        if b.agent.agent_id not in self._started:
            self._started.add(b.agent.agent_id)
            await b.start(self._tg)
        return b

    async def aclose(self) -> None:
        for b in self._backends.values():
            with anyio.CancelScope(shield=True):
                await b.aclose()
        self._backends.clear()
        self._started.clear()

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
            b = await self._ensure_started(agent.agent_id)
            if (
                self.search_embed_budget_s is not None
                and b.index is not None
                and b.state.active == "builtin"
            ):
                await b.index.sync(embed_budget_s=self.search_embed_budget_s)
            answer = await b.search(query, max_results=max_results, min_score=min_score)
            max_chars = (
                agent.memory.qmd.limits.max_injected_chars
                if answer.backend == "qmd"
                else agent.memory_search.query.max_injected_chars
            )
            results = apply_citations(
                answer.results,
                agent.memory.citations,
                session_key=session_key,
                max_injected_chars=max_chars,
            )
            return {
                "results": [r.to_dict() for r in results],
                "backend": answer.backend,
                "provider": answer.provider,
                "model": answer.model,
                "mode": answer.mode,
                "fallback": answer.fallback,
                "citations": any(r.citation for r in results),
                "notes": answer.notes,
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
            return (await self.backend(agent_id).get(path, from_line, lines)).to_dict()
        except MemorydError as err:
            return {"path": path, "text": "", "disabled": True, "error": str(err)}

    # ------------------------------------------------------------------ lifecycle

    async def context(
        self,
        *,
        agent_id: str | None = None,
        session_key: str | None = None,
        today: date | None = None,
    ) -> dict[str, Any]:
        """What the agent loads at session start (see lifecycle.build_session_context)."""
        agent = self.agent(agent_id)
        ctx = build_session_context(
            agent,
            session_key,
            today=today or datetime.now().astimezone().date(),
            budget_chars=agent.bootstrap_max_chars,
            total_budget_chars=agent.bootstrap_total_max_chars,
        )
        return ctx.to_dict()

    async def append(
        self, target: str, text: str, *, agent_id: str | None = None
    ) -> dict[str, Any]:
        """The `memory_append` tool: `{path, bytesWritten, created}` or `{disabled, error}`."""
        try:
            agent = self.agent(agent_id)
            result = await anyio.to_thread.run_sync(
                lambda: append_memory(agent, target, text, now=datetime.now().astimezone())
            )
            b = self._backends.get(agent.agent_id)
            if b is not None:
                b.notify_changed()
            return result.to_dict()
        except MemorydError as err:
            return {"disabled": True, "error": str(err)}

    async def flush_check(
        self,
        *,
        session_key: str | None,
        token_estimate: int,
        context_window: int,
        compaction_count: int,
        session_id: str | None = None,
        record: bool = True,
        agent_id: str | None = None,
    ) -> dict[str, Any]:
        decision = await anyio.to_thread.run_sync(
            lambda: check_flush(
                self.agent(agent_id),
                session_key,
                token_estimate=token_estimate,
                context_window=context_window,
                compaction_count=compaction_count,
                session_id=session_id,
                record=record,
            )
        )
        return decision.to_dict()

    async def status_model(self, agent_id: str | None = None) -> MemoryStatus:
        """The typed status of one agent (see `orchestrator.status.MemoryStatus`)."""
        b = self.backend(agent_id)
        if b.qmd is not None and b.qmd.status().get("version") is None:
            with anyio.move_on_after(5):
                await b.qmd.probe()
        return MemoryStatus.model_validate(b.status())

    async def status(self, agent_id: str | None = None) -> dict[str, Any]:
        """`status_model()` as JSON-ready camelCase dict."""
        return (await self.status_model(agent_id)).to_dict()
