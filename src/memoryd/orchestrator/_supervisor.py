"""One agent's engines: qmd as a supervised sidecar, the built-in index as its failover (state in
`health.json`, so another process does not pay qmd's timeout again during the cool-down)."""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..background import Background
from ..config import ResolvedAgent
from ..core.engine import BuiltinEngine, ProgressFn, QmdEngine, SearchOutput, SearchRequest
from ..core.layout import MemoryRoot
from ..core.text import query_terms
from ..errors import MemorydError, QmdError, QmdTimeout, ServiceUnavailable, StateError
from ..fsio import private_dir, read_private, write_private_atomic
from ..memfiles import discover
from .failover import Failover, FailoverState, clean_reason

if TYPE_CHECKING:  # imported where used: a builtin agent never loads the qmd adapter
    from ..builtin_index import MemoryIndex
    from ..lifecycle.session_export import ExportReport
    from ..qmd_adapter import QmdManager

log = logging.getLogger("memoryd.supervisor")

PROBE_QUERY = "memoryd recovery probe"
HEALTH_VERSION = 1
QmdFactory = Callable[[ResolvedAgent], QmdEngine]
IndexFactory = Callable[[ResolvedAgent], BuiltinEngine]


def builtin_engine(agent: ResolvedAgent, *, one_off: bool = False) -> MemoryIndex:
    """The agent's built-in index; see `one_off` in `MemoryService`."""
    from ..builtin_index import MemoryIndex
    from ..embeddings.selection import select_provider

    # cheap: builds no client, loads no model
    selection = select_provider(agent.memory_search, agent.models, one_off=one_off)
    return MemoryIndex(agent.index_settings(), selection, one_off=one_off)


def qmd_engine(agent: ResolvedAgent) -> QmdManager:
    """The agent's qmd sidecar manager."""
    from ..qmd_adapter import QmdManager

    return QmdManager(agent.qmd_settings())


