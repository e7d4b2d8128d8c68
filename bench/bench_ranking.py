"""Ranking in Python, this code vs a git revision's, in one process on the same candidates.

Run:  .venv/bin/python bench/bench_ranking.py --baseline REV [--rounds 7]

What a search does in Python after SQLite returns its candidates: the default fusion (`fuse`) over 24
chunks per query (term coverage, evidence, fusion) and `select_snippet` for 6 of them. The
chunks are the latency index's (`python -m bench.eval.latency` builds it: 11k chunks of
Cranfield, CISI and LoCoMo), the queries the first 300 of those sets. `memoryd.core` is pure,
so the revision's `core/` is exported (`git archive`) and imported as a package of its own beside
the current one; both run the same work alternately, and the answers must be identical. Prints
the median ms per query for each and the ratio this / baseline.
"""

from __future__ import annotations

import argparse
import importlib
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.eval.datasets import load_cisi, load_cranfield, load_locomo  # noqa: E402

from memoryd.core import ranking as current  # noqa: E402


def core_of(rev: str, dest: Path) -> ModuleType:
    """`memoryd.core.ranking` of `rev`, imported as `core_<rev>.ranking`."""
    name = "core_" + "".join(ch if ch.isalnum() else "_" for ch in rev)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src/memoryd/core"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    (dest / "src" / "memoryd" / "core").rename(dest / name)
    sys.path.insert(0, str(dest))
    return importlib.import_module(f"{name}.ranking")


def work(
    m: ModuleType, pools: list[tuple[str, list[tuple[Any, ...]]]]
) -> tuple[float, list[object]]:
    answers: list[object] = []
    t = time.perf_counter()
    for query, pool in pools:
        cands = [
            m.Candidate(
                chunk_id=cid,
                path=path,
                source="memory",
                start_line=start,
                end_line=end,
                text=text,
                text_rank=k,
                text_score=float(len(pool) - k),  # a BM25 strength: positive, best first
            )
            for k, (cid, path, text, start, end) in enumerate(pool)
        ]
        answers.append([round(c.score, 12) for c in m.fuse(cands, query, m.RankParams())])
        for c in cands[:6]:
            twice = f"{c.text}\n{c.text}"
            answers.append(m.select_snippet(twice, 1, twice.count("\n") + 1, query, 700))
    return (time.perf_counter() - t) / len(pools) * 1000, answers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, help="a git revision whose core/ is timed too")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--data", type=Path, default=(ROOT / ".." / "shared" / "eval").resolve())
    args = ap.parse_args()
    index = args.out / "index" / "latency-10k.sqlite"
    if not index.is_file():
        raise SystemExit(f"{index} is missing: run `python -m bench.eval.latency` once first")
    with sqlite3.connect(index) as con:
        rows = con.execute("select id, path, text, start_line, end_line from chunks").fetchall()
    ws = args.out / "workspaces"
    sets = [
        load_cranfield(args.data / "cranfield", ws),
        load_cisi(args.data / "cisi", ws),
        load_locomo(args.data / "locomo-dev" / "locomo-dev.json", ws),
    ]
    queries = [q.text for ds in sets for w in ds.workspaces for q in w.queries][:300]
    rng = random.Random(5)
    pools = [(q, rng.sample(rows, 24)) for q in queries]
    with tempfile.TemporaryDirectory() as tmp:
        baseline = core_of(args.baseline, Path(tmp))
        times: dict[str, list[float]] = {"baseline": [], "this": []}
        for _ in range(args.rounds):  # alternated, so load changes hit both alike
            t_base, a_base = work(baseline, pools)
            t_this, a_this = work(current, pools)
            if a_base != a_this:
                raise SystemExit("the two revisions rank or cut snippets differently")
            times["baseline"].append(t_base)
            times["this"].append(t_this)
    b, t = statistics.median(times["baseline"]), statistics.median(times["this"])
    print(
        f"ranking + 6 snippets, {len(pools)} queries x 24 chunks: {args.baseline} {b:.2f} ms, "
        f"this code {t:.2f} ms per query (this / baseline {t / b:.2f}); answers identical"
    )


if __name__ == "__main__":
    main()
