"""The local model beside a baseline revision's: real chunks/s, query latency, load time.

Run:  .venv/bin/python bench/bench_embeddings.py --baseline REV [--rounds 4] [--queries 60]

Both revisions embed the same real chunks (LoCoMo dev sessions cut by memoryd's own chunker,
~330 model tokens each) in batches of 16, as `memoryd index` does, each in a process of its own
driven in turns (`_side_by_side.py`): one batch each per round, the order swapped every round,
so a change of machine load hits both alike. Compare the ratios, not the absolute figures (the
machine is shared). Then the same LoCoMo questions are embedded as queries, alternated, as a
long-lived process embeds them (`serve`, MCP, the Python API); a one-off command's query is
timed by bench_cold_cli.py.

Prints JSON (also written to bench/out/embeddings.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT / ".." / "shared" / "eval" / "locomo-dev" / "locomo-dev.json").resolve()
sys.path.insert(0, str(ROOT / "bench"))

from _scratch import scratch_folder  # noqa: E402
from _side_by_side import pair  # noqa: E402

from memoryd.core.chunking import chunk_lines  # noqa: E402


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


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    chunks, questions = locomo_chunks_and_questions()
    children = pair(args.baseline, root)
    out: dict[str, Any] = {"baseline": args.baseline, "load_avg_start": os.getloadavg()}
    walls = {c.name: 0.0 for c in children}
    queries: dict[str, list[float]] = {c.name: [] for c in children}
    try:
        for c in children:
            out[f"{c.name}_load_s"] = round(c.ask(op="load")["s"], 2)
        for rnd in range(args.rounds):
            batch = chunks[rnd * args.batch : (rnd + 1) * args.batch]
            for c in children if rnd % 2 == 0 else children[::-1]:
                walls[c.name] += c.ask(op="docs", texts=batch)["s"]
            print(f"round {rnd + 1}/{args.rounds}", file=sys.stderr, flush=True)
        for i, q in enumerate(questions[: args.queries]):
            for c in children if i % 2 == 0 else children[::-1]:
                queries[c.name].append(c.ask(op="query", text=q)["s"] * 1000)
    finally:
        for c in children:
            c.close()
    n = args.rounds * args.batch
    for name in walls:
        out[f"{name}_chunks_per_s"] = round(n / walls[name], 2)
        out[f"{name}_query_p50_ms"] = round(statistics.median(queries[name]), 2)
        out[f"{name}_query_p95_ms"] = round(pct(queries[name], 95), 2)
    out["chunks_per_s_this_over_baseline"] = round(walls["baseline"] / walls["this"], 2)
    out["query_p50_this_over_baseline"] = round(
        statistics.median(queries["this"]) / statistics.median(queries["baseline"]), 2
    )
    out["chunks"] = n
    out["load_avg_end"] = os.getloadavg()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, help="a git revision measured beside this one")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "embeddings.json"))
    args = ap.parse_args()
    with scratch_folder("memoryd-embeddings-") as root:
        results = run(args, root)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
