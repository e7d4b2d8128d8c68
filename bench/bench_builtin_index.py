"""Built-in index benchmark: ~10k chunks, index time, search latency, cold CLI, sqlite-vec vs numpy.

Run:  .venv/bin/python bench/bench_builtin_index.py [--chunks 10000] [--queries 200]

Embedding 10k chunks with the real local model on 2 CPU cores takes tens of minutes, so document
vectors come from the real model applied to a pool of sentences (each chunk gets the normalized
mean of the vectors of the sentences it is made of). Query embedding, search, SQLite and the CLI
are all real; the real model's document throughput is measured on a sample and printed next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import numpy as np

from memoryd.builtin_index import MemoryIndex
from memoryd.config import resolve_agent, validate_config
from memoryd.embeddings.base import Matrix, ProviderSelection, l2_normalize
from memoryd.embeddings.local import LocalE5Provider

TOPICS = [
    "postgres migration",
    "webhook secret",
    "kubernetes ingress",
    "fly.io deploy",
    "grafana alert",
    "team offsite",
    "quarterly roadmap",
    "dentist appointment",
    "birthday gift",
    "router vlan",
    "backup schedule",
    "pgbouncer timeout",
    "stripe invoice",
    "customer interview",
    "hiring loop",
    "flight to lisbon",
    "tax documents",
    "garden irrigation",
    "python upgrade",
    "rust compiler",
]
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "error",
    "retry",
    "latency",
    "budget",
    "review",
    "deploy",
    "cluster",
    "replica",
    "shard",
    "vacuum",
    "index",
    "query",
    "cache",
    "token",
    "session",
    "agent",
    "memory",
    "note",
    "daily",
    "weekly",
    "meeting",
    "decision",
    "owner",
    "due",
    "friday",
    "monday",
    "config",
    "secret",
    "rotate",
    "certificate",
    "dns",
    "proxy",
    "timeout",
    "queue",
    "worker",
    "cron",
    "backup",
    "restore",
    "snapshot",
    "bucket",
    "region",
    "invoice",
    "refund",
    "customer",
    "contract",
    "roadmap",
    "milestone",
    "sprint",
]


SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "ta",
    "vo",
    "shi",
    "en",
    "da",
    "ri",
    "po",
    "lu",
    "ma",
    "ze",
    "ki",
    "no",
    "ba",
    "te",
    "fu",
]


def vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    """Pseudo-words; drawn with Zipf weights below, like the words of real notes."""
    words = set(WORDS)
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def make_sentences(rng: random.Random, n: int) -> list[str]:
    vocab = vocabulary(rng)
    rng.shuffle(vocab)
    weights = [1 / (rank + 1) for rank in range(len(vocab))]
    out = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        words = " ".join(rng.choices(vocab, weights=weights, k=12))
        out.append(f"- {topic}: {words} (ref {rng.randint(1000, 9999)}).")
    return out


class PooledE5(LocalE5Provider):
    """The real local provider, except documents get pooled sentence vectors (see module doc)."""

    def __init__(self, sentence_vecs: dict[str, np.ndarray]) -> None:
        super().__init__()
        self._vecs = sentence_vecs

    async def embed_documents(self, texts: Sequence[str]) -> Matrix:
        rows = []
        for text in texts:
            parts = [self._vecs[line] for line in text.splitlines() if line in self._vecs]
            rows.append(np.mean(parts, axis=0) if parts else np.zeros(384, np.float32))
        return l2_normalize(np.asarray(rows, dtype=np.float32))


def build_workspace(
    root: Path, sentences: list[str], target_chunks: int, rng: random.Random
) -> Path:
    ws = root / "ws"
    (ws / "memory").mkdir(parents=True)
    per_file_chunks = 20
    lines_per_chunk = 12  # ~35 tokens a line → ~400-token chunks
    files = max(1, target_chunks // per_file_chunks)
    for f in range(files):
        day = f"2024-{(f // 28) % 12 + 1:02d}-{f % 28 + 1:02d}"
        name = f"{day}-{f}.md" if f % 3 else f"topic-{f}.md"
        lines = [f"# notes {f}"] + [
            rng.choice(sentences) for _ in range(per_file_chunks * lines_per_chunk)
        ]
        (ws / "memory" / name).write_text("\n".join(lines) + "\n")
    (ws / "MEMORY.md").write_text("# Memory\n" + "\n".join(rng.sample(sentences, 20)) + "\n")
    return ws


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


async def run(args: argparse.Namespace) -> dict[str, object]:
    rng = random.Random(7)
    root = Path(tempfile.mkdtemp(prefix="memoryd-bench-"))
    os.environ["MEMORYD_STATE_DIR"] = str(root / "state")
    sentences = make_sentences(rng, 400)
    real = LocalE5Provider()
    t = time.perf_counter()
    real.load()
    load_s = time.perf_counter() - t

    sample = sentences[:64]
    t = time.perf_counter()
    await real.embed_documents(sample)
    sent_per_s = len(sample) / (time.perf_counter() - t)
    chunk_sample = ["\n".join(rng.sample(sentences, 12)) for _ in range(16)]
    t = time.perf_counter()
    await real.embed_documents(chunk_sample)
    chunks_per_s = len(chunk_sample) / (time.perf_counter() - t)

    vecs = await real.embed_documents(sentences)
    pool = {s: vecs[i] for i, s in enumerate(sentences)}
    ws = build_workspace(root, sentences, args.chunks, rng)

    results: dict[str, object] = {
        "model_load_s": round(load_s, 3),
        "real_model_sentences_per_s": round(sent_per_s, 1),
        "real_model_400tok_chunks_per_s": round(chunks_per_s, 2),
    }
    queries = [f"{rng.choice(TOPICS)} {rng.choice(WORDS)}" for _ in range(args.queries)]

    from memoryd.builtin_index import _store

    for engine in ("sqlite-vec", "numpy"):
        # force vec0 KNN in its run (by default small indexes search an in-memory matrix)
        _store.IN_MEMORY_MAX_VECTORS = 0 if engine == "sqlite-vec" else 50_000
        store: dict[str, object] = {"path": str(root / f"{engine}.sqlite")}
        if engine == "numpy":
            store["vector"] = {"extensionPath": str(root / "no-such-extension.so")}
        cfg = validate_config(
            {"agents": {"defaults": {"workspace": str(ws), "memorySearch": {"store": store}}}}
        )
        agent = resolve_agent(cfg)
        idx = MemoryIndex(
            agent.index_settings(), ProviderSelection("local", PooledE5(pool), "bench")
        )
        t = time.perf_counter()
        report = await idx.sync()
        index_s = time.perf_counter() - t
        st = idx.status().to_dict()
        assert st["vector"]["engine"] == engine, st["vector"]
        for q in queries[:10]:  # warm caches
            await idx.search(q)
        lat: dict[str, list[float]] = {"hybrid": [], "keyword": [], "vector": []}
        for q in queries:
            for mode in lat:
                idx._query_cache.clear()  # every timed search pays its query embedding
                t = time.perf_counter()
                await idx.search(q, mode=mode)
                lat[mode].append((time.perf_counter() - t) * 1000)
        qe = []
        for q in queries[:50]:
            t = time.perf_counter()
            await real.embed_query(q)
            qe.append((time.perf_counter() - t) * 1000)
        results[engine] = {
            "chunks": st["chunks"],
            "files": st["files"],
            "index_s": round(index_s, 2),
            "vectors_written": report.vectors_embedded,
            **{f"{m}_p50_ms": round(statistics.median(v), 2) for m, v in lat.items()},
            **{f"{m}_p95_ms": round(pct(v, 95), 2) for m, v in lat.items()},
            "query_embedding_p50_ms": round(statistics.median(qe), 2),
        }
        await idx.aclose()

    # fully cold CLI: a new Python process, imports, model load, query embedding, search, JSON out
    env = {**os.environ}
    cfg_file = root / "cli.toml"
    cfg_file.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n[agents.defaults.memorySearch.store]\npath = "{root / "sqlite-vec.sqlite"}"\n'
    )
    kw_file = root / "kw.toml"
    kw_file.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n[agents.defaults.memorySearch]\nprovider = "none"\n'
        f'[agents.defaults.memorySearch.store]\npath = "{root / "kw.sqlite"}"\n'
    )
    subprocess.run(
        [sys.executable, "-m", "memoryd", "index", "--config", str(kw_file), "--json"],
        check=True,
        capture_output=True,
        env=env,
    )
    for label, cfgp in (("cli_cold_hybrid", cfg_file), ("cli_cold_keyword_only", kw_file)):
        walls = []
        for q in queries[:7]:
            t = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "memoryd", "search", "--json", "--config", str(cfgp), q],
                capture_output=True,
                text=True,
                env=env,
            )
            walls.append(time.perf_counter() - t)
            if proc.returncode != 0:
                raise SystemExit(f"{label} failed: {proc.stderr}")
            json.loads(proc.stdout)
        results[label] = {
            "p50_s": round(statistics.median(walls), 3),
            "max_s": round(max(walls), 3),
        }
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    results["python_startup_s"] = round(time.perf_counter() - t, 3)
    vec, npy = results["sqlite-vec"], results["numpy"]
    assert isinstance(vec, dict) and isinstance(npy, dict)
    results["numpy_over_sqlite_vec_vector_p50"] = round(
        npy["vector_p50_ms"] / vec["vector_p50_ms"], 2
    )
    results["estimated_full_real_embedding_minutes"] = round(vec["chunks"] / chunks_per_s / 60, 1)  # type: ignore[operator]
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--out", default="bench/out/builtin_index.json")
    args = ap.parse_args()
    results = anyio.run(run, args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
