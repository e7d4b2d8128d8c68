"""Adapter overhead: the raw `qmd query` memoryd sends vs `QmdManager.search` on the same corpus.

The adapter plans the query (`plan_query`), runs that one `qmd query`, reads each hit's file and
cuts its snippet window: the overhead is everything but qmd itself.

Usage: .venv/bin/python bench/bench_qmd_adapter.py [--qmd PATH] [--docs 200] [--runs 20]
Prints one JSON object on stdout (progress on stderr). Target: overhead ≤ 5 %.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memoryd.config import resolve_agent, validate_config
from memoryd.qmd_adapter import QmdManager, plan_query

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
]


def default_qmd() -> str:
    env = os.environ.get("MEMORYD_TEST_QMD")
    if env:
        return env
    local = Path(__file__).resolve().parents[1] / ".tools" / "qmd" / "bin" / "qmd"
    return str(local) if local.exists() else "qmd"


def make_corpus(ws: Path, docs: int) -> None:
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe zeppelin budget belongs to Carol.\n")
    for i in range(docs):
        body = "\n".join(
            f"- {WORDS[(i + j) % len(WORDS)]} {WORDS[(i * 3 + j) % len(WORDS)]} note {i}-{j} zeppelin"
            if j % 7 == 0
            else f"- {WORDS[(i + j) % len(WORDS)]} line {j}"
            for j in range(30)
        )
        (ws / "memory" / f"2026-01-{i:04d}.md").write_text(f"# Day {i}\n\n{body}\n")


def main(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-") as tmp:
        root = Path(tmp)
        ws = root / "ws"
        make_corpus(ws, args.docs)
        config = validate_config(
            {"memory": {"backend": "qmd", "qmd": {"limits": {"timeoutMs": 30_000}}}}
        )
        agent = resolve_agent(config, "bench", workspace=ws)
        mgr = QmdManager(
            agent.qmd_settings(), command=args.qmd, home=root / "home", shared_models_dir=None
        )
        print(f"indexing {args.docs} docs…", file=sys.stderr)
        mgr.start()
        mgr.probe()
        names = [c.name for c in mgr.known_collections()]
        plan = plan_query(args.query, mode="search", vectors=False)
        assert plan is not None
        n = agent.memory.qmd.limits.max_results
        argv = [args.qmd, *mgr.search_argv(plan.document, names, n + 2)]
        env, cwd = mgr.env(), str(mgr.home.neutral_cwd)

        def raw() -> float:
            t = time.perf_counter()
            subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=True)
            return time.perf_counter() - t

        def adapter() -> float:
            t = time.perf_counter()
            mgr.search(args.query)
            return time.perf_counter() - t

        raw()
        adapter()  # warm the page cache for both
        raw_s: list[float] = []
        adapter_s: list[float] = []
        for i in range(args.runs):  # interleaved so drift hits both equally
            raw_s.append(raw())
            adapter_s.append(adapter())
            print(f"run {i + 1}/{args.runs}", file=sys.stderr)
        raw_med, ad_med = statistics.median(raw_s), statistics.median(adapter_s)
        return {
            "docs": args.docs,
            "runs": args.runs,
            "query": args.query,
            "qmdVersion": mgr.status().version,
            "rawSearchMedianMs": round(raw_med * 1000, 1),
            "adapterSearchMedianMs": round(ad_med * 1000, 1),
            "overheadPct": round((ad_med - raw_med) / raw_med * 100, 2),
            "targetPct": 5.0,
            "hits": len(mgr.search(args.query).results),
        }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qmd", default=default_qmd())
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--query", default="zeppelin")
    print(json.dumps(main(parser.parse_args()), indent=2))
