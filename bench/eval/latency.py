"""In-process hybrid search latency at ~10k chunks (`python -m bench.eval.latency`).

The corpus is every Cranfield and CISI abstract plus the LoCoMo notes, chunked small enough to
give ≥ 10k chunks. Vectors come from the deterministic hashing embedder (384-d, like the local
model) so the index builds in seconds; query vectors are computed before timing, so the figure
is retrieval + fusion + snippets — what memoryd adds on top of the model's query embedding.
It also times the keyword side as the code before held postings ran it (FTS5 for every
search), hybrid and keyword-only, interleaved, and prints the ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import cast

from memoryd.builtin_index.index import MemoryIndex
from memoryd.config import deep_merge, resolve_agent, validate_config
from memoryd.core.ranking import Fusion, RankParams
from memoryd.embeddings.base import ProviderSelection

from .builtin import NOW, QueryCache
from .datasets import load_cisi, load_cranfield, load_locomo

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # the suite's deterministic hashing embedder


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.eval.latency")
    p.add_argument("--data", type=Path, default=(ROOT / ".." / "shared" / "eval").resolve())
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    p.add_argument("--fusion", default=None, help="override query.hybrid.fusion")
    p.add_argument("--queries", type=int, default=300)
    p.add_argument(
        "--compare", help="comma-separated fusions timed in the same run (e.g. relative)"
    )
    p.add_argument(
        "--variant",
        type=json.loads,
        help="JSON merged into memorySearch for a second index over the same file, timed "
        'interleaved with the configured one (e.g. \'{"query": {"maxResults": 8}}\')',
    )
    args = p.parse_args(argv)

    ws_out = args.out / "workspaces"
    sets = [
        load_cranfield(args.data / "cranfield", ws_out),
        load_cisi(args.data / "cisi", ws_out),
        load_locomo(args.data / "locomo-dev" / "locomo-dev.json", ws_out),
    ]
    big = args.out / "latency-ws"
    if not (big / "memory").is_dir():
        for ds in sets:
            for ws in ds.workspaces:
                shutil.copytree(
                    ws.root / "memory", big / "memory" / ds.name / ws.name, dirs_exist_ok=True
                )
    queries = [q.text for ds in sets for ws in ds.workspaces for q in ws.queries][: args.queries]

    search: dict[str, object] = {
        "provider": "none",
        "store": {"path": str(args.out / "index" / "latency-10k.sqlite")},
        "chunking": {"tokens": 96, "overlap": 16},
        "sync": {"watch": False},
    }
    if args.fusion:
        search["query"] = {"hybrid": {"fusion": args.fusion}}
    from hashing_embedder import HashingEmbedder

    provider = QueryCache(HashingEmbedder(384))

    def open_index(settings: dict[str, object]) -> MemoryIndex:
        agent = resolve_agent(
            validate_config({"agents": {"defaults": {"memorySearch": settings}}}), workspace=big
        )
        return MemoryIndex(
            agent.index_settings(),
            ProviderSelection("local", provider, "latency bench", None, True),
        )

    idx = open_index(search)
    t0 = time.perf_counter()
    idx.sync()
    variant = open_index(deep_merge(search, args.variant)) if args.variant else None
    if variant is not None:
        variant.sync()  # the same file and chunking: nothing to write
    chunks = idx.status().chunks
    print(f"index: {chunks} chunks ({time.perf_counter() - t0:.1f}s to sync)", file=sys.stderr)
    configured = idx.searcher.rank_params
    fusions = [None, *(args.compare.split(",") if args.compare else [])]

    def use(fusion: str | None) -> None:
        # a fusion the config does not offer (`relative`) is set on the rank parameters directly
        def params(min_score: float, pool: int) -> RankParams:
            return dataclasses.replace(configured(min_score, pool), fusion=cast(Fusion, fusion))

        idx.searcher.rank_params = configured if fusion is None else params  # type: ignore[method-assign]

    for fusion in fusions:  # warm the query-vector cache, SQLite pages, corpus statistics
        use(fusion)
        for q in queries:
            idx.search(q, now=NOW)
    if variant is not None:
        for q in queries:
            variant.search(q, now=NOW)
    times: dict[str | None, list[float]] = {f: [] for f in fusions}
    if variant is not None:
        times["variant"] = []
    # the keyword side from held postings (the default) and from FTS5 alone (the code before
    # them: `store._postings` unset), hybrid and keyword-only, interleaved with the rest
    held = idx.store._postings
    rows = ("hybrid, FTS5 only", "keyword-only", "keyword-only, FTS5 only")
    for row in rows:
        times[row] = []

    def timed(q: str, row: str | None, mode: str | None, postings: object) -> None:
        idx.store._postings = postings  # type: ignore[assignment]
        t = time.perf_counter()
        idx.search(q, now=NOW, mode=mode)
        times[row].append((time.perf_counter() - t) * 1000)
        idx.store._postings = held

    for q in queries:  # interleaved, so machine load hits every row alike
        for fusion in fusions:
            use(fusion)
            timed(q, fusion, None, held)
        use(None)
        timed(q, rows[0], None, None)
        timed(q, rows[1], "keyword", held)
        timed(q, rows[2], "keyword", None)
        if variant is not None:
            t = time.perf_counter()
            variant.search(q, now=NOW)
            times["variant"].append((time.perf_counter() - t) * 1000)
    p50s: dict[str | None, float] = {}
    for fusion, ts in times.items():
        ts.sort()
        p50, p95 = statistics.median(ts), ts[int(0.95 * len(ts)) - 1]
        p50s[fusion] = p50
        kind = fusion if fusion in rows else f"hybrid search ({fusion or 'configured'})"
        print(f"{kind} over {chunks} chunks, {len(ts)} queries: p50 {p50:.2f} ms, p95 {p95:.2f} ms")
    print(
        f"held postings / FTS5 only (p50): hybrid {p50s[None] / p50s[rows[0]]:.2f}, "
        f"keyword-only {p50s[rows[1]] / p50s[rows[2]]:.2f}"
    )
    idx.close()
    if variant is not None:
        variant.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
