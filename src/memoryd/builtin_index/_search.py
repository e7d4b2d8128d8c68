"""The searcher: keyword side, vector side, merge, ranking and snippets. The keyword side runs
while the query embeds; no snapshot of the index is held meanwhile (a remote API may be slow)."""

from __future__ import annotations

import contextlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from ..core.engine import SearchOutput, SearchRequest
from ..core.ranking import (
    PATH_TOKEN,
    Candidate,
    RankParams,
    continue_snippet,
    extend_chunk,
    path_match_level,
    rank,
    select_snippet,
    uncovered_window,
)
from ..core.results import MAX_SNIPPET_CHARS, SearchResult, Source
from ..core.text import fts_match_expression, fts_or, query_terms, text_terms, trigram_terms
from ..errors import ProviderUnavailable
from ._store import ChunkRow
from ._store import Store as SqliteStore

if TYPE_CHECKING:
    import numpy as np

    from ..rerank import RerankStage
    from ._engine import Engine, Store
    from ._stats import CorpusStatistics

QUERY_CACHE_SIZE = 256
#: How many next chunks of its file a continuation may reach into (chunks shorter than a snippet).
FOLLOWING_CHUNKS = 2
#: Hits ranked past maxResults, to take the place of results whose lines are already shown.
SPARE_RESULTS = 4
#: At most this many of the best keyword hits' snippets are chosen while the query embeds.
SPECULATIVE_SNIPPETS = 8
#: The ranked pool is this many times the configured maxResults (plus spares).
RANK_POOL_FACTOR = 4


class _PathLookup(NamedTuple):
    paths: list[str]
    by_name: dict[str, list[int]]
    by_stem: dict[str, list[int]]
    longest: int  # the longest name: no token prefix beyond it can name a file


class _KeywordSide(NamedTuple):
    version: tuple[int, int]
    hits: dict[int, Candidate]
    path_hits: list[int]
    terms: tuple[str, ...]
    rows: dict[int, tuple[ChunkRow, frozenset[str]]]  # row, the query terms it holds
    snippets: dict[int, tuple[str, int, int]]


def snapshot(store: Store) -> contextlib.AbstractContextManager[None]:
    """Reads within see one index, whatever another process publishes meanwhile."""
    return store.snapshot() if isinstance(store, SqliteStore) else contextlib.nullcontext()


