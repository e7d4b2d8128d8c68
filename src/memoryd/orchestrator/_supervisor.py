"""One agent's backends: qmd as a supervised sidecar with the built-in index as failover.

The rules (see README "Failover and recovery"):
- every qmd failure on the search path (exit, timeout, garbage JSON, missing binary, busy index)
  is answered by the built-in index in the same call, and the reason is recorded;
- after `failureThreshold` consecutive failures the agent is *failed over*: searches go to the
  built-in index straight away (no timeout paid per call) while a background task probes qmd with
  exponential backoff (tenacity) once the cool-down has passed; the first good probe routes
  searches back to qmd;
- with `memory.qmd.fallback = "none"` no built-in index exists and failures surface as errors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
from anyio.abc import TaskGroup
from tenacity import AsyncRetrying, retry_if_result, stop_never, wait_exponential_jitter

from ..builtin_index import MemoryIndex
from ..builtin_index._files import read_memory_file
from ..config import ResolvedAgent
from ..core.results import FileText, SearchResult
from ..errors import MemorydError, QmdError, ServiceUnavailable

log = logging.getLogger("memoryd.supervisor")

PROBE_QUERY = "memoryd recovery probe"


@dataclass
class SearchAnswer:
    results: list[SearchResult]
    backend: str
    provider: str | None
    model: str | None
    mode: str
    fallback: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class FailoverState:
    failures: int = 0
    active: str = "qmd"
    reason: str | None = None
    since: float | None = None
    last_error_at: float | None = None
    probe_attempts: int = 0
    next_probe_at: float | None = None
    recovered_at: float | None = None
    warned: bool = False


class AgentBackend:
    """Serves one agent: `search`, `get`, `sync`, `status`, plus timers when started in a task group."""

    def __init__(
        self,
        agent: ResolvedAgent,
        *,
        qmd_factory: Callable[[ResolvedAgent], Any] | None = None,
        index_factory: Callable[[ResolvedAgent], MemoryIndex] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.agent = agent
        self.requested = agent.memory.backend
        qcfg = agent.memory.qmd
        self.fail_closed = self.requested == "qmd" and qcfg.fallback == "none"
        self._failover = qcfg.failover
        self._clock = clock
        self.state = FailoverState(active="qmd" if self.requested == "qmd" else "builtin")
        self.qmd: Any = None
        if self.requested == "qmd":
            if qmd_factory is None:
                from ..qmd_adapter import QmdManager

                qmd_factory = QmdManager
            self.qmd = qmd_factory(agent)
        self._index_factory = index_factory or MemoryIndex
        self._index: MemoryIndex | None = None
        self._tg: TaskGroup | None = None
        self._probing = False
        self._qmd_started = False
        self._start_error: str | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def index(self) -> MemoryIndex | None:
        """The built-in index (None in fail-closed qmd mode, where none may be built)."""
        if self.fail_closed:
            return None
        if self._index is None:
            self._index = self._index_factory(self.agent)
        return self._index

    async def start(self, tg: TaskGroup | None = None) -> None:
        """Start qmd (collections, timers) and keep the built-in index fresh in the background."""
        self._tg = tg
        if self.qmd is not None:
            if self.agent.memory.qmd.sessions.enabled:
                await self.export_sessions()
                if tg is not None:
                    tg.start_soon(self._export_loop)
            await self._start_qmd(tg)
        idx = self.index
        if idx is not None and tg is not None:
            tg.start_soon(self._keep_index_fresh, idx)

    async def _start_qmd(self, tg: TaskGroup | None) -> None:
        try:
            await self.qmd.start(tg)
            self._qmd_started = True
            self._start_error = None
        except QmdError as err:
            self._start_error = str(err)
            self._record_failure(f"qmd failed to start: {err}")

    async def export_sessions(self) -> bool:
        """Export sanitised transcripts for qmd's sessions collection; True when files changed."""
        from ..lifecycle import export_sessions

        qcfg = self.agent.memory.qmd.sessions
        try:
            report = await anyio.to_thread.run_sync(
                lambda: export_sessions(
                    self.agent,
                    now=datetime.now(UTC),
                    export_dir=self.qmd.sessions_dir,
                    retention_days=qcfg.retention_days,
                )
            )
        except (MemorydError, OSError) as err:
            log.warning("session export failed for %s: %s", self.agent.agent_id, err)
            return False
        return bool(report.changed)

    async def _export_loop(self) -> None:
        interval = min(60.0, max(1.0, self.agent.memory.qmd.update.interval_ms / 1000 or 60.0))
        while True:
            await anyio.sleep(interval)
            if await self.export_sessions() and self._qmd_started:
                self.qmd.request_update()

    async def ensure_qmd_started(self) -> None:
        """Start qmd (home, collections) if it has not started yet; raises a QmdError on failure."""
        if not self._qmd_started:
            await self.qmd.start(self._tg)
            self._qmd_started = True

    async def _keep_index_fresh(self, idx: MemoryIndex) -> None:
        try:
            await idx.sync()
        except MemorydError as err:
            log.warning("built-in index sync failed for %s: %s", self.agent.agent_id, err)
        if idx.cfg.sync.watch:
            await idx.watch()

    def notify_changed(self) -> None:
        """A memory file was written through memoryd: mark indexes dirty, ask qmd for an update."""
        if self._index is not None:
            self._index.dirty = True
        if self.qmd is not None and self._qmd_started and self._tg is not None:
            self.qmd.request_update()

    async def aclose(self) -> None:
        if self.qmd is not None:
            await self.qmd.aclose()
        if self._index is not None:
            await self._index.aclose()

    # ------------------------------------------------------------------ failover state

    def _record_failure(self, reason: str) -> None:
        st = self.state
        now = self._clock()
        st.failures += 1
        st.last_error_at = now
        if st.active == "qmd" and st.failures >= self._failover.failure_threshold:
            st.active = "builtin"
            st.since = now
            st.probe_attempts = 0
            st.recovered_at = None
            st.next_probe_at = now + self._failover.cooldown_ms / 1000
            log.warning(
                "qmd failed for agent %s (%s); serving from the built-in index",
                self.agent.agent_id,
                reason,
            )
            if self._tg is not None and not self._probing:
                self._tg.start_soon(self._probe_loop)
        elif not st.warned:
            log.warning("qmd search failed for agent %s: %s", self.agent.agent_id, reason)
        st.warned = True
        if st.reason is None or st.active == "builtin":
            st.reason = reason

    def _record_success(self) -> None:
        st = self.state
        if st.active == "builtin" and self.requested == "qmd":
            log.warning(
                "qmd recovered for agent %s; routing searches back to qmd", self.agent.agent_id
            )
            st.recovered_at = self._clock()
        # keep how many probes the last recovery took; status shows it
        self.state = FailoverState(
            active="qmd", recovered_at=st.recovered_at, probe_attempts=st.probe_attempts
        )

    async def probe(self) -> bool:
        """One recovery probe: a real qmd search (so hangs and garbage output are caught too)."""
        self.state.probe_attempts += 1
        try:
            await self.ensure_qmd_started()
            await self.qmd.search(PROBE_QUERY, max_results=1)
        except QmdError as err:
            self.state.reason = (
                f"{self.state.reason or 'qmd failed'}; probe {self.state.probe_attempts}: {err}"
            )
            return False
        self._record_success()
        return True

    async def _probe_loop(self) -> None:
        """Background recovery: wait the cool-down, then probe with exponential backoff + jitter."""
        self._probing = True
        try:
            cooldown = max(0.0, (self.state.next_probe_at or self._clock()) - self._clock())
            await anyio.sleep(cooldown)
            initial = max(0.05, self._failover.cooldown_ms / 1000)
            cap = self._failover.probe_max_interval_ms / 1000

            def note_next(retry_state: Any) -> None:
                sleep = retry_state.next_action.sleep if retry_state.next_action else 0
                self.state.next_probe_at = self._clock() + sleep

            async def attempt() -> bool:
                return self.state.active == "qmd" or await self.probe()

            retrying = AsyncRetrying(
                retry=retry_if_result(lambda ok: ok is False),
                wait=wait_exponential_jitter(multiplier=initial, max=cap, jitter=initial / 4),
                stop=stop_never,
                before_sleep=note_next,
                sleep=anyio.sleep,
            )
            await retrying(attempt)
        finally:
            self._probing = False

    # ------------------------------------------------------------------ tools

    async def search(
        self, query: str, *, max_results: int | None = None, min_score: float | None = None
    ) -> SearchAnswer:
        if self.qmd is None:
            return await self._builtin(query, max_results, min_score, fallback=None)
        st = self.state
        # no background task group (one-shot use): probe inline once the cool-down is over
        inline_probe_due = (
            st.active == "builtin"
            and self._tg is None
            and st.next_probe_at is not None
            and self._clock() >= st.next_probe_at
        )
        if inline_probe_due and not await self.probe():
            st.next_probe_at = self._clock() + min(
                self._failover.probe_max_interval_ms / 1000,
                (self._failover.cooldown_ms / 1000) * 2 ** min(st.probe_attempts, 16),
            )
        if self.state.active == "qmd":
            try:
                await self.ensure_qmd_started()
                results = await self.qmd.search(query, max_results=max_results, min_score=min_score)
            except QmdError as err:
                reason = f"{type(err).__name__}: {err}"
                self._record_failure(reason)
                if self.fail_closed:
                    raise ServiceUnavailable(
                        f"qmd unavailable and memory.qmd.fallback = none ({reason})"
                    ) from err
                return await self._builtin(
                    query, max_results, min_score, fallback=self._fallback_info(reason)
                )
            if self.state.failures:
                self._record_success()
            return SearchAnswer(results, "qmd", "qmd", self._qmd_model(), self.qmd.search_mode)
        return await self._builtin(
            query, max_results, min_score, fallback=self._fallback_info(self.state.reason)
        )

    def _fallback_info(self, reason: str | None) -> dict[str, Any]:
        st = self.state
        return {"from": "qmd", "reason": reason, "since": st.since or st.last_error_at}

    def _qmd_model(self) -> str | None:
        return self.agent.memory.qmd.models.embed

    async def _builtin(
        self,
        query: str,
        max_results: int | None,
        min_score: float | None,
        *,
        fallback: dict[str, Any] | None,
    ) -> SearchAnswer:
        idx = self.index
        if idx is None:
            raise ServiceUnavailable("qmd is failed over and memory.qmd.fallback = none")
        outcome = await idx.search(query, max_results=max_results, min_score=min_score)
        merged = fallback or outcome.fallback
        if fallback and outcome.fallback:
            merged = {**fallback, "embedding": outcome.fallback}
        return SearchAnswer(
            outcome.results,
            "builtin",
            outcome.provider,
            outcome.model,
            outcome.mode,
            merged,
            outcome.notes,
        )

    async def get(
        self, path: str, from_line: int | None = None, lines: int | None = None
    ) -> FileText:
        if self.qmd is not None and (path.startswith("qmd/") or path.startswith("qmd://")):
            result: FileText = await self.qmd.read_file(path, from_line, lines)
            return result
        ms = self.agent.memory_search
        shown, text = read_memory_file(self.agent.workspace, ms.extra_paths, path, from_line, lines)
        return FileText(shown, text)

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        st = self.state
        out: dict[str, Any] = {
            "agentId": self.agent.agent_id,
            "backend": st.active if self.qmd is not None else "builtin",
            "requestedBackend": self.requested,
            "fallback": {"from": "qmd", "reason": st.reason, "since": st.since}
            if st.active == "builtin" and self.qmd is not None
            else None,
            "recovery": {
                "attempts": st.probe_attempts,
                "nextProbeAt": st.next_probe_at,
                "recoveredAt": st.recovered_at,
            }
            if self.qmd is not None
            else None,
            "failClosed": self.fail_closed,
            "workspaceDir": str(self.agent.workspace),
        }
        idx = self.index  # None in fail-closed mode
        if idx is not None:
            b = idx.status()
            for key in (
                "provider",
                "model",
                "requestedProvider",
                "providerReason",
                "files",
                "chunks",
                "pendingVectors",
                "dirty",
                "needsReindex",
                "dbPath",
                "sources",
                "sourceCounts",
                "vector",
                "fts",
                "cache",
                "unavailable",
            ):
                out[key] = b[key]
            out["embeddingFallback"] = b["fallback"]
        else:
            out.update(
                {
                    "provider": "qmd",
                    "model": self._qmd_model(),
                    "files": None,
                    "chunks": None,
                    "dirty": False,
                    "dbPath": None,
                    "sources": list(self.agent.memory_search.sources),
                    "sourceCounts": {},
                    "vector": None,
                    "fts": None,
                    "cache": None,
                }
            )
        if self.qmd is not None:
            q = self.qmd.status()
            out["qmd"] = q
            out["collections"] = q.get("collections")
            out["lastUpdateAt"] = q.get("lastUpdateAt")
            out["lastEmbedAt"] = q.get("lastEmbedAt")
            out["searchMode"] = q.get("searchMode")
            out["qmdVersion"] = q.get("version")
            if out["backend"] == "qmd":
                out["provider"], out["model"] = "qmd", self._qmd_model()
        return out
