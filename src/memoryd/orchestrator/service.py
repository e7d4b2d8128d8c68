"""`MemoryService`: the one object agents, the CLI, MCP and `serve` talk to; scope rules before,
citations and the injected-characters budget after every search, whichever engine answered."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from contextlib import suppress
from dataclasses import asdict, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..background import Background
from ..config import MemorydConfig, ResolvedAgent, agent_ids, resolve_agent
from ..core.citations import apply_citations
from ..core.engine import (
    Corpus,
    ProgressFn,
    SearchOutput,
    SearchRequest,
    check_search_input,
)
from ..core.text import camel_case
from ..errors import InvalidInput, MemorydError, QmdError, SearchDisabled
from ..fsio import check_state_tree
from ..memfiles import read_memory_file
from ..scope_rules import scope_denial
from ._supervisor import AgentBackend, IndexFactory, QmdFactory, builtin_engine, qmd_engine
from .failover import Active

if TYPE_CHECKING:
    from .status import MemoryStatus

log = logging.getLogger("memoryd")


def _sessions_off(agent: ResolvedAgent, backend: str) -> list[str]:
    """Why a search of the transcripts alone finds nothing, when transcripts are not indexed."""
    if backend == "qmd":
        if agent.memory.qmd.sessions.enabled:
            return []
        how = "set memory.qmd.sessions.enabled = true"
    else:
        if agent.sessions_enabled:
            return []
        how = (
            'set memorySearch.experimental.sessionMemory = true and add "sessions" to '
            "memorySearch.sources"
        )
    return [f"session transcripts are not indexed for agent {agent.agent_id}: {how}"]


class MemoryService:
    """Memory for every configured agent; `background=False` runs no background work (each search
    catches the index up itself), `one_off`: engines load what is fastest for one command."""

    def __init__(
        self,
        config: MemorydConfig,
        *,
        workspace: str | os.PathLike[str] | None = None,
        cwd: Path | None = None,
        background: bool = True,
        one_off: bool = False,
        qmd_factory: QmdFactory | None = None,
        index_factory: IndexFactory | None = None,
    ) -> None:
        self.config = config
        self._workspace = workspace
        self._cwd = cwd
        self._agents: dict[str, ResolvedAgent] = {}
        self._backends: dict[str, AgentBackend] = {}
        self._qmd_factory = qmd_factory
        self._index_factory = index_factory
        self._background = background
        self._one_off = one_off
        self._own_bg: Background | None = None
        self._bg: Background | None = None
        self._lock = threading.RLock()  # `serve` answers on several threads at once
        self._started: set[str] = set()

    # ------------------------------------------------------------------ agents and backends

    def agent(self, agent_id: str | None = None) -> ResolvedAgent:
        key = "main" if agent_id is None else agent_id
        if key not in self._agents:
            resolved = resolve_agent(self.config, key, workspace=self._workspace, cwd=self._cwd)
            check_state_tree(resolved.state.root)  # refuse an untrusted state tree up front
            self._agents[key] = resolved
            self._agents.setdefault(resolved.agent_id, resolved)
        return self._agents[key]

    def agent_ids(self) -> list[str]:
        return agent_ids(self.config)

    def backend(self, agent_id: str | None = None) -> AgentBackend:
        agent = self.agent(agent_id)
        if agent.agent_id not in self._backends:
            self._backends[agent.agent_id] = AgentBackend(
                agent,
                qmd_factory=self._qmd_factory or qmd_engine,
                index_factory=self._index_factory
                or functools.partial(builtin_engine, one_off=self._one_off),
            )
        return self._backends[agent.agent_id]

    def index(
        self,
        agent_id: str | None = None,
        *,
        force: bool = False,
        progress: ProgressFn | None = None,
    ) -> dict[str, Any]:
        """`memoryd index`: bring qmd and the built-in index up to date now; what was done."""
        b = self.backend(agent_id)
        out: dict[str, Any] = {}
        idx = b.index
        if b.qmd is not None:
            b.ensure_qmd_started()
            if b.agent.memory.qmd.sessions.enabled:
                b.export_sessions()  # what qmd's update then indexes is the transcripts as now
            b.qmd.sync()
            q = b.qmd.status()
            out["qmd"] = {
                "lastUpdateAt": q.last_update_at,
                "lastEmbedAt": q.last_embed_at,
                "collections": [c.name for c in q.collections],
            }
        if idx is not None:
            report = idx.sync(force=force, progress=progress)
            st = idx.status()
            out.update((camel_case(k), v) for k, v in asdict(report).items())
            out.update(
                seconds=round(report.seconds, 3),
                files=st.files,
                chunks=st.chunks,
                dbPath=st.db_path,
                provider=st.provider,
                model=st.model,
                vectorEngine=st.vector.engine,
                skipped=[f.to_dict() for f in st.skipped_files],
            )
        return out

    def start(self, background: Background, agent_ids: list[str] | None = None) -> None:
        """Start every agent's timers (qmd update/embed, watcher, recovery) on `background`."""
        self._bg = background
        for aid in agent_ids or self.agent_ids():
            if self.agent(aid).memory_search.enabled:  # no index and no watcher otherwise
                self._ensure_started(aid)

    def _ensure_started(self, agent_id: str | None) -> AgentBackend:
        with self._lock:
            b = self.backend(agent_id)
            if b.agent.agent_id not in self._started:
                self._started.add(b.agent.agent_id)
                b.start(self._bg)
            return b

    def close(self) -> None:
        """Stop the background work this service started, then close every engine."""
        bg, self._own_bg = self._own_bg, None
        if bg is not None:
            bg.stop()  # the background work ends before the engines close
        self._bg = None
        with self._lock:
            for b in self._backends.values():
                b.close()
            self._backends.clear()
            self._started.clear()

    def __enter__(self) -> MemoryService:
        if self._background and self._bg is None:
            self._bg = self._own_bg = Background()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ raising API

    def search(
        self,
        query: str,
        *,
        agent_id: str | None = None,
        session_key: str | None = None,
        max_results: int | None = None,
        min_score: float | None = None,
        corpus: Corpus = "all",
        explain: bool = False,
    ) -> SearchOutput:
        """Search memory; a scope denial is an answer (`scope_denied`), every failure raises.
        With `explain`, each result says how it was ranked (`SearchResult.explain`)."""
        text = check_search_input(query, max_results, min_score)
        agent = self._searchable(agent_id)
        denial = scope_denial(agent.memory.effective_scope, session_key)
        if denial is not None:
            log.warning(denial)
            return SearchOutput([], scope_denied=denial)
        b = self._ensure_started(agent.agent_id)
        notes: list[str] = []
        if corpus == "sessions":
            notes.extend(_sessions_off(agent, b.failover.active))
        # how long the built-in index may first catch up
        wait_s = (
            agent.memory_search.sync.search_wait_ms / 1000
            if b.failover.active == "builtin"
            else None
        )
        answer = b.search(SearchRequest(text, max_results, min_score, corpus, wait_s, explain))
        results = apply_citations(
            answer.results,
            agent.memory.citations,
            session_key=session_key,
            max_injected_chars=answer.max_injected_chars,
        )
        return replace(answer, results=results, notes=[*notes, *answer.notes])

    def get(
        self,
        path: str,
        *,
        from_line: int | None = None,
        lines: int | None = None,
        agent_id: str | None = None,
    ) -> dict[str, Any]:
        """`{path, text}` of a memory file or line range; raises `PathNotAllowed`/`InvalidInput`."""
        if not isinstance(path, str):
            raise InvalidInput("path must be a string")
        agent = self._searchable(agent_id)
        # by the roots of the engine that indexes the files; no engine is built for it
        roots = self.backend(agent.agent_id).memory_roots()
        return read_memory_file(roots, agent.workspace, path, from_line, lines).to_dict()

    def _searchable(self, agent_id: str | None) -> ResolvedAgent:
        """The agent, unless OpenClaw's `memorySearch.enabled = false` takes its memory tools away."""
        agent = self.agent(agent_id)
        if not agent.memory_search.enabled:
            raise SearchDisabled(
                f"memory search is disabled for agent {agent.agent_id} (memorySearch.enabled = false)"
            )
        return agent

    # ------------------------------------------------------------------ tools (never raise)

    def memory_search(
        self,
        query: str,
        *,
        agent_id: str | None = None,
        session_key: str | None = None,
        max_results: int | None = None,
        min_score: float | None = None,
        corpus: Corpus = "all",
    ) -> dict[str, Any]:
        """The `memory_search` tool: results or a visible denial/error, never an exception."""
        try:
            return self.search(
                query,
                agent_id=agent_id,
                session_key=session_key,
                max_results=max_results,
                min_score=min_score,
                corpus=corpus,
            ).to_dict()
        except MemorydError as err:
            return err.to_result(results=[])

    def memory_get(
        self,
        path: str,
        *,
        from_line: int | None = None,
        lines: int | None = None,
        agent_id: str | None = None,
    ) -> dict[str, Any]:
        """The `memory_get` tool: `{path, text}` or `{path, text: "", disabled, error, code}`."""
        try:
            return self.get(path, from_line=from_line, lines=lines, agent_id=agent_id)
        except MemorydError as err:
            return err.to_result(path=path, text="")

    # ------------------------------------------------------------------ lifecycle

    def context(
        self,
        *,
        agent_id: str | None = None,
        session_key: str | None = None,
    ) -> dict[str, Any]:
        """What the agent loads at session start (the `memory_context` tool)."""
        from ..lifecycle.context import build_session_context

        agent = self.agent(agent_id)
        ctx = build_session_context(agent, session_key, today=datetime.now().astimezone().date())
        if agent.memory_search.sync.on_session_start:
            self._notify_changed(agent.agent_id)
        return ctx.to_dict()

    def _notify_changed(self, agent_id: str) -> None:
        b = self._backends.get(agent_id)
        if b is not None:
            b.notify_changed()

    def append(self, target: str, text: str, *, agent_id: str | None = None) -> dict[str, Any]:
        """Append to a memory file (the `memory_append` tool): `{path, bytesWritten, created}`."""
        from ..lifecycle.writes import append_memory

        agent = self.agent(agent_id)
        result = append_memory(agent, target, text, now=datetime.now().astimezone())
        self._notify_changed(agent.agent_id)
        return result.to_dict()

    def flush_check(
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
        """Whether to run the memory flush now (the `memory_flush_check` tool)."""
        from ..lifecycle.flush import check_flush

        decision = check_flush(
            self.agent(agent_id),
            session_key,
            token_estimate=token_estimate,
            context_window=context_window,
            compaction_count=compaction_count,
            session_id=session_id,
            record=record,
        )
        return decision.to_dict()

    # ------------------------------------------------------------------ forget and reset

    def forget_plan(
        self, target: str, *, agent_id: str | None = None, max_results: int = 3
    ) -> dict[str, Any]:
        """What `forget target` would remove, nothing written: `{mode, selections, confirm}`.

        `PATH#Lx-Ly` names lines; a bare `PATH` is the whole file and anything else a query:
        the lines of its best `max_results` memory hits that hold at least half of the query's
        words. `confirm` says the caller must have the user confirm the list first."""
        from ..lifecycle.forget import parse_target, select_lines
        from ..lifecycle.writes import check_writable

        if not isinstance(target, str) or not target.strip():
            raise InvalidInput("forget needs a PATH#Lx-Ly or a query")
        agent = self.agent(agent_id)
        check_writable(agent, "forget")
        roots = self.backend(agent.agent_id).memory_roots()
        spec = parse_target(target)
        if spec is not None:
            sel = select_lines(agent, roots, *spec)
            return {"mode": "path", "selections": [sel.to_dict()], "confirm": spec[1] is None}
        selections = self._query_selections(agent, roots, target, max_results)
        return {"mode": "query", "query": target, "selections": selections, "confirm": True}

    def _query_selections(
        self, agent: ResolvedAgent, roots: list[Any], query: str, max_results: int
    ) -> list[dict[str, Any]]:
        from ..core.forgotten import words
        from ..lifecycle.forget import select_lines

        found = self.search(
            query, agent_id=agent.agent_id, max_results=max_results, corpus="memory"
        )
        asked = {w for w, _s, _e in words(query)}
        wanted = {w for w in asked if len(w) >= 3} or asked
        need = max(1, (len(wanted) + 1) // 2)
        by_path: dict[str, set[int]] = {}
        for r in found.results:
            if r.source == "memory":
                by_path.setdefault(r.path, set()).update(range(r.start_line, r.end_line + 1))
        out = []
        for path, numbers in by_path.items():
            sel = select_lines(agent, roots, path, sorted(numbers), clip=True)
            keep = {
                n: text
                for n, text in sel.lines.items()
                if len(wanted & {w for w, _s, _e in words(text)}) >= need
            }
            if keep:
                out.append(replace(sel, lines=keep).to_dict())
        return out

    def forget(
        self,
        selections: list[dict[str, Any]],
        *,
        agent_id: str | None = None,
        progress: ProgressFn | None = None,
    ) -> dict[str, Any]:
        """Remove the lines a `forget_plan` showed (each `{path, ranges, sha256}`, refused if
        they changed since), then purge them from both engines and any transcript's index."""
        from ..lifecycle.forget import forget_lines, select_lines, transcripts_with_forgotten
        from ..lifecycle.writes import check_writable

        agent = self.agent(agent_id)
        check_writable(agent, "forget")
        wanted = _checked_selections(selections)
        b = self.backend(agent.agent_id)
        roots = b.memory_roots()
        now = datetime.now().astimezone()
        removed: list[dict[str, Any]] = []
        try:
            for path, numbers, digest in wanted:
                sel = select_lines(agent, roots, path, numbers)
                removed.append(forget_lines(agent, sel, digest, now=now))
        except MemorydError:
            if removed:  # what is gone from its file must go from the engines too
                b.purge([r["path"] for r in removed])
            raise
        scrubbed = transcripts_with_forgotten(agent) if agent.sessions_enabled else []
        try:
            engines = b.purge([r["path"] for r in removed] + scrubbed, progress=progress)
        except MemorydError as err:
            gone = "; ".join(f"{r['path']} {r['ranges']} (backup {r['backup']})" for r in removed)
            raise MemorydError(
                f"removed {gone}, but an engine may still return it: {err}; "
                "run `memoryd index` (or `memoryd reset --yes`) once that is fixed"
            ) from None
        return {"removed": removed, "transcriptsPurged": scrubbed, "engines": engines}

    def reset(
        self, agent_id: str | None = None, *, progress: ProgressFn | None = None
    ) -> dict[str, Any]:
        """Drop everything derived for the agent and workspace and rebuild it from the files."""
        from ..lifecycle.writes import check_writable

        agent = self.agent(agent_id)
        check_writable(agent, "reset")
        with self._lock:
            out = self.backend(agent.agent_id).reset(progress=progress)
        return {"agentId": agent.agent_id, "workspace": str(agent.workspace), **out}

    # ------------------------------------------------------------------ status

    def status_model(self, agent_id: str | None = None, *, deep: bool = False) -> MemoryStatus:
        """The typed status of one agent, the same from every process; `deep` probes qmd for real."""
        # imported here: only processes that report status define the status models
        from .status import FallbackInfo, FreshnessInfo, MemoryStatus, RecoveryInfo

        b = self.backend(agent_id)
        agent, idx = b.agent, b.index
        backend: Active = "builtin"
        serving: dict[str, Any] = {}
        if b.qmd is not None:
            self._probe_qmd(b, deep)
            updated = b.reload_health()
            # one reading: a probe finishing meanwhile must not pair its backend with older recovery
            st = b.failover.state
            backend = st.active
            qstat = b.qmd.status()
            lag, newest, indexed = b.qmd_lag()
            serving = dict(
                fallback=FallbackInfo(reason=st.reason, since=st.since)
                if st.active == "builtin"
                else None,
                recovery=RecoveryInfo.model_validate(st, from_attributes=True),
                health_updated_at=updated,
                health_age_s=round(time.time() - updated, 1) if updated else None,
                qmd_version=qstat.version,
                search_mode=qstat.search_mode,
                last_update_at=qstat.last_update_at,
                last_embed_at=qstat.last_embed_at,
                freshness=FreshnessInfo(
                    stale=lag is not None,
                    stale_seconds=lag if lag != float("inf") else None,
                    newest_file_at=newest,
                    indexed_at=indexed,
                ),
                qmd=qstat,
                provider="qmd",
                model=agent.memory.qmd.models.embed,
            )
        check = idx.check() if deep and idx is not None else None
        builtin = None
        if idx is not None:
            builtin = idx.status().model_copy(update={"dirty": idx.pending_changes() > 0})
            if backend == "builtin":
                serving.update(provider=builtin.provider, model=builtin.model)
        elif backend == "builtin":
            serving.update(provider=None, model=None)
        model = MemoryStatus(
            agent_id=agent.agent_id,
            workspace_dir=str(agent.workspace),
            state_dir=str(agent.state.root),
            backend=backend,
            requested_backend=agent.memory.backend,
            fail_closed=b.fail_closed,
            files=builtin.files if builtin else None,
            chunks=builtin.chunks if builtin else None,
            pending_vectors=builtin.pending_vectors if builtin else 0,
            dirty=builtin.dirty if builtin else False,
            db_path=builtin.db_path if builtin else None,
            sources=list(agent.memory_search.sources),
            builtin=builtin,
            check=check.to_dict() if check is not None else None,
            **serving,
        )
        return model.with_issues()

    @staticmethod
    def _probe_qmd(b: AgentBackend, deep: bool) -> None:
        """`deep`: probe qmd for real; a qmd never validated is asked its version, within 5 s."""
        assert b.qmd is not None
        if deep:
            if b.failover.active == "builtin":
                b.probe()
            else:
                b.search(SearchRequest("memoryd status probe", max_results=1))
        q = b.qmd.status()
        if q.version is None and q.version_error is None:
            with suppress(QmdError), b.qmd.bounded(time.monotonic() + 5):
                b.check_version()

    def status(self, agent_id: str | None = None, *, deep: bool = False) -> dict[str, Any]:
        """`status_model()` as JSON-ready camelCase dict."""
        return (self.status_model(agent_id, deep=deep)).to_dict()


def _checked_selections(raw: object) -> list[tuple[str, list[int], str]]:
    """`forget`'s selections as (path, line numbers, sha256), or `InvalidInput`."""
    if not isinstance(raw, list) or not raw:
        raise InvalidInput("selections must be a non-empty list of {path, ranges, sha256}")
    out = []
    for item in raw:
        fields = item if isinstance(item, dict) else {}
        path, ranges, digest = fields.get("path"), fields.get("ranges"), fields.get("sha256")
        ok = isinstance(ranges, list) and all(
            isinstance(r, list) and len(r) == 2 and all(type(n) is int and n >= 1 for n in r)
            for r in ranges
        )
        if not isinstance(path, str) or not isinstance(digest, str) or not ok or not ranges:
            raise InvalidInput("each selection needs a path, ranges [[first, last], …] and sha256")
        numbers = [n for first, last in ranges for n in range(first, last + 1)]
        out.append((path, numbers, digest))
    return out