class Searcher:
    """Answers a query from the index as it is: the engine syncs first."""

    def __init__(self, engine: Engine, stats: CorpusStatistics) -> None:
        self.engine = engine
        self.stats = stats
        self._query_cache: OrderedDict[tuple[str, str, str, str], np.ndarray] = OrderedDict()
        self._paths_cache: tuple[Store, tuple[int, int], _PathLookup] | None = None
        self._rerank: RerankStage | None = None

    def close(self) -> None:
        if self._rerank is not None:
            self._rerank.close()

    def prefetch(self, query: str) -> None:
        """Start embedding `query` on the provider's worker while the keyword side runs."""
        provider = self.engine.provider
        if provider is not None and (*self.engine.provider_key(), query) not in self._query_cache:
            provider.prefetch_query(query)

    def rank_params(self, min_score: float, pool: int) -> RankParams:
        h = self.engine.cfg.query.hybrid
        return RankParams(
            max_results=pool,
            pool_size=pool,
            min_score=min_score,
            vector_weight=h.vector_weight,
            text_weight=h.text_weight,
            fusion=h.fusion,
            mmr_enabled=h.mmr.enabled,
            mmr_lambda=h.mmr.lambda_,
            decay_enabled=h.temporal_decay.enabled,
            half_life_days=h.temporal_decay.half_life_days,
        )

    def search(
        self, request: SearchRequest, query: str, now: datetime | None, mode: str | None
    ) -> SearchOutput:
        """Both sides, the merge, ranking and snippets; `mode` pins one side for evaluation."""
        eng = self.engine
        q = eng.cfg.query
        max_results = request.max_results or q.max_results
        min_score = q.min_score if request.min_score is None else request.min_score
        # One pool whatever maxResults asks: the first k results of maxResults = N are then the
        # results of maxResults = k (a wider pool recalibrates, and may reorder, the top hits).
        k = q.max_results * q.hybrid.candidate_multiplier
        pool = (q.max_results + SPARE_RESULTS) * RANK_POOL_FACTOR
        effective = mode or ("hybrid" if q.hybrid.enabled else "vector")
        notes: list[str] = []
        vectors = effective in ("hybrid", "vector") and eng.vectors_usable()
        # no chunk has a vector yet: the query's would find nothing, so it is not embedded
        no_vectors_yet = vectors and eng.store.vec_dims is None
        vectors = vectors and not no_vectors_yet
        if not query_terms(query):
            # lone letters match every chunk holding one; only a file named so can answer
            notes.append("nothing to search for: the query has no word of two or more letters")
            vectors = no_vectors_yet = False
        store = eng.store
        kw = None
        if vectors and effective == "hybrid":  # while the query embeds
            with snapshot(store):
                kw = self._keyword_side(store, query, k)
        qvec = self._query_vector(query, notes) if vectors else None
        want_kw = effective in ("hybrid", "keyword") or (qvec is None and mode is None)
        stage = self._rerank_stage()
        with snapshot(store):
            if want_kw and (kw is None or store.version != kw.version):
                # none yet, or the index changed while the query embedded: its ids may have too
                kw = self._keyword_side(store, query, k)
            filled = self._candidates(store, request, k, qvec, kw)
            stats = self.stats.for_query(store, query if want_kw else "", qvec)
            pending = store.pending_count() if eng.provider else 0
            trace: dict[int, dict[str, Any]] | None = {} if request.explain else None
            # the whole pool that passed: a result whose lines earlier results already show
            # gives its slot on to the next
            ranked = rank(
                filled,
                query,
                self.rank_params(min_score, pool),
                now=now or datetime.now(UTC),
                stats=stats,
                partial_vectors=qvec is not None and pending > 0,
                trace=trace,
            )
            if trace is not None:
                for c in ranked:
                    trace[c.chunk_id]["minScore"] = min_score
            snippets = kw.snippets if kw else {}
            if stage is None:
                results = self._results(store, ranked, query, max_results, snippets, trace)
        if stage is not None:
            # no snapshot is held while the reranker answers (a remote API may be slow); a
            # result's following lines are read again after, by path and line
            ranked = self._reranked(stage, query, ranked, notes, trace)
            with snapshot(store):
                results = self._results(store, ranked, query, max_results, snippets, trace)
        used_mode = "hybrid" if want_kw and store.fts_available else "vector"
        if pending and (qvec is not None or no_vectors_yet):
            notes.append(_pending_note(pending, stats.chunks))
        return self._output(results, "keyword" if qvec is None else used_mode, notes)

    def _output(self, results: list[SearchResult], mode: str, notes: list[str]) -> SearchOutput:
        eng = self.engine
        degraded = None
        if eng.fallback_reason:
            degraded = {"reason": eng.fallback_reason, "since": eng.fallback_since}
        return SearchOutput(
            results=results,
            engine="builtin",
            provider=eng.provider.id if eng.provider else None,
            model=eng.provider.model if eng.provider else None,
            mode=mode,
            max_injected_chars=eng.cfg.query.max_injected_chars,
            notes=notes,
            degraded=degraded,
        )

    def _rerank_stage(self) -> RerankStage | None:
        cfg = self.engine.cfg.query.rerank
        if cfg.provider != "remote":  # `qmd` is qmd's own reranker, on the qmd backend
            return None
        if self._rerank is None:
            from ..rerank import RerankStage

            self._rerank = RerankStage(cfg, self.engine.cfg.state_dir)
        return self._rerank

    def _reranked(
        self,
        stage: RerankStage,
        query: str,
        ranked: list[Candidate],
        notes: list[str],
        trace: dict[int, dict[str, Any]] | None,
    ) -> list[Candidate]:
        """The reranker's order of the best candidates (named files first), or as they were."""
        reordered = stage.reorder(
            query, ranked, lambda c: c.text, notes, first=lambda c: c.path_level > 0
        )
        if trace is not None:
            for c, explained in reordered:
                trace[c.chunk_id]["rerank"] = explained
        return [c for c, _ in reordered]

    def _keyword_side(self, store: Store, query: str, k: int) -> _KeywordSide:
        version = store.version
        hits = self._keyword_candidates(store, query, k)
        path_hits = self._path_candidates(store, query)
        rows_now = store.chunk_rows([*hits, *path_hits])
        terms = tuple(query_terms(query))
        rows = {cid: (row, frozenset(text_terms(terms, row.text))) for cid, row in rows_now.items()}
        self.stats.term_chunks(store, query)
        snippets = self._snippets_while_embedding(query, hits, rows)
        return _KeywordSide(version, hits, path_hits, terms, rows, snippets)

    def _query_vector(self, query: str, notes: list[str]) -> np.ndarray | array[float] | None:
        """The query's vector (the prefetch's, when it started one), or None with a note why."""
        eng = self.engine
        assert eng.provider is not None
        qvec: np.ndarray | array[float] | None = None
        try:
            if eng.lean(eng.store):
                qvec = eng.provider.embed_query_buffer(query)
            if qvec is None:
                qvec = self._embed_query(query)
        except Exception as err:
            if eng.selection.explicit and eng.selection.fallback is None:
                raise ProviderUnavailable(
                    f"{eng.provider.id} query embedding failed: {err}"
                ) from err
            notes.append(f"query embedding failed ({err}); keyword results only")
            return None
        if not (any(qvec) if isinstance(qvec, array) else qvec.any()):
            notes.append("query embedding was a zero vector; keyword results only")
            return None
        return eng.store.query_as_stored(qvec) if isinstance(eng.store, SqliteStore) else qvec

    def _embed_query(self, query: str) -> np.ndarray:
        """Through a small LRU: agents often repeat a question within a session."""
        provider = self.engine.provider
        assert provider is not None
        key = (*self.engine.provider_key(), query)
        hit = self._query_cache.get(key)
        if hit is not None:
            self._query_cache.move_to_end(key)
            return hit
        vec = provider.embed_query(query)
        self._query_cache[key] = vec
        if len(self._query_cache) > QUERY_CACHE_SIZE:
            self._query_cache.popitem(last=False)
        return vec

    def _candidates(
        self,
        store: Store,
        request: SearchRequest,
        k: int,
        qvec: np.ndarray | array[float] | None,
        kw: _KeywordSide | None,
    ) -> list[Candidate]:
        """Both sides' candidates (vector hits, keyword hits, named files), with their rows, from
        the sources asked for."""
        cands: dict[int, Candidate] = {}
        if qvec is not None:
            for rank_i, (cid, sim) in enumerate(store.vector_search(qvec, k)):
                cands[cid] = Candidate(cid, "", "", 0, 0, "", vector_score=sim, vector_rank=rank_i)
        terms, known = (kw.terms, kw.rows) if kw is not None else ((), {})
        if kw is not None:
            for cid, kc in kw.hits.items():
                c = cands.setdefault(cid, kc)
                c.text_rank, c.text_score = kc.text_rank, kc.text_score
            for cid in kw.path_hits:
                cands.setdefault(cid, Candidate(cid, "", "", 0, 0, ""))
        rows = store.chunk_rows(cid for cid in cands if cid not in known)
        allowed_sources = set(self.engine.cfg.sources)
        if request.corpus != "all":
            allowed_sources &= {request.corpus}
        filled = []
        for cid, c in cands.items():
            row = rows.get(cid)
            if cid in known:
                row, matched = known[cid]
                c.matched = (terms, matched)
            if row is None or row.source not in allowed_sources:
                continue
            c.path, c.source, c.text, c.mtime = row.path, row.source, row.text, row.mtime
            c.start_line, c.end_line = row.start_line, row.end_line
            filled.append(c)
        return filled

    def _results(
        self,
        store: Store,
        ranked: Sequence[Candidate],
        query: str,
        max_results: int,
        snippets: dict[int, tuple[str, int, int]],
        trace: dict[int, dict[str, Any]] | None,
    ) -> list[SearchResult]:
        """A snippet each, the best hit's following lines as one more, no lines shown twice."""
        results: list[SearchResult] = []
        shown: dict[str, list[tuple[int, int]]] = {}

        def add(c: Candidate, snippet: str, first: int, last: int, more: bool = False) -> None:
            kept = uncovered_window(snippet, first, last, shown.get(c.path, []))
            if kept is not None and len(results) < max_results:
                text, first, last = kept
                explain: dict[str, Any] | None = None
                if trace is not None:  # the parts in the order applied (docs/retrieval-quality.md)
                    chunk = {"id": c.chunk_id, "startLine": c.start_line, "endLine": c.end_line}
                    explain = {"engine": "builtin", "chunk": chunk, **trace[c.chunk_id]}
                    if more:
                        explain["continuation"] = True
                source = cast("Source", c.source)
                results.append(
                    SearchResult(c.path, first, last, c.score, text, source, explain=explain)
                )
                shown.setdefault(c.path, []).append((first, last))

        for i, c in enumerate(ranked):
            if len(results) >= max_results:
                break
            snippet, first, last = snippets.get(c.chunk_id) or select_snippet(
                c.text, c.start_line, c.end_line, query, MAX_SNIPPET_CHARS
            )
            add(c, snippet, first, last)
            if i == 0 and max_results > 1:
                # the best hit's answer often comes a few lines after the line naming its topic
                text, end = _with_following_lines(store, c, last)
                more = continue_snippet(text, c.start_line, end, last, MAX_SNIPPET_CHARS)
                if more is not None:
                    add(c, *more, more=True)
        return results

    def _snippets_while_embedding(
        self,
        query: str,
        keyword_hits: dict[int, Candidate],
        rows: dict[int, tuple[ChunkRow, frozenset[str]]],
    ) -> dict[int, tuple[str, int, int]]:
        """The best keyword hits' snippets, chosen in time spent waiting for the query's vector."""
        out: dict[int, tuple[str, int, int]] = {}
        provider = self.engine.provider
        if provider is None:
            return out
        for cid in keyword_hits:  # best first
            if len(out) >= SPECULATIVE_SNIPPETS or not provider.query_in_flight(query):
                break
            got = rows.get(cid)
            if got is not None:
                row = got[0]
                out[cid] = select_snippet(
                    row.text, row.start_line, row.end_line, query, MAX_SNIPPET_CHARS
                )
        return out

    def _keyword_candidates(self, store: Store, query: str, k: int) -> dict[int, Candidate]:
        """Whole-word hits best first, then (fewer than `k` of those) substring-only hits."""
        match = fts_match_expression(query_terms(query))
        primary = store.keyword_search(match, k) if match else []
        hits = {
            cid: Candidate(cid, "", "", 0, 0, "", text_rank=i, text_score=strength)
            for i, (cid, strength) in enumerate(primary)
        }
        tri = trigram_terms(query)
        if not tri or len(primary) >= k:
            # substring-only hits would rank after k whole-word hits anyway: skip the scan
            return hits
        found = store.keyword_search(fts_or(tri), k, trigram=True)
        extra = [(c, s) for c, s in found if c not in hits]
        # substring-only hits rank after whole-word hits, scaled below the weakest of those
        ceiling = 0.5 * min((s for _, s in primary), default=2.0)
        top = max((s for _, s in extra), default=1.0) or 1.0
        for j, (cid, strength) in enumerate(extra, len(primary)):
            hits[cid] = Candidate(
                cid, "", "", 0, 0, "", text_rank=j, text_score=ceiling * (strength / top)
            )
        return hits

    def _path_candidates(self, store: Store, query: str) -> list[int]:
        version = store.version
        cached = self._paths_cache
        if cached is None or cached[0] is not store or cached[1] != version:
            cached = (store, version, _path_lookup(store.paths()))
            self._paths_cache = cached
        look = cached[2]
        ql = query.strip().lower()
        # screened by dictionary, not a scan of every path: path_match_level only accepts a
        # file whose name begins a token of the query or whose stem is the whole query
        hits = set(look.by_stem.get(ql.strip("`'\" "), ()))
        for token in PATH_TOKEN.findall(ql.replace("`", " ")):
            for end in range(1, min(len(token), look.longest) + 1):
                hits.update(look.by_name.get(token[:end], ()))
        matched = [
            look.paths[i] for i in sorted(hits) if path_match_level(query, look.paths[i]) > 0
        ]
        return store.chunk_ids_for_paths(matched, limit_per_path=8) if matched else []


