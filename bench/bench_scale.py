"""Growth curve of the built-in index: 10k, 50k, 100k chunks; in-memory KNN and sqlite-vec.

Run:  .venv/bin/python bench/bench_scale.py [--sizes 10000 50000 100000] [--queries 100]

Per size it builds a workspace of synthetic notes (Zipf-distributed pseudo-words and real
topic phrases, ~400-token chunks, as bench_builtin_index.py), syncs it with a fast stand-in
embedder (a 384-d vector seeded by each text's hash: KNN, fusion and storage cost what they
cost with real vectors; meaning does not matter for timing), and prints:

* sync time (text phase + vector writes), DB size on disk, process RSS after the sync;
* hybrid and keyword search p50/p95 with vectors searched by the in-memory matrix
  (`_store.IN_MEMORY_MAX_VECTORS` raised above the size) and by sqlite-vec's vec0 (set to 0);
* keyword search with FTS5 answering every search (the code before held postings), in the
  same process on the same index, and the ratio of the two p50s;
* a one-off search's vector side (a new process: no matrix held): the KNN and background
  cosines in SQL against loading the matrix, searching it and reading the sample's vectors;
  and picking the background sample with and without the index of the vectors' ids.

Query embedding is not included here (it does not depend on the index size; see
bench_embeddings.py). Figures are JSON (also bench/out/scale.json).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_builtin_index import TOPICS, WORDS, build_workspace, make_sentences, pct

from memoryd.builtin_index import MemoryIndex, _store
from memoryd.builtin_index._stats import BACKGROUND_SAMPLE
from memoryd.config import resolve_agent, validate_config
from memoryd.embeddings.base import EmbeddingProvider, Matrix, ProviderSelection, Vector

DIMS = 384


class SeededVectors(EmbeddingProvider):
    """A unit vector per text, seeded by its hash: free to compute, realistic to store and search."""

    def __init__(self) -> None:
        self.id = "seeded"
        self.model = "seeded-384"
        self.dims = DIMS

    @staticmethod
    def _one(text: str) -> Vector:
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        v = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
        out: Vector = v / np.linalg.norm(v)
        return out

    def embed_query(self, text: str) -> Vector:
        return self._one(text)

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        return np.stack([self._one(t) for t in texts])


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def db_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file()) / 2**20


def latencies(idx: MemoryIndex, queries: list[str], mode: str) -> list[float]:
    lat = []
    for q in queries:
        t = time.perf_counter()
        idx.search(q, mode=mode)
        lat.append((time.perf_counter() - t) * 1000)
    return lat


def one_size(n: int, root: Path, queries: list[str], sentences: list[str]) -> dict[str, object]:
    rng = random.Random(n)
    ws = build_workspace(root / f"ws-{n}", sentences, n, rng)
    db = root / f"index-{n}.sqlite"
    cfg = validate_config(
        {
            "agents": {
                "defaults": {"workspace": str(ws), "memorySearch": {"store": {"path": str(db)}}}
            }
        }
    )
    agent = resolve_agent(cfg)
    idx = MemoryIndex(agent.index_settings(), ProviderSelection("seeded", SeededVectors(), "bench"))
    t = time.perf_counter()
    idx.sync(embed=False)
    text_s = time.perf_counter() - t
    t = time.perf_counter()
    report = idx.sync()
    vector_s = time.perf_counter() - t
    st = idx.status().to_dict()
    out: dict[str, object] = {
        "chunks": st["chunks"],
        "files": st["files"],
        "sync_text_phase_s": round(text_s, 1),
        "sync_vector_phase_s": round(vector_s, 1),
        "vectors_written": report.vectors_embedded,
        "db_mb": round(db_mb(db), 1),
        "rss_mb_after_sync": round(rss_mb(), 1),
    }
    for engine, limit in (("in-memory", 10**9), ("vec0", 0)):
        _store.IN_MEMORY_MAX_VECTORS = limit
        latencies(idx, queries[:10], "hybrid")  # warm: loads the matrix, pages in SQLite
        for mode in ("hybrid", "keyword"):
            if mode == "keyword" and engine == "vec0":
                continue  # keyword search does not touch vectors
            lat = latencies(idx, queries, mode)
            key = f"{mode}_{engine}" if mode == "hybrid" else mode
            out[f"{key}_p50_ms"] = round(statistics.median(lat), 2)
            out[f"{key}_p95_ms"] = round(pct(lat, 95), 2)
        if engine == "in-memory":
            # the keyword side as the code before held postings ran it: FTS5 for every search
            held, idx.store._postings = idx.store._postings, None
            lat = latencies(idx, queries, "keyword")
            idx.store._postings = held
            out["keyword_fts5_only_p50_ms"] = round(statistics.median(lat), 2)
            out["keyword_fts5_only_p95_ms"] = round(pct(lat, 95), 2)
            out["keyword_held_over_fts5_only_p50"] = round(
                float(out["keyword_p50_ms"]) / max(float(out["keyword_fts5_only_p50_ms"]), 1e-9),
                2,  # type: ignore[arg-type]
            )
        out[f"rss_mb_after_{engine}_search"] = round(rss_mb(), 1)
        out[f"search_engine_{engine}"] = idx.store.search_engine
    _store.IN_MEMORY_MAX_VECTORS = 50_000
    out.update(one_off_vector_side(idx, queries[:20]))
    idx.close()
    shutil.rmtree(ws)
    return out


def one_off_vector_side(idx: MemoryIndex, queries: list[str]) -> dict[str, object]:
    """What a one-off search's vector side reads, per search (default engine choice): the lean
    path (`MemoryIndex.lean`: KNN and background cosines in SQL) against the numpy path a
    one-off search took before (load the matrix, search it, read the sample's vectors;
    numpy's import, ~80 ms, not included); and the sample's read before the index of the
    vectors' ids (`m003_vector_ids`; `NOT INDEXED` reads the table as that code did)."""
    store = idx.store
    assert isinstance(store, _store.Store)
    k = 24
    lean, full, sample_new, sample_old = [], [], [], []
    for q in queries:
        vec = SeededVectors._one(q)
        buf = array("f", vec.tobytes())
        t = time.perf_counter()
        store.vector_search(buf, k)
        store.sample_cosines(BACKGROUND_SAMPLE, buf)
        lean.append((time.perf_counter() - t) * 1000)
        store._matrix = None  # a new process holds no matrix
        t = time.perf_counter()
        store.vector_search(vec, k)
        store.vector_sample(BACKGROUND_SAMPLE)
        full.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        store.sample_keys(BACKGROUND_SAMPLE)
        sample_new.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        with store._reading("bench") as conn:
            n = conn.execute("select count(*) from chunk_vectors not indexed").fetchone()[0]
            conn.execute(
                "select v.chunk_id, c.hash from chunk_vectors v not indexed "
                "join chunks c on c.id = v.chunk_id "
                "where v.chunk_id % ? = 0 order by v.chunk_id limit ?",
                (max(1, -(-n // BACKGROUND_SAMPLE)), BACKGROUND_SAMPLE),
            ).fetchall()
        sample_old.append((time.perf_counter() - t) * 1000)
    p50 = statistics.median
    return {
        "oneoff_vector_side_sql_p50_ms": round(p50(lean), 2),
        "oneoff_vector_side_numpy_p50_ms": round(p50(full), 2),
        "oneoff_vector_side_sql_over_numpy_p50": round(p50(lean) / max(p50(full), 1e-9), 2),
        "sample_ids_p50_ms": round(p50(sample_new), 2),
        "sample_ids_before_m003_p50_ms": round(p50(sample_old), 2),
        "sample_ids_over_before_m003_p50": round(p50(sample_new) / max(p50(sample_old), 1e-9), 2),
    }


def run(args: argparse.Namespace) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="memoryd-scale-"))
    os.environ["MEMORYD_STATE_DIR"] = str(root / "state")
    rng = random.Random(7)
    sentences = make_sentences(rng, 4000)
    queries = [f"{rng.choice(TOPICS)} {rng.choice(WORDS)}" for _ in range(args.queries)]
    results: dict[str, object] = {"default_in_memory_max_vectors": _store.IN_MEMORY_MAX_VECTORS}
    for n in args.sizes:
        results[str(n)] = one_size(n, root, queries, sentences)
        print(json.dumps({n: results[str(n)]}), file=sys.stderr, flush=True)
    shutil.rmtree(root, ignore_errors=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--out", default="bench/out/scale.json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child or len(args.sizes) == 1:
        results = run(args)
    else:
        # one process per size, so RSS is that size's alone
        results = {}
        for n in args.sizes:
            out = Path(tempfile.mkstemp(suffix=".json")[1])
            cmd = [sys.executable, __file__, "--child", "--sizes", str(n)]
            subprocess.run([*cmd, "--queries", str(args.queries), "--out", str(out)], check=True)
            results.update(json.loads(out.read_text()))
            out.unlink()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    if not args.child:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
