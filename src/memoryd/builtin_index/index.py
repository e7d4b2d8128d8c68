"""`MemoryIndex`: the built-in hybrid index for one agent (sync, search, get, status, watch).

Sync has two phases. The text phase (files → chunks → FTS5) is fast and runs before a search on a
dirty index; the vector phase embeds pending chunks in batches, through the embedding cache, and
never blocks searches: BM25 answers while vectors catch up. A change of provider, model, endpoint
or chunking rebuilds the index in a temp file that replaces the old one atomically.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
import numpy as np

from ..config import ResolvedAgent
from ..core.chunking import chunk_lines, content_hash
from ..core.citations import trim_to_budget
from ..core.ranking import (
    REFERENCE_QUERIES,
    Candidate,
    CorpusStats,
    RankParams,
    path_match_level,
    rank,
    select_snippet,
)
from ..core.results import MAX_SNIPPET_CHARS, FileText, SearchResult
from ..core.text import Script, fts_match_expression, query_terms, script_of, trigram_terms
from ..embeddings.base import EmbeddingProvider, ProviderSelection
from ..errors import BatchPending, InvalidInput, MemorydError, ProviderUnavailable
from ..lifecycle.transcripts import (
    SessionDeltaTracker,
    count_newlines,
    list_transcripts,
    sessions_enabled,
    transcript_chunks,
    transcript_display_path,
)
from ._files import MemoryFile, discover, read_memory_file, resolve_extra_paths
from ._store import Store, remove_db_files

log = logging.getLogger("memoryd.builtin_index")


def _newlines_in_prefix(path: Path, size: int) -> int:
    with open(path, "rb") as fh:
        return fh.read(size).count(b"\n")


ProgressFn = Callable[[str, int, int], None]
EMBED_BATCH = 16
QUERY_CACHE_SIZE = 256
BACKGROUND_SAMPLE = 1024  # stored vectors a query is compared with to calibrate its cosines
STATS_TERM_CACHE = 4096  # per-term chunk counts kept between searches (cleared on any write)


@dataclass
class _StatsCache:
    """What `MemoryIndex._corpus_stats` keeps for one version of one index file."""

    store: Store
    version: tuple[int, int]
    chunks: int
    df: dict[str, int] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)
    sample: np.ndarray | None = None
    scripts: list[Script] = field(default_factory=list)
    reference: dict[tuple[Script, Script], tuple[float, float]] | None = None


def _reference_background(
    refs: dict[Script, np.ndarray], sample: np.ndarray, scripts: list[Script]
) -> dict[tuple[Script, Script], tuple[float, float]]:
    """Mean and deviation of reference-query cosines per (query script, chunk script)."""
    out: dict[tuple[Script, Script], tuple[float, float]] = {}
    script_arr = np.array(scripts)
    for chunk_script in set(scripts):
        rows = sample[script_arr == chunk_script]
        for query_script, vectors in refs.items():
            if vectors.shape[1] != sample.shape[1]:
                continue
            sims = vectors @ rows.T
            out[(query_script, chunk_script)] = (float(sims.mean()), float(sims.std()))
    return out


@dataclass
class SyncReport:
    files_scanned: int = 0
    files_changed: int = 0
    files_removed: int = 0
    chunks_written: int = 0
    vectors_embedded: int = 0
    vectors_from_cache: int = 0
    vectors_pending: int = 0
    reindexed: bool = False
    reindex_reason: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class SearchOutcome:
    results: list[SearchResult]
    provider: str | None
    model: str | None
    mode: str  # "hybrid" | "keyword" | "vector"
    fallback: dict[str, Any] | None = None
    pending_vectors: int = 0
    notes: list[str] = field(default_factory=list)


class MemoryIndex:
    """The built-in index of one agent's memory files."""

    def __init__(
        self,
        agent: ResolvedAgent,
        selection: ProviderSelection | None = None,
        *,
        path: Path | None = None,
    ) -> None:
        self.agent = agent
        self.cfg = agent.memory_search
        self.path = path or agent.index_path
        if selection is None:
            from ..embeddings.selection import select_provider

            selection = select_provider(agent)
        self.selection = selection
        self.provider: EmbeddingProvider | None = selection.provider
        self.fallback_reason: str | None = None
        self.fallback_since: float | None = None
        self.unavailable: str | None = None
        vec = self.cfg.store.vector
        self._vector_enabled = vec.enabled
        self._extension_path = vec.extension_path
        self.store = Store(self.path, vector_enabled=vec.enabled, extension_path=vec.extension_path)
        self.dirty = True
        self._sync_lock = anyio.Lock()
        self._last_sync_at: float | None = None
        self.last_error: str | None = None
        self._sessions = SessionDeltaTracker(
            delta_bytes=self.cfg.sync.sessions.delta_bytes,
            delta_messages=self.cfg.sync.sessions.delta_messages,
        )
        self._query_cache: OrderedDict[tuple[str, str, str, str], np.ndarray] = OrderedDict()
        self._paths_cache: tuple[Store, tuple[int, int], list[tuple[str, str, str, str]]] | None = (
            None
        )
        self._session_baselines: set[str] = set()

    # ------------------------------------------------------------------ identity of the index

    def signature(self) -> dict[str, Any]:
        p = self.provider
        return {
            "provider": p.id if p else "none",
            "model": p.model if p else "",
            "fingerprint": p.fingerprint() if p else "",
            "chunkTokens": self.cfg.chunking.tokens,
            "chunkOverlap": self.cfg.chunking.overlap,
        }

    def _stored_signature(self) -> dict[str, Any] | None:
        raw = self.store.meta().get("signature")
        return json.loads(raw) if raw else None

    def reindex_reason(self) -> str | None:
        """Why the stored index no longer matches the configuration (None when it does)."""
        stored = self._stored_signature()
        if stored is None:
            return None
        current = self.signature()
        changed = [k for k in current if stored.get(k) != current[k]]
        if not changed:
            return None
        return "changed " + ", ".join(f"{k} ({stored.get(k)!r} → {current[k]!r})" for k in changed)

    def _vectors_usable(self) -> bool:
        return (
            self.provider is not None
            and self.store.vector.available
            and self.reindex_reason() is None
        )

    # ------------------------------------------------------------------ sync

    async def sync(
        self,
        *,
        force: bool = False,
        embed: bool = True,
        embed_budget_s: float | None = None,
        progress: ProgressFn | None = None,
        allow_reindex: bool = True,
        sessions: bool = True,
    ) -> SyncReport:
        """Bring the index up to date with the files; see the module docstring for the phases.

        `allow_reindex=False` (a search's pre-sync) skips the sync when a full rebuild is due.
        """
        async with self._sync_lock:
            started = time.perf_counter()
            reason = "forced" if force else self.reindex_reason()
            if reason is not None and not allow_reindex:
                return SyncReport(reindex_reason=reason)
            if reason is not None:
                report = await self._reindex(
                    reason, embed=embed, embed_budget_s=embed_budget_s, progress=progress
                )
            else:
                report = SyncReport()
                if self._stored_signature() is None:
                    self.store.set_meta({"signature": json.dumps(self.signature())})
                await anyio.to_thread.run_sync(self._text_phase, self.store, report, progress)
                self.dirty = False
                if sessions:
                    await anyio.to_thread.run_sync(self._sessions_phase, self.store, report, False)
                if embed:
                    await self._vector_phase(self.store, report, embed_budget_s, progress)
            report.vectors_pending = self.store.counts()["pending_vectors"] if self.provider else 0
            report.seconds = time.perf_counter() - started
            self._last_sync_at = time.time()
            return report

    def _discover(self) -> list[MemoryFile]:
        return discover(self.agent.workspace, self.cfg.extra_paths)

    def _text_phase(self, store: Store, report: SyncReport, progress: ProgressFn | None) -> None:
        files = self._discover()
        known = store.files()
        report.files_scanned = len(files)
        seen: set[str] = set()
        for i, mf in enumerate(files, 1):
            seen.add(mf.rel_path)
            try:
                st = mf.abs_path.stat()
            except OSError:
                continue
            prev = known.get(mf.rel_path)
            if prev is not None and prev[1] == st.st_mtime and prev[2] == st.st_size:
                continue
            try:
                data = mf.abs_path.read_bytes()
            except OSError as err:
                log.warning("cannot read %s: %s", mf.abs_path, err)
                continue
            text = data.decode("utf-8", errors="replace")
            file_hash = content_hash(text)
            if prev is not None and prev[0] == file_hash:
                store.touch_file(mf.rel_path, st.st_mtime, st.st_size)
                continue
            chunks = chunk_lines(
                text, tokens=self.cfg.chunking.tokens, overlap=self.cfg.chunking.overlap
            )
            store.replace_file(
                mf.rel_path,
                str(mf.abs_path),
                mf.source,
                file_hash,
                st.st_mtime,
                st.st_size,
                [(c.start_line, c.end_line, c.hash, c.text, c.tokens) for c in chunks],
            )
            report.files_changed += 1
            report.chunks_written += len(chunks)
            if progress:
                progress("files", i, len(files))
        for gone in set(known) - seen:
            if known[gone][3] == "memory":
                store.remove_file(gone)
                report.files_removed += 1

    def _sessions_phase(self, store: Store, report: SyncReport, force: bool) -> None:
        """Index the agent's transcripts once enough new data accumulated (sync.sessions deltas)."""
        if not sessions_enabled(self.agent):
            return
        known = {p: v for p, v in store.files().items() if v[3] == "sessions"}
        seen: set[str] = set()
        chunking = self.cfg.chunking
        for path in list_transcripts(self.agent):
            rel = transcript_display_path(path)
            seen.add(rel)
            try:
                st = path.stat()
            except OSError:
                continue
            prev = known.get(rel)
            if prev is not None and prev[1] == st.st_mtime and prev[2] == st.st_size:
                continue
            lines = count_newlines(path)
            if prev is not None and not force:
                if rel not in self._session_baselines:
                    self._session_baselines.add(rel)
                    self._sessions.mark_synced(rel, prev[2], _newlines_in_prefix(path, prev[2]))
                if not self._sessions.observe(rel, st.st_size, lines).due:
                    continue
            try:
                chunks = transcript_chunks(path, chunking.tokens, chunking.overlap)
                data = path.read_bytes()
            except OSError as err:
                log.warning("cannot read transcript %s: %s", path, err)
                continue
            store.replace_file(
                rel,
                str(path),
                "sessions",
                content_hash(data.decode("utf-8", errors="replace")),
                st.st_mtime,
                st.st_size,
                [(c.start_line, c.end_line, c.hash, c.text, c.tokens) for c in chunks],
            )
            self._sessions.mark_synced(rel, st.st_size, lines)
            self._session_baselines.add(rel)
            report.files_changed += 1
            report.chunks_written += len(chunks)
        for gone in set(known) - seen:
            store.remove_file(gone)
            self._sessions.forget(gone)
            report.files_removed += 1

    async def _vector_phase(
        self, store: Store, report: SyncReport, budget_s: float | None, progress: ProgressFn | None
    ) -> None:
        if self.provider is None or not store.vector.available:
            return
        deadline = None if budget_s is None else time.monotonic() + budget_s
        total = store.counts()["pending_vectors"]
        done = 0
        key = (self.provider.id, self.provider.model, self.provider.fingerprint())
        max_entries = self.cfg.cache.max_entries
        use_cache = self.cfg.cache.enabled
        skip: set[int] = set()
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                break
            batch = [
                row for row in store.pending_chunks(EMBED_BATCH + len(skip)) if row[0] not in skip
            ][:EMBED_BATCH]
            if not batch:
                break
            hashes = [h for _, h, _ in batch]
            cached = store.cache_get(key, hashes) if use_cache else {}
            todo = [(cid, h, text) for cid, h, text in batch if h not in cached]
            vectors: dict[int, np.ndarray] = {cid: cached[h] for cid, h, _ in batch if h in cached}
            report.vectors_from_cache += len(vectors)
            if todo:
                try:
                    matrix = await self.provider.embed_documents([t for _, _, t in todo])
                except BatchPending:
                    # remote.batch.wait = false: the job keeps running; the next sync collects it
                    return
                except Exception as err:
                    await self._on_embed_failure(err)
                    return
                new_items = []
                for (cid, h, _), vec in zip(todo, matrix, strict=True):
                    vectors[cid] = vec
                    new_items.append((h, vec))
                if use_cache:
                    store.cache_put(key, new_items, max_entries)
                report.vectors_embedded += len(todo)
            store.write_vectors(list(vectors.items()))
            skip.update(cid for cid, _, _ in batch if cid not in vectors)
            done += len(batch)
            if progress:
                progress("vectors", done, total)

    async def _on_embed_failure(self, err: Exception) -> None:
        """Fallback provider, else unavailable (explicit) or keyword-only (auto). Never silent."""
        assert self.provider is not None
        failed = f"{self.provider.id} embedding failed: {err}"
        sel = self.selection
        if sel.fallback is not None and self.provider is sel.provider:
            self.provider = sel.fallback
            self._set_fallback(f"{failed}; using fallback provider {sel.fallback.id}")
            log.warning("%s; switching to fallback provider %s", failed, sel.fallback.id)
            return
        if sel.explicit:
            self.unavailable = failed
            raise ProviderUnavailable(failed) from err
        self.provider = None
        self._set_fallback(f"{failed}; keyword-only search")
        log.warning("%s; degrading to keyword-only search", failed)

    def _set_fallback(self, reason: str) -> None:
        self.fallback_reason = reason
        self.fallback_since = time.time()

    async def _reindex(
        self, reason: str, *, embed: bool, embed_budget_s: float | None, progress: ProgressFn | None
    ) -> SyncReport:
        """Build a fresh index beside the old one and swap it in; on failure the old one stays."""
        log.info("reindexing %s: %s", self.path, reason)
        tmp = self.path.with_name(
            f"{self.path.name}.reindex-{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
        )
        report = SyncReport(reindexed=True, reindex_reason=reason)
        new: Store | None = None
        try:
            new = Store(
                tmp, vector_enabled=self._vector_enabled, extension_path=self._extension_path
            )
            new.copy_cache_from(self.path)
            new.set_meta({"signature": json.dumps(self.signature())})
            await anyio.to_thread.run_sync(self._text_phase, new, report, progress)
            await anyio.to_thread.run_sync(self._sessions_phase, new, report, True)
            if embed:
                await self._vector_phase(new, report, embed_budget_s, progress)
            # leave a single self-contained file behind (no -wal) before the rename
            with new.lock:
                new.conn.execute("pragma wal_checkpoint(truncate)")
                new.conn.execute("pragma journal_mode = delete")
            new.close()
            new = None
        except BaseException:
            if new is not None:
                with contextlib.suppress(Exception):
                    new.close()
            remove_db_files(tmp)
            raise
        old = self.store
        old.close()
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.path}{suffix}")
        os.replace(tmp, self.path)
        self.store = Store(
            self.path, vector_enabled=self._vector_enabled, extension_path=self._extension_path
        )
        self.dirty = False
        return report

    # ------------------------------------------------------------------ search

    def _rank_params(self, max_results: int | None, min_score: float | None) -> RankParams:
        q = self.cfg.query
        h = q.hybrid
        return RankParams(
            max_results=max_results or q.max_results,
            min_score=q.min_score if min_score is None else min_score,
            vector_weight=h.vector_weight,
            text_weight=h.text_weight,
            fusion=h.fusion,
            mmr_enabled=h.mmr.enabled,
            mmr_lambda=h.mmr.lambda_,
            decay_enabled=h.temporal_decay.enabled,
            half_life_days=h.temporal_decay.half_life_days,
        )

    async def search(
        self,
        query: str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        now: datetime | None = None,
        mode: str | None = None,
    ) -> SearchOutcome:
        """Hybrid recall. `mode` ("hybrid"|"keyword"|"vector") overrides config, for evaluation."""
        query = (query or "").strip()
        if not query:
            raise InvalidInput("query must not be empty")
        if self.unavailable:
            raise ProviderUnavailable(self.unavailable)
        if self.dirty and self.cfg.sync.on_search:
            with anyio.move_on_after(self.cfg.sync.search_wait_ms / 1000):
                await self.sync(embed=False, allow_reindex=False, sessions=False)
        params = self._rank_params(max_results, min_score)
        k = params.max_results * self.cfg.query.hybrid.candidate_multiplier
        # config: hybrid, or vector-first when hybrid is off; `mode` pins one side for evaluation
        effective = mode or ("hybrid" if self.cfg.query.hybrid.enabled else "vector")
        notes: list[str] = []

        qvec: np.ndarray | None = None
        if effective in ("hybrid", "vector") and self._vectors_usable():
            assert self.provider is not None
            try:
                qvec = await self._embed_query(query)
            except Exception as err:
                if self.selection.explicit and self.selection.fallback is None:
                    raise ProviderUnavailable(
                        f"{self.provider.id} query embedding failed: {err}"
                    ) from err
                notes.append(f"query embedding failed ({err}); keyword results only")
                qvec = None
            if qvec is not None and not np.any(qvec):
                notes.append("query embedding was a zero vector; keyword results only")
                qvec = None
        want_kw = effective in ("hybrid", "keyword") or (qvec is None and mode is None)

        store = self.store
        cands: dict[int, Candidate] = {}
        if qvec is not None:
            for rank_i, (cid, sim) in enumerate(store.vector_search(qvec, k)):
                cands[cid] = Candidate(cid, "", "", 0, 0, "", vector_score=sim, vector_rank=rank_i)
        if want_kw:
            self._keyword_candidates(store, query, k, cands)
            for cid in self._path_candidates(store, query):
                cands.setdefault(cid, Candidate(cid, "", "", 0, 0, ""))

        rows = store.chunk_rows(cands)
        allowed_sources = set(self.cfg.sources)
        filled = []
        for cid, c in cands.items():
            row = rows.get(cid)
            if row is None or row.source not in allowed_sources:
                continue
            c.path, c.source, c.start_line, c.end_line, c.text, c.mtime = (
                row.path,
                row.source,
                row.start_line,
                row.end_line,
                row.text,
                row.mtime,
            )
            filled.append(c)
        stats = await self._corpus_stats(store, query if want_kw else "", qvec)
        ranked = rank(filled, query, params, now=now or datetime.now(UTC), stats=stats)
        results = []
        for c in ranked:
            snippet, first, last = select_snippet(
                c.text, c.start_line, c.end_line, query, MAX_SNIPPET_CHARS
            )
            results.append(SearchResult(c.path, first, last, c.score, snippet, source=c.source))  # type: ignore[arg-type]
        results = trim_to_budget(results, self.cfg.query.max_injected_chars)

        kw_used = want_kw and store.fts_available
        used_mode = (
            "hybrid"
            if qvec is not None and kw_used
            else ("vector" if qvec is not None else "keyword")
        )
        pending = store.pending_count() if self.provider else 0
        if pending and qvec is not None:
            notes.append(f"{pending} chunks still waiting for embeddings")
        fallback = None
        if self.fallback_reason:
            fallback = {"reason": self.fallback_reason, "since": self.fallback_since}
        return SearchOutcome(
            results=results,
            provider=self.provider.id if self.provider else None,
            model=self.provider.model if self.provider else None,
            mode=used_mode,
            fallback=fallback,
            pending_vectors=pending,
            notes=notes,
        )

    async def _embed_query(self, query: str) -> np.ndarray:
        """Query embedding through a small LRU: agents often repeat a question within a session."""
        assert self.provider is not None
        key = (self.provider.id, self.provider.model, self.provider.fingerprint(), query)
        hit = self._query_cache.get(key)
        if hit is not None:
            self._query_cache.move_to_end(key)
            return hit
        vec = await self.provider.embed_query(query)
        self._query_cache[key] = vec
        if len(self._query_cache) > QUERY_CACHE_SIZE:
            self._query_cache.popitem(last=False)
        return vec

    def _keyword_candidates(
        self, store: Store, query: str, k: int, cands: dict[int, Candidate]
    ) -> None:
        terms = query_terms(query)
        match = fts_match_expression(terms)
        primary = store.keyword_search(match, k) if match else []
        for rank_i, (cid, strength) in enumerate(primary):
            c = cands.setdefault(cid, Candidate(cid, "", "", 0, 0, ""))
            c.text_rank, c.text_score = rank_i, strength
        tri = trigram_terms(query)
        if not tri or len(primary) >= k:
            # substring-only hits would rank after k whole-word hits anyway: skip the scan
            return
        tri_match = " OR ".join('"' + t.replace('"', '""') + '"' for t in tri)
        extra = [
            (cid, s)
            for cid, s in store.keyword_search(tri_match, k, trigram=True)
            if cid not in {p[0] for p in primary}
        ]
        if not extra:
            return
        # substring-only hits rank after whole-word hits, scaled below the weakest of those
        ceiling = 0.5 * min((s for _, s in primary), default=2.0)
        top = max(s for _, s in extra) or 1.0
        for j, (cid, strength) in enumerate(extra):
            c = cands.setdefault(cid, Candidate(cid, "", "", 0, 0, ""))
            c.text_rank = len(primary) + j
            c.text_score = ceiling * (strength / top)

    # Corpus statistics for calibrated scores (see `_corpus_stats`): per store version, and the
    # reference queries' vectors per provider. Class defaults rather than `__init__` fields:
    # the search path owns them and nothing else reads them.
    _stats_cache: _StatsCache | None = None
    _reference_vectors: tuple[tuple[str, str, str], dict[Script, np.ndarray]] | None = None

    async def _corpus_stats(self, store: Store, query: str, qvec: np.ndarray | None) -> CorpusStats:
        """Chunk count, per-term chunk counts and the cosine backgrounds that `rank` calibrates by.

        Document frequencies make keyword evidence comparable across queries (a hit on a rare
        term means more than one on a word every note holds); the reference background makes a
        cosine comparable (e5 scores unrelated text 0.72–0.82 depending on the languages, other
        models near 0). Everything but the query's own cosines is cached per index version.
        """
        version = store.version
        cache = self._stats_cache
        if cache is None or cache.store is not store or cache.version != version:
            cache = _StatsCache(store, version, self._count_chunks(store))
            self._stats_cache = cache
        term_chunks: dict[str, int] = {}
        if store.fts_available:
            for term in query_terms(query):
                if term not in cache.df:
                    if len(cache.df) >= STATS_TERM_CACHE:
                        cache.df.clear()
                    cache.df[term] = self._count_term(store, term)
                term_chunks[term] = cache.df[term]
        if qvec is None:
            return CorpusStats(cache.chunks, term_chunks)
        if cache.sample is None:
            cache.ids, cache.sample, cache.scripts = self._background_sample(store)
        sample = cache.sample
        if not sample.shape[0] or sample.shape[1] != qvec.shape[0]:
            return CorpusStats(cache.chunks, term_chunks)
        if cache.reference is None:
            refs = await self._reference_query_vectors(store)
            cache.reference = _reference_background(refs, sample, cache.scripts)
        sims = sample @ qvec.astype(np.float32)
        background = tuple(
            (cid, script, float(sim))
            for cid, script, sim in zip(cache.ids, cache.scripts, sims, strict=True)
        )
        return CorpusStats(cache.chunks, term_chunks, cache.reference, background)

    async def _reference_query_vectors(self, store: Store) -> dict[Script, np.ndarray]:
        """REFERENCE_QUERIES embedded with the current provider: once, then from the cache table.

        Stored in the embedding cache under a tagged hash no chunk can have, so a later process
        (a one-shot CLI search) reads them instead of embedding 32 queries again. A provider that
        cannot embed them leaves the query's own background as the reference.
        """
        assert self.provider is not None
        key = (self.provider.id, self.provider.model, self.provider.fingerprint())
        held = self._reference_vectors
        if held is not None and held[0] == key:
            return held[1]
        wanted = {
            content_hash(f"\0memoryd-reference-query\0{text}"): (script, text)
            for script, texts in REFERENCE_QUERIES.items()
            for text in texts
        }
        try:
            found = store.cache_get(key, list(wanted))
        except Exception:  # a busy or read-only index file: embed, keep in memory only
            found = {}
        fresh: list[tuple[str, np.ndarray]] = []
        try:
            for h, (_, text) in wanted.items():
                if h not in found:
                    found[h] = await self.provider.embed_query(text)
                    fresh.append((h, found[h]))
        except Exception as err:
            log.warning(
                "cannot embed the reference queries (%s); calibrating by the query alone", err
            )
            return {}
        if fresh and self.cfg.cache.enabled:
            with contextlib.suppress(Exception):
                store.cache_put(key, fresh, self.cfg.cache.max_entries)
        by_script: dict[Script, list[np.ndarray]] = {}
        for h, (script, _) in wanted.items():
            by_script.setdefault(script, []).append(np.asarray(found[h], dtype=np.float32))
        vectors = {script: np.stack(vs) for script, vs in by_script.items()}
        self._reference_vectors = (key, vectors)
        return vectors

    @staticmethod
    def _count_chunks(store: Store) -> int:
        with store.lock:
            return int(store.conn.execute("select count(*) from chunks").fetchone()[0])

    @staticmethod
    def _count_term(store: Store, term: str) -> int:
        match = fts_match_expression([term])
        if match is None:
            return 0
        with store.lock:
            try:
                row = store.conn.execute(
                    "select count(*) from chunks_fts where chunks_fts match ?", (match,)
                ).fetchone()
            except Exception:  # a term FTS5 cannot parse matched nothing as a keyword either
                return 0
        return int(row[0])

    @staticmethod
    def _background_sample(store: Store) -> tuple[list[int], np.ndarray, list[Script]]:
        """Up to BACKGROUND_SAMPLE stored vectors spread evenly over chunk ids: ids, vectors, scripts."""
        with store.lock:
            n = int(store.conn.execute("select count(*) from chunk_vectors").fetchone()[0])
            step = max(1, -(-n // BACKGROUND_SAMPLE))
            rows = store.conn.execute(
                "select v.chunk_id, v.vector, c.text from chunk_vectors v "
                "join chunks c on c.id = v.chunk_id "
                "where v.chunk_id % ? = 0 order by v.chunk_id limit ?",
                (step, BACKGROUND_SAMPLE),
            ).fetchall()
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32), []
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(
            len(rows), -1
        )
        return [int(r[0]) for r in rows], matrix, [script_of(r[2]) for r in rows]

    def _path_candidates(self, store: Store, query: str) -> list[int]:
        version = store.version
        if (
            self._paths_cache is None
            or self._paths_cache[0] is not store
            or self._paths_cache[1] != version
        ):
            names = [
                (p, p.lower(), PurePosixPath(p.lower()).name, PurePosixPath(p.lower()).stem)
                for p in store.paths()
            ]
            self._paths_cache = (store, version, names)
        ql = query.strip().lower()
        bare = ql.strip("`'\" ")
        # cheap substring screen first; path_match_level has the exact rules
        matched = [
            p
            for p, low, name, stem in self._paths_cache[2]
            if (name in ql or stem == bare or low in ql) and path_match_level(query, p) > 0
        ]
        return store.chunk_ids_for_paths(matched, limit_per_path=8) if matched else []

    # ------------------------------------------------------------------ get

    def get(self, path: str, from_line: int | None = None, lines: int | None = None) -> FileText:
        """Read a memory file or a line range of it (see `resolve_get_path` for the policy)."""
        shown, text = read_memory_file(
            self.agent.workspace, self.cfg.extra_paths, path, from_line, lines
        )
        return FileText(shown, text)

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        counts = self.store.counts()
        vec = self.store.vector
        sel = self.selection
        return {
            "backend": "builtin",
            "agentId": self.agent.agent_id,
            "provider": self.provider.id if self.provider else "none",
            "model": self.provider.model if self.provider else None,
            "requestedProvider": sel.requested,
            "providerReason": sel.reason,
            "fallback": {"reason": self.fallback_reason, "since": self.fallback_since}
            if self.fallback_reason
            else None,
            "unavailable": self.unavailable,
            "files": counts["files"],
            "chunks": counts["chunks"],
            "pendingVectors": counts["pending_vectors"] if self.provider else 0,
            "dirty": self.dirty,
            "needsReindex": self.reindex_reason(),
            "dbPath": str(self.path),
            "workspaceDir": str(self.agent.workspace),
            "sources": list(self.cfg.sources),
            "sourceCounts": counts["source_counts"],
            "vector": {
                "enabled": self._vector_enabled,
                "available": vec.available and self.provider is not None,
                "engine": vec.engine,
                "searchEngine": self.store.search_engine,
                "binding": vec.binding,
                "dims": self.store._vec_dims,
                "loadError": vec.load_error,
            },
            "fts": {
                "available": self.store.fts_available,
                "error": self.store.fts_error,
                "trigram": self.store.trigram_error is None,
            },
            "cache": {
                "enabled": self.cfg.cache.enabled,
                "entries": counts["cache_entries"],
                "maxEntries": self.cfg.cache.max_entries,
            },
            "lastSyncAt": self._last_sync_at,
        }

    # ------------------------------------------------------------------ watch

    def watch_roots(self) -> list[Path]:
        ws = self.agent.workspace
        roots = [ws]
        for extra in resolve_extra_paths(ws, self.cfg.extra_paths):
            if extra.exists() and not extra.is_relative_to(ws):
                roots.append(extra if extra.is_dir() else extra.parent)
        if sessions_enabled(self.agent):
            self.agent.sessions_dir.mkdir(parents=True, exist_ok=True)
            roots.append(self.agent.sessions_dir)
        return roots

    async def watch(
        self,
        *,
        stop_event: anyio.Event | None = None,
        on_synced: Callable[[SyncReport], None] | None = None,
    ) -> None:
        """Watch memory files; mark dirty on change and sync in the background after the debounce."""
        from watchfiles import awatch

        ws = self.agent.workspace
        extras = [p for p in self.watch_roots() if p != ws]

        sessions_dir = self.agent.sessions_dir

        def relevant(_change: Any, raw: str) -> bool:
            p = Path(raw)
            if p.is_relative_to(sessions_dir):
                return p.name.endswith(".jsonl")
            if not p.name.lower().endswith(".md") and p.suffix:
                return False
            if p.is_relative_to(ws):
                rel = p.relative_to(ws).as_posix()
                return (
                    rel in ("MEMORY.md", "memory.md")
                    or rel == "memory"
                    or rel.startswith("memory/")
                    or bool(self.cfg.extra_paths)
                )
            return any(p.is_relative_to(e) for e in extras)

        async for _changes in awatch(
            *self.watch_roots(),
            watch_filter=relevant,
            debounce=self.cfg.sync.watch_debounce_ms,
            step=50,
            stop_event=stop_event,
            recursive=True,
        ):
            self.dirty = True
            try:
                report = await self.sync()
            except MemorydError as err:
                self.last_error = str(err)
                log.warning("background sync failed: %s", err)
                continue
            if on_synced:
                on_synced(report)

    async def aclose(self) -> None:
        self.store.close()
        for p in {
            id(x): x for x in (self.selection.provider, self.selection.fallback) if x
        }.values():
            await p.aclose()