def _path_lookup(paths: list[str]) -> _PathLookup:
    by_name: dict[str, list[int]] = {}
    by_stem: dict[str, list[int]] = {}
    for i, p in enumerate(paths):
        # PurePosixPath's name and stem, by string: a one-off search builds this for every file
        name = p.lower().rpartition("/")[2]
        dot = name.rfind(".")
        by_name.setdefault(name, []).append(i)
        by_stem.setdefault(name[:dot] if 0 < dot < len(name) - 1 else name, []).append(i)
    return _PathLookup(paths, by_name, by_stem, max(map(len, by_name), default=0))


def _pending_note(pending: int, chunks: int) -> str:
    counted = f"{pending} of {chunks} chunks" if chunks >= pending else None
    counted = counted or f"{pending} chunk{'' if pending == 1 else 's'}"
    return (
        f"{counted} still waiting for embeddings "
        "(ranked by their keywords until then): "
        "`memoryd index` embeds them now; a running `memoryd serve` does it in the background"
    )


def _with_following_lines(store: Store, c: Candidate, after_line: int) -> tuple[str, int]:
    """The chunk extended into its file's next chunks (the next ids) when less than a snippet
    follows `after_line`."""
    lines = c.text.split("\n")
    rest = lines[max(0, after_line - c.start_line + 1) :]
    if sum(len(line) + 1 for line in rest) > MAX_SNIPPET_CHARS:
        return c.text, c.end_line
    rows = store.chunk_rows(range(c.chunk_id + 1, c.chunk_id + 1 + FOLLOWING_CHUNKS))
    following = sorted(
        ((r.text, r.start_line, r.end_line) for r in rows.values() if r.path == c.path),
        key=lambda t: (t[1], t[2], t[0]),
    )
    after = [t for t in following if t[1] > c.start_line]
    return extend_chunk(c.text, c.start_line, c.end_line, after, MAX_SNIPPET_CHARS)
