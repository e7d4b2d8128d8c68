"""`MemoryIndex`: one agent's built-in index (store, provider, lifecycle), composed of an
`Indexer` (`_sync`), a `Searcher` (`_search`) and the cached `CorpusStatistics` (`_stats`)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..background import Background
from ..config import IndexSettings
from ..core.chunking import ChunkingPlan
from ..core.engine import ProgressFn, SearchOutput, SearchRequest
from ..core.layout import MemoryRoot, is_markdown
from ..core.results import FileText
from ..embeddings.base import EmbeddingProvider, ProviderSelection
from ..errors import (
    IndexCorrupt,
    InvalidInput,
    MemorydError,
    ProviderUnavailable,
    StateError,
    WorkspaceMismatch,
)
from ..fsio import private_dir
from ..memfiles import discover, read_memory_file, unchanged_since
from ._engine import Store
from ._search import Searcher
from ._sqlite_util import remove_db_files
from ._stats import CorpusStatistics
from ._store import Recovery
from ._store import Store as SqliteStore
from ._sync import LAST_SYNC_META_KEY, WALK_META_KEY, Indexer, SyncReport, left_out_from_meta

if TYPE_CHECKING:
    from ..core.status import BuiltinStatus

log = logging.getLogger("memoryd.builtin_index")


class MemoryIndex:
    """The built-in index of one (agent, workspace); `one_off`: this process runs one command."""

    name: Final = "builtin"

    def __init__(
        self,
        settings: IndexSettings,
        selection: ProviderSelection,
        *,
        one_off: bool = False,
    ) -> None:
        self.cfg = settings
        self.path = settings.db_path
        self.selection = selection
        self.provider: EmbeddingProvider | None = selection.provider
        self.fallback_reason: str | None = None
        self.fallback_since: float | None = None
        self.unavailable: str | None = None
        self.one_off = one_off
        self.dirty = True
        self.background: Background | None = None
        self.stats = CorpusStatistics(self)
        self.indexer = Indexer(self, self.stats)
        self.sync = self.indexer.sync
        self.check = self.indexer.check
        self.searcher = Searcher(self, self.stats)
        # set before the store opens: opening may already replace a damaged file
        self.store: Store = self._open_store()
        self.bind_workspace(self.store)

    def _open_store(self) -> Store:
        """A SQLite file at `self.path`, or this agent's tenant of a PostgreSQL database."""
        s = self.cfg
        if s.store_driver == "postgres":
            assert s.store_url is not None  # ResolvedAgent.index_settings() requires it
            from ._pg_store import PgStore

            return PgStore(
                s.store_url,
                agent_id=s.agent_id,
                workspace=s.workspace_key,
                vector_enabled=s.vector.enabled,
            )
        return SqliteStore(
            self.path,
            vector_enabled=s.vector.enabled,
            extension_path=s.vector.extension_path,
            on_recovered=self._store_recovered,
            own_folder=s.own_db_folder,
        )

    # ------------------------------------------------------------------ identity of the index

    def bind_workspace(self, store: Store) -> None:
        """Refuse an index built for another workspace: that would mix two users' memory."""
        mine = str(self.cfg.workspace)
        recorded = store.meta_value("workspace")
        if recorded is None:
            foreign = [p for p in store.abs_paths("memory") if not _inside_any(p, self.cfg.roots)]
            if foreign:
                recorded = os.path.dirname(foreign[0])
            else:
                if store.read_only is None:
                    store.set_meta({"workspace": mine, "agentId": self.cfg.agent_id})
                return
        if recorded != mine:
            raise WorkspaceMismatch(
                f"index {self.path} was built for workspace {recorded}, not {mine}; give each "
                "workspace its own store.path (e.g. with {workspaceKey}) or remove that file"
            )

    def _store_recovered(self, rec: Recovery, refill_now: bool) -> bool:
        """Refill a fresh file that replaced a damaged one, so a search's retry finds the text."""
        self.dirty = True
        if not refill_now or self.indexer.lock.locked() or "store" not in self.__dict__:
            return False
        try:
            self.bind_workspace(self.store)
            report = SyncReport()
            self.indexer.text_phase(self.store, report, None)
            self.indexer.sessions_phase(self.store, report, True)
        except MemorydError as err:
            log.warning("could not rebuild %s after moving it aside: %s", self.path, err)
            return False
        return True

    @property
    def chunking(self) -> ChunkingPlan:
        c = self.cfg.chunking
        d = c.daily_notes
        return ChunkingPlan(c.tokens, c.overlap, (d.tokens, d.overlap) if d else None)

    def signature(self) -> dict[str, Any]:
        p = self.provider
        sig: dict[str, Any] = {
            "provider": p.id if p else "none",
            "model": p.model if p else "",
            "fingerprint": p.fingerprint() if p else "",
            "chunkTokens": self.cfg.chunking.tokens,
            "chunkOverlap": self.cfg.chunking.overlap,
        }
        # only when set: other indexes keep the signature they had (no rebuild)
        if (daily := self.chunking.fingerprint()) is not None:
            sig["chunkDailyNotes"] = daily
        if self.cfg.redact_notes:
            sig["redactNotes"] = True
        return sig

    def reindex_reason(self) -> str | None:
        """Why the stored index no longer matches the configuration (None when it does)."""
        raw = self.store.meta_value("signature")
        if not raw:
            return None
        stored = json.loads(raw)
        current = self.signature()
        changed = [k for k in current if stored.get(k) != current[k]]
        if stored.get("redactNotes") and "redactNotes" not in current:
            current = {**current, "redactNotes": False}  # turned off: store the notes as written
            changed.append("redactNotes")
        if not changed:
            return None
        return "changed " + ", ".join(f"{k} ({stored.get(k)!r} → {current[k]!r})" for k in changed)

    # ------------------------------------------------------------------ the provider

    def provider_key(self) -> tuple[str, str, str]:
        assert self.provider is not None
        return self.provider.id, self.provider.model, self.provider.fingerprint()

    def vectors_usable(self) -> bool:
        usable = self.provider is not None and self.store.vector.available
        return usable and self.reindex_reason() is None

    def lean(self, store: Store) -> bool:
        """Whether a search keeps numpy out (KNN and background cosines in SQL): a one-off."""
        return self.one_off and isinstance(store, SqliteStore) and store.cosine_sql

    def provider_failed(self, err: Exception) -> None:
        """Fallback provider, else unavailable (explicit) or keyword-only (auto). Never silent."""
        assert self.provider is not None
        failed = f"{self.provider.id} embedding failed: {err}"
        sel = self.selection
        if sel.fallback is not None and self.provider is sel.provider:
            self.provider, then = sel.fallback, f"using fallback provider {sel.fallback.id}"
        elif sel.explicit:
            self.unavailable = failed
            raise ProviderUnavailable(failed) from err
        else:
            self.provider, then = None, "keyword-only search"
        self.fallback_reason, self.fallback_since = f"{failed}; {then}", time.time()
        log.warning("%s", self.fallback_reason)

    # ------------------------------------------------------------------ sync

    def purge(self, paths: Sequence[str], *, progress: ProgressFn | None = None) -> SyncReport:
        """Drop `paths` (as search shows them) from the index, then sync: what is still on disk
        is indexed afresh (a transcript through the forget tombstones)."""
        with self.indexer.lock:
            store = self.store
            with store.transaction(doing="purge forgotten text"):
                for rel in paths:
                    store.remove_file(rel)  # nothing, for a path the index does not hold
                store.delete_meta(WALK_META_KEY)  # the rows no longer follow that walk
            self.dirty = True
        return self.sync(progress=progress)

    def reset(self) -> list[str]:
        """Delete the index file and its side files (empty a PostgreSQL tenant) for the next sync
        to rebuild; what was removed."""
        with self.indexer.lock:
            if self.cfg.store_driver == "postgres":
                store = self.store
                with store.transaction(doing="reset the index"):
                    for rel in store.files():
                        store.remove_file(rel)
                    store.delete_meta(WALK_META_KEY)
                removed = [store.location]
            else:
                self.store.close()
                removed = remove_db_files(self.path)
                self.store = self._open_store()
                self.bind_workspace(self.store)
            self.dirty = True
        return removed

    def catch_up(self, budget_s: float) -> None:
        """Sync before a search, embedding for at most `budget_s` (not behind a long backlog)."""
        vectors = self.provider is not None and self.store.vector.available
        if not self.dirty and not (vectors and self.store.pending_count()):
            return  # nothing changed, nothing waits: the search needs no write
        if self.indexer.lock.locked() and not self.indexer.backlog_fits(budget_s, self.store):
            return
        self.sync(embed_budget_s=budget_s, lock_wait_s=budget_s)

    def pending_changes(self) -> int:
        cfg, store = self.cfg, self.store
        if unchanged_since(store.meta_value(WALK_META_KEY), cfg.roots, cfg.workspace) is not None:
            return 0
        files = discover(cfg.roots, cfg.workspace).files
        return self.indexer.changed_files(store, files, store.meta())

    def notify_changed(self) -> None:
        self.dirty = True

    # ------------------------------------------------------------------ search and get

    def search(
        self,
        request: SearchRequest | str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        now: datetime | None = None,
        mode: str | None = None,
    ) -> SearchOutput:
        """Hybrid recall; `mode` ("hybrid"|"keyword"|"vector") overrides config, for evaluation."""
        if isinstance(request, str):
            request = SearchRequest(request, max_results, min_score)
        query = (request.query or "").strip()
        if not query:
            raise InvalidInput("query must not be empty")
        if self.unavailable:
            raise ProviderUnavailable(self.unavailable)
        if (mode or "hybrid") != "keyword":
            # the one place the query's embedding starts, on the provider's worker, while this
            # thread catches the index up and runs the keyword side
            self.searcher.prefetch(query)
        notes: list[str] = []
        if request.wait_s is not None:
            try:
                self.catch_up(request.wait_s)
            except StateError as err:  # full disk, read-only state: answer from the index as it is
                notes.append(f"index not updated ({err}); answering from it as it was")
        elif self.dirty and self.cfg.sync.on_search:
            self.sync(
                embed=False, before_search=True, lock_wait_s=self.cfg.sync.search_wait_ms / 1000
            )
        # background document embedding pauses while a search has the cores
        provider = self.provider
        with provider.search_priority() if provider else contextlib.nullcontext():
            answer = self.searcher.search(request, query, now, mode)
        answer.notes[:0] = notes
        self.stats.save_pending()
        return answer

    def get(self, path: str, from_line: int | None = None, lines: int | None = None) -> FileText:
        return read_memory_file(self.cfg.roots, self.cfg.workspace, path, from_line, lines)

    # ------------------------------------------------------------------ status

    def status(self) -> BuiltinStatus:
        # imported here: the status models are defined only by processes that report status
        from ..core import status as st

        try:
            counts = self.store.counts()
        except IndexCorrupt:
            # the damaged file was just moved aside: describe the fresh one (and the recovery)
            counts = self.store.counts()
        store, p, sel = self.store, self.provider, self.selection
        meta = store.meta()
        search_engine = store.search_engine
        if search_engine == "numpy" and p and p.query_buffer_available() and self.lean(store):
            search_engine = "sqlite-vec-scan"  # a one-off command's KNN scans in SQL
        skipped: dict[str, int] = json.loads(meta.get("skipped") or "{}")
        left_out = left_out_from_meta(meta)
        for e in left_out.values():
            skipped[e.reason] = skipped.get(e.reason, 0) + 1
        return st.BuiltinStatus(
            provider=p.id if p else "none",
            model=p.model if p else None,
            requested_provider=sel.requested,
            provider_reason=sel.reason,
            fallback=st.DegradedInfo(reason=self.fallback_reason, since=self.fallback_since)
            if self.fallback_reason
            else None,
            unavailable=self.unavailable,
            files=counts["files"],
            chunks=counts["chunks"],
            pending_vectors=counts["pending_vectors"] if p else 0,
            dirty=self.dirty,
            needs_reindex=self.reindex_reason(),
            db_path=store.location,
            workspace_dir=str(self.cfg.workspace),
            sources=list(self.cfg.sources),
            source_counts=counts["source_counts"],
            vector=st.VectorInfo(
                enabled=self.cfg.vector.enabled,
                available=store.vector.available and p is not None,
                engine=store.vector.engine,
                search_engine=search_engine,
                binding=store.vector.binding,
                dims=store.vec_dims,
                load_error=store.vector.load_error,
                query_engine=p.query_engine() if p else None,
                query_engine_problem=p.query_engine_problem if p else None,
            ),
            fts=st.FtsInfo(
                available=store.fts_available,
                error=store.fts_error,
                trigram=store.trigram_error is None,
                engine="tsvector" if self.cfg.store_driver == "postgres" else "fts5",
            ),
            cache=st.CacheInfo(
                enabled=self.cfg.cache.enabled,
                entries=counts["cache_entries"],
                max_entries=self.cfg.cache.max_entries,
            ),
            last_sync_at=self.indexer.last_sync_at or _recorded(meta, LAST_SYNC_META_KEY, float),
            # another process's failed sync counts too: it is recorded in the index
            last_error=self.indexer.last_error
            or _recorded(meta, "last_sync_error", lambda raw: str(json.loads(raw)["message"])),
            skipped=skipped,
            skipped_files=[
                st.SkippedFile(path=e.path, reason=e.reason, detail=e.detail, size=e.size)
                for e in left_out.values()
            ],
            undecodable=json.loads(meta.get("undecodable") or "[]"),
            read_only=store.read_only,
            recoveries=[
                st.IndexRecovery(moved_to=str(r.moved_to), at=r.at, reason=r.reason)
                for r in store.recoveries()
            ],
        )

    # ------------------------------------------------------------------ watch and lifecycle

    def watch(self, stop_event: threading.Event) -> None:
        """Sync after each change to the memory files or transcripts, until `stop_event`."""
        from watchfiles import watch

        sessions_dir = self.cfg.sessions_dir
        roots = self.cfg.roots

        def relevant(_change: Any, raw: str) -> bool:
            p = Path(raw)
            if sessions_dir is not None and p.is_relative_to(sessions_dir):
                return p.name.endswith(".jsonl")
            if p.suffix and not is_markdown(p.name):
                return False
            # a folder event (no suffix) under a root may hide new files: let it through
            return _inside_any(str(p), roots) or any(Path(r.path).is_relative_to(p) for r in roots)

        ws = self.cfg.workspace
        folders = [ws]
        for root in roots:
            p = Path(root.path)
            if p.exists() and not p.is_relative_to(ws) and p not in folders:
                folders.append(p)
        if sessions_dir is not None:
            folders.append(private_dir(sessions_dir))
        for _changes in watch(
            *folders,
            watch_filter=relevant,
            debounce=self.cfg.sync.watch_debounce_ms,
            stop_event=stop_event,
            rust_timeout=200,  # how often the watcher checks `stop_event`
        ):
            self._sync_logged("background")

    def start(self, background: Background | None = None) -> None:
        """With `background`: sync now, then keep fresh (watcher, `sync.intervalMinutes`)."""
        self.background = background
        if background is not None:
            background.spawn("index-sync", lambda: self._keep_fresh(background))

    def _keep_fresh(self, background: Background) -> None:
        self._sync_logged("built-in index")
        if self.cfg.sync.watch:
            background.spawn("index-watch", lambda: self.watch(background.stopping))
        minutes = self.cfg.sync.interval_minutes
        if minutes > 0:
            background.every("index-periodic", minutes * 60, lambda: self._sync_logged("periodic"))

    def _sync_logged(self, what: str) -> None:
        self.dirty = True
        try:
            self.sync()
        except MemorydError as err:
            self.indexer.last_error = str(err)
            log.warning("%s sync failed for %s: %s", what, self.cfg.agent_id, err)

    def close(self) -> None:
        self.store.close()
        self.searcher.close()
        for p in {
            id(x): x for x in (self.selection.provider, self.selection.fallback) if x
        }.values():
            p.close()


def _recorded(meta: dict[str, str], key: str, read: Callable[[str], Any]) -> Any:
    """What `read` makes of `meta[key]`, or None when it is absent or unreadable."""
    with contextlib.suppress(KeyError, ValueError, TypeError):
        return read(meta[key])
    return None


def _inside_any(path: str, roots: Sequence[MemoryRoot]) -> bool:
    return any(path == r.path or path.startswith(r.path.rstrip(os.sep) + os.sep) for r in roots)
