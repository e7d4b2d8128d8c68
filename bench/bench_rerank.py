"""The rerank stage's own latency against a loopback `/v1/rerank` server.

Run:  .venv/bin/python bench/bench_rerank.py [--queries 200] [--candidates 24]

A real built-in index (hashing embedder, a generated workspace of daily notes) answers the same
queries with the stage off and on; the server answers at once with deterministic scores, so
what is measured is memoryd's side: building the request, the HTTP round trip through the
embedding providers' client, parsing and validating the answer, reordering, and the thread that
bounds the stage by `timeoutMs`. Prints the stage's own time (median, p95, from `explain`) and
the whole search's median with the stage off and on, measured alternately in one process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import embedding_servers  # noqa: E402
from embedding_servers import serve  # noqa: E402
from hashing_embedder import HashingEmbedder  # noqa: E402
from memoryd.builtin_index import MemoryIndex  # noqa: E402
from memoryd.config import resolve_agent, validate_config  # noqa: E402
from memoryd.core.engine import SearchRequest  # noqa: E402
from memoryd.embeddings.base import ProviderSelection  # noqa: E402
from rerank_server import FakeRerank, write  # noqa: E402

WORDS = [
    "deploy",
    "pipeline",
    "canary",
    "postgres",
    "pooler",
    "vacuum",
    "garden",
    "tomatoes",
    "basil",
    "webhook",
    "retry",
    "payments",
    "offsite",
    "lisbon",
    "budget",
    "travel",
    "router",
    "network",
    "backup",
    "restore",
    "invoice",
    "roadmap",
]


def workspace(root: Path, notes: int) -> Path:
    for i in range(notes):
        a, b, c = WORDS[i % len(WORDS)], WORDS[(i * 7) % len(WORDS)], WORDS[(i * 13) % len(WORDS)]
        write(
            root / "memory" / f"2026-{1 + i // 28:02d}-{1 + i % 28:02d}.md",
            f"# note {i}\n\n- {a} and {b}: decided to keep {c} as it is ({i}).\n"
            f"- follow-up on {b} next week; {a} owner is person {i % 5}.\n",
        )
    return root


def index(ws: Path, state: Path, rerank: dict[str, Any] | None) -> MemoryIndex:
    query: dict[str, Any] = {"minScore": 0.0}
    if rerank:
        query["rerank"] = rerank
    cfg = validate_config(
        {"agents": {"defaults": {"workspace": str(ws), "memorySearch": {"query": query}}}}
    )
    agent = resolve_agent(cfg, "main")
    provider = HashingEmbedder()
    idx = MemoryIndex(agent.index_settings(), ProviderSelection(provider.id, provider, "bench"))
    idx.sync()
    return idx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--candidates", type=int, default=24)
    ap.add_argument("--notes", type=int, default=400)
    args = ap.parse_args()
    # the loopback server answers in one segment: Nagle's wait for the client's delayed ACK of
    # the headers would otherwise add ~40 ms that a real server's single write does not
    embedding_servers._Handler.disable_nagle_algorithm = True
    queries = [
        f"{WORDS[i % len(WORDS)]} {WORDS[(i * 3 + 1) % len(WORDS)]}" for i in range(args.queries)
    ]
    with tempfile.TemporaryDirectory() as tmp, serve(FakeRerank(key=None)) as url:
        ws = workspace(Path(tmp) / "ws", args.notes)
        import os

        os.environ["MEMORYD_STATE_DIR"] = str(Path(tmp) / "state")
        off = index(ws, Path(tmp), None)
        on = index(
            ws,
            Path(tmp),
            {"provider": "remote", "candidates": args.candidates, "remote": {"baseUrl": url}},
        )
        for q in queries[:10]:  # warm both: connections, caches
            off.search(q)
            on.search(q)
        stage: list[float] = []
        docs: list[int] = []
        t_off: list[float] = []
        t_on: list[float] = []
        for q in queries:
            t = time.perf_counter()
            off.search(q)
            t_off.append(time.perf_counter() - t)
            t = time.perf_counter()
            out = on.search(SearchRequest(q, explain=True))
            t_on.append(time.perf_counter() - t)
            if out.results and out.results[0].explain and out.results[0].explain["rerank"]:
                rr = out.results[0].explain["rerank"]
                assert rr["degraded"] is None, rr
                stage.append(rr["seconds"])
                docs.append(max(r["before"] for r in [rr]))
        off.close()
        on.close()
    stage.sort()
    p95 = stage[int(0.95 * (len(stage) - 1))]
    print(f"queries {len(queries)}, reranked {len(stage)}, candidates ≤ {args.candidates}")
    print(
        f"rerank stage (its own time):  median {1000 * statistics.median(stage):.2f} ms, "
        f"p95 {1000 * p95:.2f} ms"
    )
    m_off, m_on = statistics.median(t_off), statistics.median(t_on)
    print(
        f"search median: off {1000 * m_off:.2f} ms, on (explain) {1000 * m_on:.2f} ms, "
        f"ratio on/off {m_on / m_off:.2f}"
    )


if __name__ == "__main__":
    main()
