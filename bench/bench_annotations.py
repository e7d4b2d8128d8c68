"""What importance annotations cost a search: the same memory with and without them.

Run:  .venv/bin/python bench/bench_annotations.py [--entries 400] [--rounds 30]

Two workspaces hold the same curated `MEMORY.md` and `USER.md`, one bullet per fact. In one,
every bullet ends in `<!-- importance: N -->` with N drawn from 1..10, so each chunk holds entries
of different multipliers and the query's entry has to be found. In the other, every bullet
ends in `<!-- importance: x -->`: the same characters, but not a valid importance, so no
multiplier applies. Keyword-only built-in indexes (no model), the same queries alternately, in
one process. Prints the median ms per search for each and the ratio annotated / plain.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers import agent_for, index_for, write  # noqa: E402
from memoryd.builtin_index import MemoryIndex  # noqa: E402

WORDS = [
    "deploy",
    "staging",
    "database",
    "password",
    "rotate",
    "monday",
    "tea",
    "coffee",
    "budget",
    "review",
    "roster",
    "drills",
    "garden",
    "tomato",
    "frost",
    "zeppelin",
    "launch",
    "april",
    "carol",
    "alice",
    "bob",
    "espresso",
    "meeting",
    "friday",
]
QUERIES = [
    "when does the staging database password rotate",
    "carol zeppelin budget",
    "garden tomato frost",
    "alice espresso meeting",
    "what did bob review on friday",
]


def workspace(root: Path, facts: list[str], annotated: bool, rng: random.Random) -> MemoryIndex:
    lines = [
        f"- {fact} <!-- importance: {rng.randint(1, 10) if annotated else 'x'} -->"
        for fact in facts
    ]
    write(root / "MEMORY.md", "# Memory\n\n" + "\n".join(lines) + "\n")
    write(root / "USER.md", "# User\n\n" + "\n".join(lines[: len(lines) // 4]) + "\n")
    idx = index_for(agent_for(root), None)
    idx.sync()
    return idx


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", type=int, default=400, help="bullets in MEMORY.md")
    p.add_argument("--rounds", type=int, default=30, help="times each query runs on each")
    args = p.parse_args()
    rng = random.Random(7)
    facts = [" ".join(rng.choices(WORDS, k=10)) for _ in range(args.entries)]
    with tempfile.TemporaryDirectory() as tmp:
        plain = workspace(Path(tmp) / "plain", facts, False, rng)
        annotated = workspace(Path(tmp) / "annotated", facts, True, rng)
        times: dict[str, list[float]] = {"plain": [], "annotated": []}
        for r in range(args.rounds):
            order = [("plain", plain), ("annotated", annotated)]
            for query in QUERIES:
                for name, idx in order if r % 2 else order[::-1]:
                    start = time.perf_counter()
                    idx.search(query)
                    times[name].append(time.perf_counter() - start)
        chunks = plain.status().to_dict()["chunks"]
        plain.close()
        annotated.close()
    a, b = statistics.median(times["plain"]), statistics.median(times["annotated"])
    print(f"{chunks} chunks, {len(QUERIES)} queries x {args.rounds} rounds, keyword search")
    print(f"median per search: plain {a * 1e3:.2f} ms, annotated {b * 1e3:.2f} ms")
    print(f"ratio annotated / plain: {b / a:.3f}")


if __name__ == "__main__":
    main()
