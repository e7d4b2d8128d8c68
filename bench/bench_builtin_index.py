"""Built-in index benchmark: ~10k chunks, index time, search latency, background embedding.

Run:  .venv/bin/python bench/bench_builtin_index.py [--chunks 10000] [--queries 200] [--no-cli] [--keep]
      .venv/bin/python bench/bench_builtin_index.py --baseline REV [--chunks 10000] [--queries 200]

Embedding 10k chunks with the real local model on 2 CPU cores takes tens of minutes, so document
vectors come from the real model applied to a pool of sentences (each chunk gets the normalized
mean of the vectors of the sentences it is made of). Query embedding, search, SQLite and the CLI
are all real. The real model's document throughput is measured on 400-token chunks.
`background` measures what `memoryd serve` users feel: search p50/p95 while the real model
embeds pending chunks of another index in the same process, against the same searches idle.

With `--baseline REV` it measures this checkout beside a git revision instead, each in a
process of its own driven in turns (`_side_by_side.py`): the real model's 400-token chunks/s
(batches of 16, alternated), and in-process hybrid and keyword search p50/p95 on the same
~10k-chunk workspace and pooled vectors (each query alternated, the order swapped every query),
with the ratios this / baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memoryd.background import Background
from memoryd.builtin_index import MemoryIndex
from memoryd.builtin_index._sync import EMBED_BATCH
from memoryd.config import resolve_agent, validate_config
from memoryd.embeddings.base import Matrix, ProviderSelection, l2_normalize
from memoryd.embeddings.local import LocalE5Provider

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _scratch import scratch_folder

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

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
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


def _search_latencies(idx: MemoryIndex, queries: list[str]) -> list[float]:
    lat = []
    for q in queries:
        idx.searcher._query_cache.clear()
        t = time.perf_counter()
        idx.search(q)
        lat.append((time.perf_counter() - t) * 1000)
    return lat


def background_embedding(
    idx: MemoryIndex,
    queries: list[str],
    root: Path,
    rng: random.Random,
    sentences: list[str],
    interval: float,
) -> dict[str, object]:
    """Hybrid search p50/p95 idle vs while the real model embeds another index (as under serve)."""
    ws = root / "bg-ws"
    (ws / "memory").mkdir(parents=True)
    for f in range(40):
        lines = ["\n".join(rng.sample(sentences, 12)) for _ in range(4)]
        (ws / "memory" / f"bg-{f}.md").write_text("\n".join(lines) + "\n")
    cfg = validate_config(
        {
            "agents": {
                "defaults": {
                    "workspace": str(ws),
                    "memorySearch": {"store": {"path": str(root / "bg.sqlite")}},
                }
            }
        }
    )
    provider = LocalE5Provider()
    bg = MemoryIndex(
        resolve_agent(cfg).index_settings(), ProviderSelection("local", provider, "bench")
    )
    bg.sync(embed=False)
    sample = queries[:60]
    idle_before = _search_latencies(idx, sample)
    busy: list[float] = []
    embedded = 0
    background = Background()
    bg.start(background)  # embeds the pending chunks on its threads, as `serve` does
    time.sleep(1.0)  # let the workers get going
    total = bg.store.pending_count()
    started = time.perf_counter()
    # an agent's pace, one search every `interval` s, until five batches went through
    i = 0
    while total - bg.store.pending_count() < 5 * EMBED_BATCH and len(busy) < 2000:
        busy += _search_latencies(idx, [sample[i % len(sample)]])
        i += 1
        time.sleep(interval)
    embedded = total - bg.store.pending_count()
    elapsed = time.perf_counter() - started
    background.stop()
    idle_after = _search_latencies(idx, sample)
    idle = idle_before + idle_after
    bg.close()
    return {
        "chunks_embedded_meanwhile": embedded,
        "embedding_chunks_per_s_meanwhile": round(embedded / elapsed, 2),
        "search_interval_s": interval,
        "searches_during": len(busy),
        "idle_p50_ms": round(statistics.median(idle), 2),
        "idle_p95_ms": round(pct(idle, 95), 2),
        "during_p50_ms": round(statistics.median(busy), 2) if busy else None,
        "during_p95_ms": round(pct(busy, 95), 2) if busy else None,
        "p95_during_over_idle": round(pct(busy, 95) / pct(idle, 95), 2) if busy else None,
    }


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def side_by_side(args: argparse.Namespace, root: Path) -> dict[str, object]:
    """This checkout and `args.baseline`, each in its own process, measured in turns."""
    from _side_by_side import pair

    rng = random.Random(7)
    sentences = make_sentences(rng, 400)
    real = LocalE5Provider()
    vecs = real.embed_documents(sentences)
    real.close()
    vectors = root / "sentences.npz"
    np.savez(vectors, sentences=np.array(sentences), vectors=vecs)
    chunk_sample = ["\n".join(rng.sample(sentences, 12)) for _ in range(16 * args.doc_batches)]
    ws = build_workspace(root, sentences, args.chunks, rng)
    queries = [f"{rng.choice(TOPICS)} {rng.choice(WORDS)}" for _ in range(args.queries)]
    children = pair(args.baseline, root)
    try:
        for child in children:
            child.ask(op="load")
        docs = {c.name: 0.0 for c in children}
        for i in range(args.doc_batches):
            batch = chunk_sample[i * 16 : (i + 1) * 16]
            for child in children if i % 2 == 0 else children[::-1]:
                docs[child.name] += child.ask(op="docs", texts=batch)["s"]
        built = {
            c.name: c.ask(op="index", workspace=str(ws), vectors=str(vectors), warm=queries[:10])
            for c in children
        }
        lat: dict[str, list[float]] = {}
        for i, q in enumerate(queries):
            for mode in ("hybrid", "keyword"):
                for child in children if i % 2 == 0 else children[::-1]:
                    ms = child.ask(op="search", q=q, mode=mode)["s"] * 1000
                    lat.setdefault(f"{child.name}_{mode}", []).append(ms)
        for i, q in enumerate(queries[:100]):
            for child in children if i % 2 == 0 else children[::-1]:
                ms = child.ask(op="query", text=q)["s"] * 1000
                lat.setdefault(f"{child.name}_query_embedding", []).append(ms)
    finally:
        for child in children:
            child.close()
    out: dict[str, object] = {
        "baseline": args.baseline,
        "chunks": built["this"]["chunks"],
        "queries": len(queries),
        "doc_chunks": len(chunk_sample),
    }
    for name in ("this", "baseline"):
        out[f"{name}_400tok_chunks_per_s"] = round(len(chunk_sample) / docs[name], 2)
        for what in ("hybrid", "keyword", "query_embedding"):
            times = lat[f"{name}_{what}"]
            out[f"{name}_{what}_p50_ms"] = round(statistics.median(times), 2)
            out[f"{name}_{what}_p95_ms"] = round(pct(times, 95), 2)
    out["chunks_per_s_this_over_baseline"] = round(docs["baseline"] / docs["this"], 2)
    for what in ("hybrid", "keyword", "query_embedding"):
        out[f"{what}_p50_this_over_baseline"] = round(
            statistics.median(lat[f"this_{what}"]) / statistics.median(lat[f"baseline_{what}"]), 2
        )
    return out


def run(args: argparse.Namespace, root: Path) -> dict[str, object]:
    if args.baseline:
        return side_by_side(args, root)
    rng = random.Random(7)
    os.environ["MEMORYD_STATE_DIR"] = str(root / "state")
    sentences = make_sentences(rng, 400)
    real = LocalE5Provider()
    results: dict[str, object] = {}
    t = time.perf_counter()
    real.load()
    results["model_load_s"] = round(time.perf_counter() - t, 3)

    sample = sentences[:64]
    chunk_sample = ["\n".join(rng.sample(sentences, 12)) for _ in range(32)]
    t = time.perf_counter()
    real.embed_documents(sample)
    results["real_model_sentences_per_s"] = round(len(sample) / (time.perf_counter() - t), 1)
    t = time.perf_counter()
    for part in range(2):
        real.embed_documents(chunk_sample[part * 16 : (part + 1) * 16])
    chunks_per_s = len(chunk_sample) / (time.perf_counter() - t)
    results["real_model_400tok_chunks_per_s"] = round(chunks_per_s, 2)

    vecs = real.embed_documents(sentences)
    pool = {s: vecs[i] for i, s in enumerate(sentences)}
    ws = build_workspace(root, sentences, args.chunks, rng)
    queries = [f"{rng.choice(TOPICS)} {rng.choice(WORDS)}" for _ in range(args.queries)]

    from memoryd.builtin_index import _store

    for engine in ("sqlite-vec", "numpy"):
        # force the scan in SQL in its run (by default small indexes search an in-memory matrix)
        _store.IN_MEMORY_MAX_BYTES = 0 if engine == "sqlite-vec" else 256 * 2**20
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
        report = idx.sync()
        index_s = time.perf_counter() - t
        st = idx.status().to_dict()
        assert st["vector"]["engine"] == engine, st["vector"]
        for q in queries[:10]:  # warm caches
            idx.search(q)
        lat: dict[str, list[float]] = {"hybrid": [], "keyword": [], "vector": []}
        names = list(lat)
        for i, q in enumerate(queries):
            # each mode takes each place in the order equally often: a search that runs
            # after another of the same query finds its caches warm
            for name in names[i % len(names) :] + names[: i % len(names)]:
                idx.searcher._query_cache.clear()  # every timed search pays its query embedding
                t = time.perf_counter()
                idx.search(q, mode=name)
                lat[name].append((time.perf_counter() - t) * 1000)
        qe: list[float] = []
        for q in queries[:50]:
            t = time.perf_counter()
            real.embed_query(q)
            qe.append((time.perf_counter() - t) * 1000)
        if engine == "sqlite-vec" and args.background:
            results["background"] = background_embedding(
                idx, queries, root / "bg", rng, sentences, args.search_interval
            )
        results[engine] = {
            "chunks": st["chunks"],
            "files": st["files"],
            "index_s": round(index_s, 2),
            "vectors_written": report.vectors_embedded,
            **{f"{m}_p50_ms": round(statistics.median(v), 2) for m, v in lat.items()},
            **{f"{m}_p95_ms": round(pct(v, 95), 2) for m, v in lat.items()},
            "query_embedding_p50_ms": round(statistics.median(qe), 2),
        }
        idx.close()

    if not args.cli:
        return results
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
    ap.add_argument("--no-cli", dest="cli", action="store_false", help="skip the cold CLI runs")
    ap.add_argument(
        "--no-background", dest="background", action="store_false", help="skip serve-like run"
    )
    ap.add_argument(
        "--search-interval", type=float, default=0.5, help="s between searches in background"
    )
    ap.add_argument(
        "--keep", action="store_true", help="keep the scratch folder (indexes, workspaces)"
    )
    ap.add_argument("--baseline", help="a git revision measured beside this checkout")
    ap.add_argument(
        "--doc-batches", type=int, default=6, help="16-chunk batches per side (--baseline)"
    )
    args = ap.parse_args()
    with scratch_folder("memoryd-bench-", args.keep) as root:
        results = run(args, root)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
