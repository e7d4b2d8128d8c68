"""The corpus statistics `rank` calibrates by (document frequencies make keyword evidence, the
reference background a cosine, comparable across queries), cached per index version."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
from array import array
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..core.ranking import REFERENCE_QUERIES, CorpusStats
from ..core.text import Script, fts_match_expression, query_terms, script_of
from ..embeddings.shipped import reference_key, shipped_file, shipped_vectors
from ._store import Store as SqliteStore

if TYPE_CHECKING:  # numpy is imported where used: a keyword-only search never loads it
    import numpy as np

    from ._engine import Engine, Store

log = logging.getLogger("memoryd.builtin_index")

BACKGROUND_SAMPLE = 1024  # stored vectors a query is compared with to calibrate its cosines
STATS_TERM_CACHE = 4096  # per-term chunk counts kept between searches (cleared on any write)
#: Chunks' worth of weight the pooled spread gets against a script pair's own: a pair measured
#: on a handful of chunks has a spread too narrow to trust.
SPREAD_PRIOR_CHUNKS = 2
#: Where the reference background is kept between processes, with what it was computed from.
REFERENCE_META_KEY = "reference_background"

Reference = dict[tuple[Script, Script], tuple[float, float]]


class StatsCache:
    """What was worked out about one store at one version."""

    def __init__(self, store: Store, version: tuple[int, int], chunks: int) -> None:
        self.store, self.version, self.chunks = store, version, chunks
        self.df: dict[str, int] = {}
        self.ids: list[int] = []
        self.sample: np.ndarray | None = None
        self.scripts: list[Script] = []
        #: The sample's (chunk id, content hash), read with it (SQLite): a stored reference's key.
        self.keys: list[tuple[int, str]] | None = None
        self.reference: Reference | None = None


def reference_background(
    refs: dict[Script, np.ndarray], sample: np.ndarray, scripts: list[Script]
) -> Reference:
    """Mean and deviation of reference-query cosines per (query script, chunk script), a
    cross-script pair's spread pooled toward all pairs' so no lone note stands out."""
    import numpy as np

    out: Reference = {}
    script_arr = np.array(scripts)
    for query_script, vectors in refs.items():
        if vectors.shape[1] != sample.shape[1]:
            continue
        pairs: dict[Script, tuple[int, float, float]] = {}
        for chunk_script in set(scripts):
            sims = vectors @ sample[script_arr == chunk_script].T
            pairs[chunk_script] = (sims.shape[1], float(sims.mean()), float(sims.var()))
        # pooled within pairs: the shift between scripts' means is not noise
        total = sum(n for n, _, _ in pairs.values())
        pooled = sum(n * var for n, _, var in pairs.values()) / max(total, 1)
        k = SPREAD_PRIOR_CHUNKS
        for chunk_script, (n, mean, var) in pairs.items():
            if chunk_script != query_script:  # only the cosine vouches there: be sure of it
                var = (n * var + k * pooled) / (n + k)
            out[(query_script, chunk_script)] = (mean, var**0.5)
    return out


def _fingerprint(provider: tuple[str, str, str], sample: Sequence[tuple[int, str]]) -> str:
    h = hashlib.sha256(json.dumps([1, provider, REFERENCE_QUERIES, SPREAD_PRIOR_CHUNKS]).encode())
    h.update(json.dumps(sample).encode())
    return h.hexdigest()


class CorpusStatistics:
    """Chunk counts, per-term chunk counts and cosine backgrounds, cached per index version."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.cache: StatsCache | None = None
        self._to_save: tuple[Store, list[tuple[int, str]], Reference] | None = None
        self._reference_vectors: tuple[tuple[str, str, str], dict[Script, np.ndarray]] | None = None

    def for_query(
        self, store: Store, query: str, qvec: np.ndarray | array[float] | None
    ) -> CorpusStats:
        cache, term_chunks = self.term_chunks(store, query)
        if qvec is None:
            return CorpusStats(cache.chunks, term_chunks)
        if isinstance(qvec, array):
            assert isinstance(store, SqliteStore)
            lean = self._lean_background(store, qvec)
            if lean is not None:
                return CorpusStats(cache.chunks, term_chunks, *lean)
            # no reference stored for this sample: computed the numpy way once, then stored
            import numpy as np

            qvec = np.frombuffer(qvec, dtype=np.float32)
        if cache.sample is None:
            cache.ids, cache.sample, cache.scripts, cache.keys = self.background_sample(store)
        sample = cache.sample
        if not sample.shape[0] or sample.shape[1] != qvec.shape[0]:
            return CorpusStats(cache.chunks, term_chunks)
        if cache.reference is None:
            refs = self._reference_query_vectors(store)
            cache.reference = reference_background(refs, sample, cache.scripts)
            if refs and cache.keys is not None and self.engine.one_off:
                # written once the answer is ready (`save_pending`), not between its reads
                self._to_save = (store, cache.keys, cache.reference)
        background = _Background(cache.ids, cache.scripts, sample, qvec)
        return CorpusStats(cache.chunks, term_chunks, cache.reference, background)

    def term_chunks(self, store: Store, query: str) -> tuple[StatsCache, dict[str, int]]:
        version = store.version
        cache = self.cache
        if cache is None or cache.store is not store or cache.version != version:
            cache = StatsCache(store, version, store.chunk_count())
            self.cache = cache
        term_chunks: dict[str, int] = {}
        if store.fts_available:
            for term in query_terms(query):
                if term not in cache.df:
                    if len(cache.df) >= STATS_TERM_CACHE:
                        cache.df.clear()
                    match = fts_match_expression([term])
                    cache.df[term] = 0 if match is None else store.count_matching(match)
                term_chunks[term] = cache.df[term]
        return cache, term_chunks

    def _lean_background(
        self, store: SqliteStore, qvec: array[float]
    ) -> tuple[Reference, list[tuple[int, Script, float]]] | None:
        """Without numpy: cosines from SQL, the stored reference (None when none is stored)."""
        # as the numpy path: no background for vectors of another model
        rows = store.sample_cosines(BACKGROUND_SAMPLE, qvec) if store.vec_dims == len(qvec) else []
        if not rows:
            return {}, []
        reference = self.stored_reference(store, [(cid, h) for cid, h, _, _ in rows])
        if reference is None:
            return None
        return reference, [(cid, script_of(text), cos) for cid, _, cos, text in rows]

    def stored_reference(
        self, store: SqliteStore, sample: Sequence[tuple[int, str]]
    ) -> Reference | None:
        fingerprint = _fingerprint(self.engine.provider_key(), sample)
        try:
            held = json.loads(store.meta_value(REFERENCE_META_KEY) or "null")
            if held["fingerprint"] != fingerprint:
                return None
            return {(q, c): (float(mean), float(sd)) for q, c, mean, sd in held["pairs"]}
        except (ValueError, KeyError, TypeError):  # none, damaged, or of another version
            return None

    def save_pending(self) -> None:
        """Store the reference a one-off search computed, for the next process's search."""
        if self._to_save is not None:
            store, keys, reference = self._to_save
            self._to_save = None
            self._save_reference(store, keys, reference)

    def _save_reference(
        self, store: Store, keys: list[tuple[int, str]], reference: Reference
    ) -> None:
        """Never waits, never fails: a busy index means the next search computes it again."""
        if not isinstance(store, SqliteStore) or store.read_only:
            return
        pairs = [[q, c, mean, sd] for (q, c), (mean, sd) in sorted(reference.items())]
        held = {"fingerprint": _fingerprint(self.engine.provider_key(), keys), "pairs": pairs}
        with contextlib.suppress(Exception):
            store.set_meta({REFERENCE_META_KEY: json.dumps(held)}, wait_ms=0)

    def store_reference(self, store: Store) -> None:
        """After a sync: so a one-off search needs no numpy (only where the queries' vectors ship)."""
        provider = self.engine.provider
        if (
            provider is None
            or not isinstance(store, SqliteStore)
            or store.read_only
            or not store.cosine_sql
        ):
            return
        # cheapest first: a sync that stored no vector yet loads nothing
        keys = store.sample_keys(BACKGROUND_SAMPLE)
        if not keys or self.stored_reference(store, keys) is not None:
            return
        if not shipped_file(provider.id, provider.fingerprint()).exists():
            return
        _, sample, scripts, sampled = self.background_sample(store)
        refs = self._reference_query_vectors(store)
        if refs and sampled:
            self._save_reference(store, sampled, reference_background(refs, sample, scripts))

    def _reference_query_vectors(self, store: Store) -> dict[Script, np.ndarray]:
        """REFERENCE_QUERIES' vectors: shipped, cached, else embedded once; {} when they cannot be."""
        import numpy as np

        provider = self.engine.provider
        assert provider is not None
        key = self.engine.provider_key()
        held = self._reference_vectors
        if held is not None and held[0] == key:
            return held[1]
        wanted = {
            reference_key(text): (script, text)
            for script, texts in REFERENCE_QUERIES.items()
            for text in texts
        }
        ship = shipped_vectors(provider.id, key[2])
        found = {h: ship[h] for h in wanted if h in ship}
        with contextlib.suppress(Exception):  # a busy or read-only index: keep in memory only
            if len(found) < len(wanted):
                found.update(store.cache_get(key, [h for h in wanted if h not in found]))
        fresh: list[tuple[str, np.ndarray]] = []
        try:
            for h, (_, text) in wanted.items():
                if h not in found:
                    found[h] = provider.embed_query(text)
                    if isinstance(store, SqliteStore):  # as a later process reads it cached
                        found[h] = np.asarray(store.query_as_stored(found[h]))
                    fresh.append((h, found[h]))
        except Exception as err:
            log.warning(
                "cannot embed the reference queries (%s); calibrating by the query alone", err
            )
            return {}
        cache = self.engine.cfg.cache
        if fresh and cache.enabled:
            with contextlib.suppress(Exception):
                store.cache_put(key, fresh, cache.max_entries)
        by_script: dict[Script, list[np.ndarray]] = {}
        for h, (script, _) in wanted.items():
            by_script.setdefault(script, []).append(np.asarray(found[h], dtype=np.float32))
        vectors = {script: np.stack(vs) for script, vs in by_script.items()}
        self._reference_vectors = (key, vectors)
        return vectors

    @staticmethod
    def background_sample(
        store: Store,
    ) -> tuple[list[int], np.ndarray, list[Script], list[tuple[int, str]] | None]:
        """Up to BACKGROUND_SAMPLE vectors: ids, vectors, scripts, (id, content hash)."""
        import numpy as np

        rows = store.vector_sample(BACKGROUND_SAMPLE)
        keys = [(cid, h) for cid, _, _, h in rows]
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32), [], keys
        ids = [r[0] for r in rows]
        return ids, np.stack([r[1] for r in rows]), [script_of(r[2]) for r in rows], keys


class _Background(Sequence[tuple[int, Script, float]]):
    """The sample's (chunk id, script, cosine with the query), computed when ranking first reads
    it, which only a candidate in another script than the query's makes it do."""

    def __init__(
        self, ids: list[int], scripts: list[Script], sample: np.ndarray, qvec: np.ndarray
    ) -> None:
        self._ids, self._scripts, self._sample, self._qvec = ids, scripts, sample, qvec

    @functools.cached_property
    def _rows(self) -> list[tuple[int, Script, float]]:
        cosines = (self._sample @ self._qvec.astype("float32")).tolist()
        return list(zip(self._ids, self._scripts, cosines, strict=True))

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, i: Any) -> Any:
        return self._rows[i]

    def __iter__(self) -> Iterator[tuple[int, Script, float]]:
        return iter(self._rows)