class AgentBackend:
    """Serves one (agent, workspace): `search`, `memory_roots`, status, plus timers when started."""

    def __init__(
        self,
        agent: ResolvedAgent,
        *,
        qmd_factory: QmdFactory,
        index_factory: IndexFactory,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[float], float] | None = None,
    ) -> None:
        self.agent = agent
        self.fail_closed = agent.memory.backend == "qmd" and agent.memory.qmd.fallback == "none"
        self._clock = clock
        self._jitter = jitter or (lambda scale: random.uniform(0, scale / 4))
        self.failover = Failover(agent.memory.qmd.failover)
        #: when `health.json` was written (by any process), as this one last read or wrote it
        self.health_updated_at: float | None = None
        self.qmd: QmdEngine | None = None
        if agent.memory.backend == "qmd":
            self.reload_health()
            self.qmd = qmd_factory(agent)
        else:
            self.failover.state = FailoverState(active="builtin")
        self._index_factory = index_factory
        self._index: BuiltinEngine | None = None
        self._background: Background | None = None
        self._probing = False
        self._qmd_started = False
        self._start_lock = threading.Lock()
        #: set when the background start-up in flight ends (either way); None when none runs
        self._start_done: threading.Event | None = None
        self._start_error: QmdError | None = None
        self._warned = False

    # ------------------------------------------------------------------ engines

    @property
    def index(self) -> BuiltinEngine | None:
        """The built-in index (None in fail-closed qmd mode, where none may be built)."""
        if self.fail_closed:
            return None
        if self._index is None:
            self._index = self._index_factory(self.agent)
        return self._index

    def _save(self) -> None:
        """Write the failover state to `health.json` as this process's, now; a read-only state
        dir only loses it."""
        if self.qmd is None:
            return
        now = time.time()
        doc = {
            "version": HEALTH_VERSION,
            "failover": asdict(self.failover.state),
            "updatedAt": now,
            "pid": os.getpid(),
        }
        with suppress(StateError):
            private_dir(self.agent.state.root)
            text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
            write_private_atomic(self.agent.state.health, text.encode())
        self.health_updated_at = now

    def start(self, background: Background | None = None) -> None:
        """Start qmd (on a thread, or in a one-off command's first search) and the index."""
        self._background = background
        if self.qmd is not None:
            if self.agent.memory.qmd.sessions.enabled:
                self.export_sessions()
                if background is not None:
                    background.spawn("session-export", self._export_loop)
            self._start_in_background()
        idx = self.index
        if idx is not None:
            idx.start(background)

    def export_sessions(self) -> bool:
        """Export sanitised transcripts for qmd's sessions collection; True when files changed."""
        from ..lifecycle.session_export import export_sessions

        try:
            report = export_sessions(self.agent, now=datetime.now(UTC))
        except (MemorydError, OSError) as err:
            log.warning("session export failed for %s: %s", self.agent.agent_id, err)
            return False
        return bool(report.changed)

    def _export_loop(self) -> None:
        assert self._background is not None
        interval = min(60.0, max(1.0, self.agent.memory.qmd.update.interval_ms / 1000 or 60.0))
        while not self._background.stopping.wait(interval):
            if self.export_sessions() and self._qmd_started and self.qmd is not None:
                self.qmd.notify_changed()

    def _start_in_background(self) -> None:
        """Run qmd's start-up on a background thread, unless it runs already or is done."""
        if self._qmd_started or self._start_done is not None or self._background is None:
            return
        self._start_done = done = threading.Event()
        self._background.spawn("qmd-start", lambda: self._start_qmd(done))

    def _start_qmd(self, done: threading.Event) -> None:
        try:
            self.ensure_qmd_started()
            self._start_error = None
        except QmdError as err:
            self._start_error = err
            self._record_failure(f"{type(err).__name__}: qmd failed to start: {err}")
        finally:
            self._start_done = None
            done.set()

    def ensure_qmd_started(self) -> None:
        """Start qmd (home, collections) if it has not started yet; raises a QmdError on failure."""
        if self.qmd is None or self._qmd_started:
            return
        with self._start_lock:
            if not self._qmd_started:
                self.qmd.start(self._background)
                self._qmd_started = True

    def _qmd_ready(self, timeout_s: float) -> None:
        """qmd has started (home, collections), waited for at most `timeout_s`; else `QmdTimeout`."""
        if self.qmd is None or self._qmd_started:
            return
        if self._background is not None:
            self._start_in_background()
            done = self._start_done
            if done is not None:
                done.wait(timeout_s)
            if self._qmd_started:
                return
            if self._start_error is not None and self._start_done is None:
                raise self._start_error
        else:
            with suppress(QmdTimeout):  # said below, as a start-up that did not finish in time
                self._within(timeout_s, self.ensure_qmd_started)
            if self._qmd_started:
                return
        raise QmdTimeout(
            f"qmd is still starting after {timeout_s:g}s (its home and collections are not "
            "ready); `memoryd warm` finishes the start-up"
        )

    def notify_changed(self) -> None:
        """A memory file was written through memoryd: refresh every engine soon."""
        if self._index is not None:
            self._index.notify_changed()
        if self.qmd is not None and self._qmd_started and self._background is not None:
            self.qmd.notify_changed()

    def purge(self, paths: list[str], *, progress: ProgressFn | None = None) -> dict[str, Any]:
        """After `memoryd forget`: drop `paths` from every engine; a failure raises, since text
        must not be reported gone from an engine that may still return it."""
        out: dict[str, Any] = {}
        idx = self.index
        if idx is not None:
            report = idx.purge(paths, progress=progress)
            out["builtin"] = {"filesChanged": report.files_changed}
        if self.qmd is not None:
            export = self._resync_qmd()
            if export is not None:
                out["exports"] = {"written": export.written, "deleted": export.deleted}
            out["qmd"] = {"updated": True}
        return out

    def _resync_qmd(self) -> ExportReport | None:
        """Re-export the sessions (through the tombstones) and update qmd now."""
        from ..lifecycle.session_export import export_sessions

        assert self.qmd is not None
        export = None
        if self.agent.memory.qmd.sessions.enabled:
            export = export_sessions(self.agent, now=datetime.now(UTC))
        self.ensure_qmd_started()
        self.qmd.sync()
        return export

    def reset(self, *, progress: ProgressFn | None = None) -> dict[str, Any]:
        """`memoryd reset`: drop everything derived in place (a running `serve` keeps its objects),
        then rebuild the built-in index and then qmd from the files."""
        from ..lifecycle.forget import remove_derived

        removed = remove_derived(self.agent, index_file=self.fail_closed, qmd_home=self.qmd is None)
        self.health_updated_at = None
        self.failover.state = FailoverState(active="qmd" if self.qmd is not None else "builtin")
        out: dict[str, Any] = {"removed": removed}
        idx = self.index
        if idx is not None:
            removed += idx.reset()
            report = idx.sync(progress=progress)
            st = idx.status()
            out["builtin"] = {
                "files": st.files,
                "chunks": st.chunks,
                "vectorsPending": report.vectors_pending,
            }
        if self.qmd is not None:
            removed += self.qmd.reset()
            self._resync_qmd()
            out["qmd"] = {"collections": [c.name for c in self.qmd.status().collections]}
        self._save()
        return out

    def close(self) -> None:
        if self.qmd is not None:
            self.qmd.close()
        if self._index is not None:
            self._index.close()

    # ------------------------------------------------------------------ failover

    def _record_failure(self, reason: str) -> None:
        now = self._clock()
        flipped = self.failover.record_failure(reason, now)
        if flipped:
            log.warning(
                "qmd failed for agent %s (%s); serving from the built-in index",
                self.agent.agent_id,
                self.failover.state.reason,
            )
            if self._background is not None and not self._probing:
                self._probing = True
                self._background.spawn("qmd-probe", self._probe_loop)
        elif not self._warned:
            log.warning("qmd search failed for agent %s: %s", self.agent.agent_id, reason)
        self._warned = True
        self._save()

    def probe(self) -> None:
        """One recovery probe: `qmd --version`, then a real search (catching hangs and garbage)."""
        assert self.qmd is not None
        now = self._clock()
        try:
            timeout_s = self._search_timeout_s()
            if self._background is not None:
                self._probe_steps()
            elif not self._within(timeout_s, self._probe_steps):
                raise QmdTimeout(f"the recovery probe did not finish within {timeout_s:g}s")
        except QmdError as err:
            scale = self.failover.settings.cooldown_ms / 1000
            self.failover.record_probe_failure(
                f"{type(err).__name__}: {err}", now, self._jitter(scale)
            )
            self._save()
            return
        self.failover.record_probe_success(self._clock())
        self._recovered()

    def _recovered(self) -> None:
        log.warning("qmd recovered for agent %s; routing searches back to qmd", self.agent.agent_id)
        self._save()

    def _within(self, timeout_s: float, step: Callable[[], object]) -> bool:
        """`step()` with every qmd call bounded by `timeout_s`; False when that bound ran out
        (qmd's own, shorter timeout raises)."""
        assert self.qmd is not None
        deadline = time.monotonic() + timeout_s
        try:
            with self.qmd.bounded(deadline):
                step()
        except QmdTimeout:
            if time.monotonic() < deadline:
                raise
            return False
        return True

    def _probe_steps(self) -> None:
        assert self.qmd is not None
        self.ensure_qmd_started()
        self.qmd.probe()
        self.qmd.search(SearchRequest(PROBE_QUERY, max_results=1))

    def check_version(self) -> None:
        """`qmd --version` (`QmdEngine.probe`); a qmd that does not answer as one does not serve."""
        assert self.qmd is not None
        try:
            self.qmd.probe()
        except QmdError as err:
            if self.failover.active == "qmd":
                self._record_failure(f"{type(err).__name__}: {err}")
            raise

    def _search_timeout_s(self) -> float:
        return self.agent.memory.qmd.limits.timeout_ms / 1000

    def _probe_loop(self) -> None:
        """Background recovery: sleep until the next probe is due, probe, repeat until qmd is back."""
        assert self._background is not None
        stopping = self._background.stopping
        try:
            while self.failover.active == "builtin":
                due = self.failover.state.next_probe_at or self._clock()
                if stopping.wait(max(0.0, due - self._clock())):
                    return
                if self.failover.active != "builtin":
                    break
                self.probe()
        finally:
            self._probing = False

    # ------------------------------------------------------------------ tools

    def search(self, request: SearchRequest) -> SearchOutput:
        if self.qmd is None:
            return self._builtin(request)
        # no background threads (one-shot use): probe in this call once the cool-down is over
        if self._background is None and self.failover.probe_due(self._clock()):
            self.probe()
        if self.failover.active == "builtin":
            return self._builtin(request, failed_over=True)
        try:
            self._qmd_ready(self._search_timeout_s())
            stale = self._refresh_if_stale()
            answer = replace(self.qmd.search(request), engine="qmd", stale_seconds=stale)
        except QmdError as err:
            reason = f"{type(err).__name__}: {err}"
            if err is not self._start_error:  # a failed start-up recorded itself
                self._record_failure(reason)
            if self.fail_closed:
                raise ServiceUnavailable(
                    f"qmd unavailable and memory.qmd.fallback = none ({clean_reason(reason)})"
                ) from err
            return self._builtin(request, failed_over=True)
        if self.failover.state.failures and self.failover.record_success(self._clock()):
            self._recovered()
        # qmd found nothing: with `memory.qmd.emptyResults = "builtin"`, a question of two or
        # more content words gets the built-in index's hits, each marked `backend: builtin`
        complete = self.agent.memory.qmd.empty_results == "builtin" and not answer.results
        idx = self.index if complete and len(query_terms(request.query)) >= 2 else None
        if idx is None:
            return answer
        hits = [r.with_(engine="builtin") for r in idx.search(request).results]
        note = "qmd found nothing; completed by the built-in index"
        return replace(answer, results=hits, notes=[*answer.notes, note] if hits else answer.notes)

    def _refresh_if_stale(self) -> float | None:
        """Without timers, update qmd first (within `sync.searchWaitMs`); how stale it still is."""
        assert self.qmd is not None
        stale = self.qmd_lag()[0]
        if stale is None or self._background is not None:
            return stale
        self._within(self.agent.memory_search.sync.search_wait_ms / 1000, self.qmd.sync)
        return self.qmd_lag()[0]

    def _builtin(self, request: SearchRequest, *, failed_over: bool = False) -> SearchOutput:
        idx = self.index
        if idx is None:
            raise ServiceUnavailable("qmd is failed over and memory.qmd.fallback = none")
        answer = idx.search(request)
        fallback = answer.degraded
        if failed_over:
            st = self.failover.state
            fallback = {"from": "qmd", "reason": st.reason, "since": st.since or st.last_error_at}
            if answer.degraded:
                fallback["embedding"] = answer.degraded
        return replace(answer, engine="builtin", fallback=fallback, stale_seconds=None)

    # ------------------------------------------------------------------ status

    def memory_roots(self) -> list[MemoryRoot]:
        """The roots of the engine that indexes this agent's files."""
        if self.qmd is not None:
            return self.qmd.roots()
        return list(self.agent.memory_roots())

    def qmd_lag(self) -> tuple[float | None, float | None, float | None]:
        """(how far qmd's last update lags the newest memory file: None when it does not, inf
        when qmd never updated; that file's mtime; qmd's last update)."""
        assert self.qmd is not None
        mtimes = []
        for mf in discover(self.memory_roots(), self.agent.workspace).files:
            with suppress(OSError):
                mtimes.append(mf.abs_path.stat().st_mtime)
        newest, indexed = max(mtimes, default=None), self.qmd.status().last_update_at
        if newest is None or (indexed or 0) >= newest:
            return None, newest, indexed
        return (newest - indexed if indexed else float("inf")), newest, indexed

    def reload_health(self) -> float | None:
        """Take the failover state from `health.json` when another process wrote it since (a
        damaged file, or one of another version, counts as absent); when it was written."""
        raw = read_private(self.agent.state.health)  # a link planted here is refused (StateError)
        try:
            doc = json.loads(raw or b"null")
            state, updated = FailoverState(**doc["failover"]), float(doc["updatedAt"])
        except (ValueError, TypeError, KeyError):
            return self.health_updated_at
        current = doc.get("version") == HEALTH_VERSION and state.active in ("qmd", "builtin")
        if current and updated > (self.health_updated_at or 0):
            self.failover.state, self.health_updated_at = state, updated
        return self.health_updated_at
