"""Chunking benchmark: the robustness issue's inputs, old implementation vs new, in one run.

Run:  .venv/bin/python bench/bench_chunking.py [--scale 1.0] [--old-timeout 600]

Inputs (deterministic): one 5 MB line of words, a 50 MB note of ordinary lines, one 1 MB line of
CJK text. The new `chunk_lines` runs in this process (best of `--repeat`); the old one — the
frozen copy in `tests/test_chunking.py` — runs in a child process per input, so an input it cannot
finish within `--old-timeout` seconds is reported as a lower bound instead of stalling the run.
When both finish, their chunks are compared (they must be identical). `--scale 0.1` shrinks every
input for a quick look; the old code's time then shrinks quadratically on the long lines.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from memoryd.core.chunking import Chunk, chunk_lines  # noqa: E402

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


def run_old(case: str, scale: float) -> None:
    """Child process: time the frozen implementation on one input, print JSON."""
    from test_chunking import old_chunk_lines

    text = make_input(case, scale)
    started = time.perf_counter()
    chunks = old_chunk_lines(text)
    print(json.dumps({"seconds": time.perf_counter() - started, "digest": digest(chunks)}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every input size")
    ap.add_argument("--old-timeout", type=float, default=600.0, help="seconds per old run")
    ap.add_argument("--repeat", type=int, default=3, help="new-code passes (best is kept)")
    ap.add_argument("--run-old", metavar="CASE", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_old:
        run_old(args.run_old, args.scale)
        return

    print(f"{'input':24}{'chars':>12}{'chunks':>9}{'new s':>9}{'old s':>10}{'old/new':>10}  same")
    for case in CASES:
        text = make_input(case, args.scale)
        best = float("inf")
        for _ in range(args.repeat):
            started = time.perf_counter()
            chunks = chunk_lines(text)
            best = min(best, time.perf_counter() - started)
        new_digest = digest(chunks)
        cmd = [sys.executable, __file__, "--run-old", case, "--scale", str(args.scale)]
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, check=True, timeout=args.old_timeout
            )
            old = json.loads(done.stdout)
            old_s, ratio = f"{old['seconds']:.2f}", f"{old['seconds'] / best:.0f}x"
            same = "yes" if old["digest"] == new_digest else "NO"
        except subprocess.TimeoutExpired:
            old_s, ratio = f">{args.old_timeout:.0f}", f">{args.old_timeout / best:.0f}x"
            same = "n/a (old timed out)"
        print(
            f"{case:24}{len(text):>12,}{len(chunks):>9}{best:>9.2f}{old_s:>10}{ratio:>10}  {same}"
        )


if __name__ == "__main__":
    main()
