"""Recall and speed of the in-memory KNN's sign-bit prefilter (`builtin_index/_knn.py`) against
the exact scan, on real embeddings: passages of the eval sets through the local model.

Run:  .venv/bin/python bench/bench_knn.py [--passages 18000] [--scale 100000]

The passages (50-word windows of Cranfield and CISI abstracts, LoCoMo turns and runs of 8 turns)
are embedded once and kept in bench/out/knn-vectors.npz (~15 minutes on 2 cores). Queries: the
eval sets' own questions, and 300 held-out passages. The prefilter runs with its threshold
lowered to 0 and its candidates the share of the vectors alone (as in an index large enough
for the share to pass CANDIDATES), at 1/4, 1/2 and all of the passages, so the trend with
size shows; recall@k is the share of the exact scan's top k it returns. Speed: both, per query, on `--scale` vectors
drawn around the real ones (one BLAS thread, as the local provider sets).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from memoryd.builtin_index import _knn

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval"


def fields(path: Path, tag: str) -> list[str]:
    """The `tag` field (.W: text) of each record of a SMART-format file (Cranfield, CISI)."""
    out: list[str] = []
    cur: list[str] = []
    on = False
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(".I"):
            if cur:
                out.append(" ".join(cur))
            cur, on = [], False
        elif line.startswith("."):
            on = line.startswith(tag)
        elif on:
            cur.append(line.strip())
    return [*out, " ".join(cur)] if cur else out


def texts(limit: int) -> tuple[list[str], list[str]]:
    docs = fields(EVAL / "cranfield/cran.all.1400", ".W") + fields(EVAL / "cisi/CISI.ALL", ".W")
    queries = fields(EVAL / "cranfield/cran.qry", ".W") + fields(EVAL / "cisi/CISI.QRY", ".W")
    turns: list[str] = []
    for conv in json.loads((EVAL / "locomo-dev/locomo-dev.json").read_text()):
        for key, session in conv["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                turns += [f"{t['speaker']}: {t['text']}" for t in session]
        queries += [q["question"] for q in conv["qa"][:80]]
    passages = [
        " ".join(w[s : s + 50])
        for w in (d.split() for d in docs)
        for s in range(0, max(1, len(w) - 20), 25)
    ]
    passages += turns + ["\n".join(turns[s : s + 8]) for s in range(0, len(turns), 4)]
    random.Random(0).shuffle(passages)
    return passages[:limit], queries


def vectors(limit: int) -> tuple[np.ndarray, np.ndarray]:
    cache = ROOT / "bench" / "out" / "knn-vectors.npz"
    if cache.exists():
        held = np.load(cache)
        if len(held["docs"]) >= limit:
            return held["docs"][:limit], held["queries"]
    from memoryd.embeddings.local import LocalE5Provider

    passages, queries = texts(limit)
    provider = LocalE5Provider()
    print(f"embedding {len(passages):,} passages (once)", file=sys.stderr)
    q = np.stack([provider.embed_query(t) for t in queries]).astype(np.float32)
    docs = np.concatenate(
        [provider.embed_documents(passages[i : i + 500]) for i in range(0, len(passages), 500)]
    ).astype(np.float32)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, docs=docs, queries=q)
    return docs, q


def recall(rows: np.ndarray, queries: np.ndarray, k: int) -> float:
    ids = np.arange(len(rows))
    matrix = _knn.VectorMatrix(ids, rows)
    found = []
    for q in queries:
        exact = set(ids[_knn.top_rows(rows @ q, k)].tolist())
        found.append(len(exact & {i for i, _ in matrix.search(q, k)}) / k)
    return statistics.mean(found)


def per_query_ms(matrix: _knn.VectorMatrix, queries: np.ndarray) -> float:
    times = []
    for q in queries:
        t = time.perf_counter()
        matrix.search(q, 24)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=int, default=18_000)
    ap.add_argument("--scale", type=int, default=100_000, help="vectors in the speed test")
    args = ap.parse_args()
    threadpool_limits(limits=1, user_api="blas")
    docs, eval_queries = vectors(args.passages + 300)
    held_out, docs = docs[-300:], docs[:-300]
    settings = _knn.EXACT_MAX_VECTORS, _knn.CANDIDATES
    _knn.EXACT_MAX_VECTORS, _knn.CANDIDATES = 0, 0  # the share alone, as in a large index
    print("| vectors | candidates | queries | recall@6 | recall@24 |\n|---|---|---|---|---|")
    for n in (len(docs) // 4, len(docs) // 2, len(docs)):
        cands = n // _knn.CANDIDATE_SHARE
        for name, qs in (("eval questions", eval_queries), ("held-out passages", held_out)):
            r6, r24 = recall(docs[:n], qs, 6), recall(docs[:n], qs, 24)
            print(f"| {n:,} | {cands:,} | {name} | {r6:.4f} | {r24:.4f} |", flush=True)
    _knn.EXACT_MAX_VECTORS, _knn.CANDIDATES = settings
    rng = np.random.default_rng(0)
    big = docs[rng.integers(0, len(docs), args.scale)]
    big = big + 0.05 * rng.standard_normal(big.shape).astype(np.float32) / np.sqrt(big.shape[1])
    big /= np.linalg.norm(big, axis=1, keepdims=True)
    approx = _knn.VectorMatrix(np.arange(args.scale), big)
    exact = _knn.VectorMatrix(np.arange(args.scale), big)
    exact._signs = None
    qs = eval_queries[:200]
    for _ in range(2):  # interleaved, twice: the second pair is the figure
        a, e = per_query_ms(approx, qs), per_query_ms(exact, qs)
    print(f"\n{args.scale:,} vectors, top 24, p50 ms per query: exact {e:.2f}, prefilter {a:.2f}")


if __name__ == "__main__":
    main()
