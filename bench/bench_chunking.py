"""Chunking benchmark: hostile inputs, this code and optionally a git revision's, in one run.

Run:  .venv/bin/python bench/bench_chunking.py [--scale 1.0] [--baseline REV [--baseline-timeout 600]]

Inputs (deterministic): one 5 MB line of words, a 50 MB note of ordinary lines, one 1 MB line of
CJK text. This checkout's `chunk_lines` runs in this process (best of `--repeat`). With
`--baseline REV`, that revision's runs in a child process per input (its exported `src/` first on
`PYTHONPATH`), so an input it cannot finish within `--baseline-timeout` seconds is reported as a
lower bound instead of stalling the run; when both finish, their chunks are compared. `--scale
0.1` shrinks every input for a quick look.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _scratch import scratch_folder
from _side_by_side import export_revision

from memoryd.core.chunking import Chunk, chunk_lines

MB = 1_000_000
_WORDS = random.Random(7)
WORDS = [
    "".join(_WORDS.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_WORDS.randint(2, 10)))
    for _ in range(3000)
]
CJK = "我们明天去北京开会讨论新的项目计划東京で会いましょう서울에서만나요"


def words_line(size: int) -> str:
    rng = random.Random(size)
    out, n = [], 0
    while n < size:
        word = rng.choice(WORDS)
        out.append(word)
        n += len(word) + 1
    return " ".join(out)[:size]


def ordinary_note(size: int) -> str:
    rng = random.Random(size)
    lines, n = [], 0
    while n < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 16)))
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)


def cjk_line(size: int) -> str:
    rng = random.Random(size)
    return "".join(rng.choice(CJK) for _ in range(size))


CASES: dict[str, tuple[Callable[[int], str], int]] = {
    "5 MB single line": (words_line, 5 * MB),
    "50 MB ordinary note": (ordinary_note, 50 * MB),
    "1 MB CJK line": (cjk_line, 1 * MB),
}


def make_input(case: str, scale: float) -> str:
    make, size = CASES[case]
    return make(int(size * scale))


def digest(chunks: list[Chunk]) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(f"{c.start_line}:{c.end_line}:{c.tokens}:{c.hash}\n".encode())
    return h.hexdigest()


def run_one(case: str, scale: float) -> None:
    """Child process: time the `chunk_lines` this process imports on one input, print JSON."""
    text = make_input(case, scale)
    started = time.perf_counter()
    chunks = chunk_lines(text)
    print(json.dumps({"seconds": time.perf_counter() - started, "digest": digest(chunks)}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every input size")
    ap.add_argument("--baseline", metavar="REV", help="also time this git revision's chunking")
    ap.add_argument(
        "--baseline-timeout", type=float, default=600.0, help="seconds per baseline run"
    )
    ap.add_argument("--repeat", type=int, default=3, help="passes of this code (best is kept)")
    ap.add_argument("--run-one", metavar="CASE", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_one:
        run_one(args.run_one, args.scale)
        return
    with scratch_folder("memoryd-bench-chunking-", keep=False) as root:
        env = None
        if args.baseline:
            src = export_revision(args.baseline, root / "baseline")
            env = {**os.environ, "PYTHONPATH": str(src)}
        print(
            f"{'input':24}{'chars':>12}{'chunks':>9}{'this s':>9}{'base s':>10}{'base/this':>11}  same"
        )
        for case in CASES:
            text = make_input(case, args.scale)
            best = float("inf")
            for _ in range(args.repeat):
                started = time.perf_counter()
                chunks = chunk_lines(text)
                best = min(best, time.perf_counter() - started)
            base_s, ratio, same = "-", "-", "-"
            if env is not None:
                cmd = [sys.executable, __file__, "--run-one", case, "--scale", str(args.scale)]
                try:
                    done = subprocess.run(
                        cmd,
                        capture_output=True,
                        text=True,
                        check=True,
                        timeout=args.baseline_timeout,
                        env=env,
                    )
                    base = json.loads(done.stdout)
                    base_s, ratio = f"{base['seconds']:.2f}", f"{base['seconds'] / best:.1f}x"
                    same = "yes" if base["digest"] == digest(chunks) else "NO"
                except subprocess.TimeoutExpired:
                    limit = args.baseline_timeout
                    base_s, ratio, same = f">{limit:.0f}", f">{limit / best:.0f}x", "n/a"
            print(
                f"{case:24}{len(text):>12,}{len(chunks):>9}{best:>9.2f}{base_s:>10}{ratio:>11}"
                f"  {same}"
            )


if __name__ == "__main__":
    main()
