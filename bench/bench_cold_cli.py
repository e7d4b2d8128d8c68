"""Cold CLI: `memoryd search --json` in a new process, next to `qmd search --json`, same 5 notes.

Run:  .venv/bin/python bench/bench_cold_cli.py [--runs 7] [--qmd PATH] [--baseline REV]

Every run is a fresh process of the `memoryd` console script beside this interpreter, as a
user runs it (imports, config, SQLite open, model load when hybrid, search, JSON out); the
index already exists, as for a user who ran `memoryd index` once. Rows:

* `memoryd keyword-only` — `provider = "none"`;
* `memoryd keyword-only, config validated` — the same with no config cache (its folder cannot be
  made), so every run validates the config with pydantic: what the cache saves;
* `memoryd hybrid` — the default local model (loads it, embeds the query);
* `memoryd first search, never indexed` — a new state dir each run: the search syncs the text
  phase and embeds vectors for at most `searchWaitMs` (default 2000 ms) before answering;
* `memoryd first search, 200 notes never indexed` — the same on a 200-note workspace (~350
  chunks): too much to embed within the budget, so the answer is by keywords with a note;
* `qmd search` — qmd 2.8.3's BM25 search (no model), driven offline with its own isolated
  config and cache dirs, from a neutral cwd, as memoryd's adapter runs it.

With `--baseline REV` (a git revision, e.g. the previous commit), that revision's `src/` is
exported and timed in the same run, interleaved with the current code (its own state dir and
index) in alternating order, as `baseline …` rows, with the ratios this / baseline.

Prints p50/max wall seconds per row and the ratios to qmd (also bench/out/cold_cli.json).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_QMD = ROOT / ".tools" / "qmd" / "bin" / "qmd"
NOTES = {
    "MEMORY.md": "# Memory\n- Production deploys go to fly.io, region ams.\n- Postgres is 16.4.\n",
    "memory/2026-11-25.md": "# 2026-11-25\n- Rotated the webhook secret; the old one stops working on Dec 2.\n",
    "memory/2026-11-26.md": "# 2026-11-26\n- Alice adopted a grey kitten named Miso.\n- CI moved to GitHub Actions.\n",
    "memory/2026-11-27.md": "# 2026-11-27\n- Decided: pgbouncer timeout stays at 30s.\n- Offsite in Lisbon in March.\n",
    "memory/2026-11-28.md": "# 2026-11-28\n- Grafana alert for disk usage fires at 85%.\n- Dentist on Friday 10:00.\n",
}
BIG_QUERY = "postgres migration incident"
QUERIES = [
    "when does the old webhook secret stop working",
    "postgres version",
    "where do we deploy production",
    "what is the pgbouncer timeout",
    "who adopted a kitten",
    "grafana disk alert threshold",
    "where is the offsite",
]


def workspace(root: Path) -> Path:
    ws = root / "ws"
    for rel, text in NOTES.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    return ws


def big_workspace(root: Path) -> Path:
    """200 daily notes of 6-22 lines: ~350 chunks, more than a first search embeds."""
    rng = random.Random(3)
    words = (
        "alpha beta gamma delta deploy server postgres kitten webhook budget meeting lisbon "
        "tokyo release migration incident review design roadmap customer invoice latency cache "
        "index vector query memory agent note plan"
    ).split()
    ws = root / "big"
    (ws / "memory").mkdir(parents=True)
    for i in range(200):
        day = f"2026-{(i // 28) % 12 + 1:02d}-{i % 28 + 1:02d}"
        lines = [f"# {day}"] + [
            "- " + " ".join(rng.choice(words) for _ in range(rng.randint(8, 30))) + "."
            for _ in range(rng.randint(6, 22))
        ]
        (ws / "memory" / f"{day}-{i}.md").write_text("\n".join(lines) + "\n")
    (ws / "MEMORY.md").write_text("# Memory\n- Production deploys go to fly.io.\n")
    return ws


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return wall, proc.stdout


def memoryd_config(root: Path, ws: Path, name: str, provider: str) -> Path:
    cfg = root / f"{name}.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n'
        f'[agents.defaults.memorySearch]\nprovider = "{provider}"\n'
        f'[agents.defaults.memorySearch.store]\npath = "{root / (name + ".sqlite")}"\n'
    )
    return cfg


def export_revision(rev: str, dest: Path) -> Path:
    """`src/` of a git revision, exported and byte-compiled (as an installed copy would be)."""
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest / "src")], check=True)
    return dest / "src"


def qmd_search(qmd: Path, query: str, qenv: dict[str, str], root: Path) -> float:
    wall, out = timed([str(qmd), "search", query, "--json"], qenv, root / "qmd" / "cwd")
    json.loads(out)
    return wall


def summarize(walls: list[float]) -> dict[str, float]:
    return {"p50_s": round(statistics.median(walls), 3), "max_s": round(max(walls), 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--qmd", default=str(DEFAULT_QMD))
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "cold_cli.json"))
    ap.add_argument("--baseline", help="a git revision whose src/ is timed alongside")
    args = ap.parse_args()
    # bytecode for the code under test, as an install has it: with PYTHONDONTWRITEBYTECODE set
    # (it is, in some sandboxes) a module edited since its last .pyc would be compiled again
    # in every timed process (~26 ms for builtin_index/index.py), the baseline's never is
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "src" / "memoryd")], check=True
    )
    root = Path(tempfile.mkdtemp(prefix="memoryd-cold-"))
    ws = workspace(root)
    env = {**os.environ, "MEMORYD_STATE_DIR": str(root / "state")}
    env.pop("MEMORYD_CONFIG", None)
    # the console script, as a user runs it (`python -m memoryd` adds runpy's ~10 ms)
    script = Path(sys.executable).with_name("memoryd")
    memoryd = [str(script)] if script.exists() else [sys.executable, "-m", "memoryd"]
    kw = memoryd_config(root, ws, "kw", "none")
    hy = memoryd_config(root, ws, "hybrid", "local")
    for cfg in (kw, hy):
        timed([*memoryd, "index", "--config", str(cfg), "--json"], env, root)
    big = big_workspace(root)
    # a file where the config cache's folder would be: no cache, the config validates every run
    uncached_env = {**env, "MEMORYD_STATE_DIR": str(root / "state-uncached")}
    (root / "state-uncached").mkdir()
    (root / "state-uncached" / "config-cache").write_text("not a folder")
    rows: dict[str, list[float]] = {
        "memoryd keyword-only": [],
        "memoryd keyword-only, config validated": [],
        "memoryd hybrid": [],
        "memoryd first search, never indexed": [],
        "memoryd first search, 200 notes never indexed": [],
        "qmd search": [],
    }
    base_env: dict[str, str] | None = None
    if args.baseline:
        src = export_revision(args.baseline, root / "baseline")
        base_env = {
            **env,
            "MEMORYD_STATE_DIR": str(root / "state-baseline"),
            "PYTHONPATH": str(src),
        }
        kw_base = memoryd_config(root, ws, "kw-baseline", "none")
        hy_base = memoryd_config(root, ws, "hybrid-baseline", "local")
        for cfg in (kw_base, hy_base):
            timed([*memoryd, "index", "--config", str(cfg), "--json"], base_env, root)
        rows["baseline keyword-only"] = []
        rows["baseline hybrid"] = []
        rows["baseline first search, never indexed"] = []
        rows["baseline first search, 200 notes never indexed"] = []
    qmd = Path(args.qmd)
    qenv: dict[str, str] | None = None
    if qmd.exists():
        home = root / "qmd"
        qenv = {
            **os.environ,
            "XDG_CONFIG_HOME": str(home / "config"),
            "QMD_CONFIG_DIR": str(home / "config" / "qmd"),
            "XDG_CACHE_HOME": str(home / "cache"),
            "NO_COLOR": "1",
        }
        (home / "cwd").mkdir(parents=True)
        timed([str(qmd), "collection", "add", str(ws), "--name", "notes"], qenv, home / "cwd")

    def search(cfg: Path, run_env: dict[str, str], query: str, check: str | None = None) -> float:
        wall, out = timed(
            [*memoryd, "search", "--json", "--config", str(cfg), query], run_env, root
        )
        if check == "hybrid":
            assert json.loads(out)["mode"] == "hybrid", out
        elif check == "results":
            assert json.loads(out)["results"], out
        return wall

    for i in range(args.runs):
        q = QUERIES[i % len(QUERIES)]
        jobs: list[tuple[str, Callable[[], float]]] = [
            ("memoryd keyword-only", functools.partial(search, kw, env, q)),
            (
                "memoryd keyword-only, config validated",
                functools.partial(search, kw, uncached_env, q),
            ),
            ("memoryd hybrid", functools.partial(search, hy, env, q, "hybrid")),
        ]
        for label, run_env in (("memoryd", env), ("baseline", base_env)):
            if run_env is None:
                continue
            for key, name, ws_dir, query, check in (
                ("fresh", "first search, never indexed", ws, q, None),
                ("big", "first search, 200 notes never indexed", big, BIG_QUERY, "results"),
            ):
                # a new state dir and index each run: the search finds nothing indexed
                state = root / f"{key}-{label}-{i}"
                cfg = memoryd_config(root, ws_dir, state.name, "local")
                fresh_env = {**run_env, "MEMORYD_STATE_DIR": str(state)}
                jobs.append(
                    (f"{label} {name}", functools.partial(search, cfg, fresh_env, query, check))
                )
        if base_env is not None:
            jobs.append(("baseline keyword-only", functools.partial(search, kw_base, base_env, q)))
            jobs.append(("baseline hybrid", functools.partial(search, hy_base, base_env, q)))
        if qenv is not None:
            jobs.append(("qmd search", functools.partial(qmd_search, qmd, q, qenv, root)))
        # the order alternates run by run: in a fixed order whatever runs second after its twin
        # gets a warm start
        for name, job in jobs if i % 2 == 0 else jobs[::-1]:
            rows[name].append(job())
    results: dict[str, object] = {
        "notes": len(NOTES),
        "runs": args.runs,
        "command": " ".join(memoryd),
        "python_startup_s": round(timed([sys.executable, "-c", "pass"], env, root)[0], 3),
    }
    for name, walls in rows.items():
        if walls:
            results[name] = summarize(walls)
    results["config validated / cached, keyword-only (p50)"] = round(
        statistics.median(rows["memoryd keyword-only, config validated"])
        / statistics.median(rows["memoryd keyword-only"]),
        2,
    )
    if rows["qmd search"]:
        base = statistics.median(rows["qmd search"])
        for name in ("memoryd keyword-only", "memoryd hybrid"):
            results[f"{name} / qmd search (p50)"] = round(statistics.median(rows[name]) / base, 2)
    else:
        results["qmd search"] = f"skipped: no qmd at {qmd}"
    if base_env is not None:
        results["baseline"] = args.baseline
        for name in (
            "keyword-only",
            "hybrid",
            "first search, never indexed",
            "first search, 200 notes never indexed",
        ):
            this, base = rows[f"memoryd {name}"], rows[f"baseline {name}"]
            results[f"memoryd {name} / baseline (p50)"] = round(
                statistics.median(this) / statistics.median(base), 2
            )
    shutil.rmtree(root, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
