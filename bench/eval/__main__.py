"""`python -m bench.eval`: build workspaces, run every system, print the table, write the report.

Examples (from the repository root, venv active):
    python -m bench.eval                                  # everything the README table shows
    python -m bench.eval --datasets locomo --systems keyword,vector,hybrid
    python -m bench.eval --locomo other.json --samples conv-1 --systems hybrid --runs-out runs.jsonl
    python -m bench.eval score --locomo other.json --runs runs.jsonl   # score any system's runs
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from memoryd.config import deep_merge

from . import crosslingual as XL
from . import metrics as M
from . import offtopic as OT
from .datasets import Dataset, Query, Workspace, load_cisi, load_cranfield, load_locomo
from .report import print_tables, write_report

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = (ROOT / ".." / "shared" / "eval").resolve()

# name → (mode, rank-parameter overrides); anything named `hybrid-<fusion>` is a fusion variant,
# `keyword-<fusion>` / `vector-<fusion>` one side scored by that fusion (`keyword-relative`: the
# previous default's keyword-only search, which never abstains)
BUILTIN = {
    "keyword": ("keyword", {}),
    "vector": ("vector", {}),
    "hybrid": (None, {}),
}
QMD = {"qmd-search": "search", "qmd-query": "query"}
DEFAULT_SYSTEMS = (
    "hybrid,hybrid-relative,keyword,vector,keyword-relative,vector-relative,qmd-search"
)


def system_spec(name: str) -> tuple[str | None, dict[str, Any]]:
    if name in BUILTIN:
        return BUILTIN[name]
    if name.startswith("hybrid-"):
        return None, {"fusion": name.removeprefix("hybrid-")}
    mode, _, fusion = name.partition("-")
    if mode in ("keyword", "vector") and fusion:  # one side under another fusion's scores
        return mode, {"fusion": fusion}
    raise SystemExit(f"unknown system {name!r}")


def _size(raw: str) -> tuple[int, int]:
    tokens, sep, overlap = raw.partition("/")
    if not sep or not tokens.isdigit() or not overlap.isdigit():
        raise argparse.ArgumentTypeError(f"expected TOKENS/OVERLAP such as 160/16, got {raw!r}")
    return int(tokens), int(overlap)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.eval",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("command", nargs="?", default="run", choices=["run", "score"])
    p.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="shared eval folder (default ../shared/eval)",
    )
    p.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "out", help="workspaces, indexes, qmd homes"
    )
    p.add_argument(
        "--datasets",
        default="locomo,cranfield,cisi,offtopic,crosslingual",
        help="on-topic sets (locomo, cranfield, cisi), `offtopic` (pairs of the loaded sets, "
        "see offtopic.py) and `crosslingual`",
    )
    p.add_argument("--offtopic-sets", help="comma-separated off-topic set names (default all)")
    p.add_argument("--locomo", type=Path, help="a LoCoMo-format JSON file (default: the dev set)")
    p.add_argument("--samples", help="comma-separated LoCoMo sample ids")
    p.add_argument("--systems", default=DEFAULT_SYSTEMS, help=f"default {DEFAULT_SYSTEMS}")
    p.add_argument(
        "--qmd-datasets",
        default="locomo,cranfield,cisi",
        help="datasets the qmd systems run on (qmd-query embeds them first: slow on big sets)",
    )
    p.add_argument("--runs-out", type=Path, help="LoCoMo: JSONL of returned results per question")
    p.add_argument("--runs", type=Path, help="score: a runs JSONL to score")
    p.add_argument("--report", type=Path, help="JSON report (default <out>/report.json)")
    p.add_argument("--limit", type=int, help="at most N queries per workspace (smoke runs)")
    p.add_argument("--chunk-tokens", type=int, help="chunking.tokens (default: memoryd's, 400)")
    p.add_argument("--chunk-overlap", type=int, help="chunking.overlap (default: memoryd's, 80)")
    p.add_argument(
        "--daily-notes",
        type=_size,
        metavar="TOKENS/OVERLAP",
        help="chunking.dailyNotes, a size of their own for daily notes, e.g. 160/16",
    )
    p.add_argument(
        "--max-results",
        type=int,
        help="query.maxResults of the agent runs (default: the config's default)",
    )
    p.add_argument(
        "--search-config",
        type=json.loads,
        help='JSON merged into memorySearch for every builtin index, e.g. \'{"query": {"hybrid": '
        '{"candidateMultiplier": 8}}}\'',
    )
    p.add_argument(
        "--constant",
        action="append",
        default=[],
        metavar="MODULE.NAME=VALUE",
        help="set a module constant for this run (a tuning variant not in the config), e.g. "
        "memoryd.core.ranking.VEC_FLOOR_SAME_SCRIPT=2.0; repeatable",
    )
    p.add_argument(
        "--embedded",
        type=float,
        metavar="SHARE",
        help="search a copy of each index in which only this share (0-1) of the chunks has a "
        "vector, as a fresh workspace has while its first chunks embed; default 1",
    )
    p.add_argument(
        "--embedded-order",
        choices=["first", "spread"],
        default="first",
        help="which chunks keep their vector: the first by id, as the indexer embeds them "
        "(default), or spread over the whole index",
    )
    p.add_argument("--model", help="local embedding model name (default: memoryd's default)")
    p.add_argument("--provider", default="local", help="embedding provider for the builtin index")
    return p.parse_args(argv)


def load_datasets(args: argparse.Namespace) -> list[Dataset]:
    ws_out = args.out / "workspaces"
    wanted = [d.strip() for d in args.datasets.split(",") if d.strip()]
    samples = [s.strip() for s in args.samples.split(",")] if args.samples else None
    out: list[Dataset] = []
    for name in wanted:
        if name in ("offtopic", "crosslingual"):
            continue
        if name == "locomo":
            path = args.locomo or args.data / "locomo-dev" / "locomo-dev.json"
            label = "locomo" if args.locomo is None else f"locomo-{path.stem}"
            out.append(load_locomo(path, ws_out, samples, name=label))
        elif name == "cranfield":
            out.append(load_cranfield(args.data / "cranfield", ws_out))
        elif name == "cisi":
            out.append(load_cisi(args.data / "cisi", ws_out))
        else:
            raise SystemExit(f"unknown dataset {name!r}")
    return out


def runs_path(base: Path, dataset: str, system: str, many: bool) -> Path:
    if not many:
        return base
    return base.with_name(f"{base.stem}.{dataset}.{system}{base.suffix or '.jsonl'}")


def run_workspace(
    args: argparse.Namespace,
    ds: Dataset,
    ws: Workspace,
    systems: list[str],
    sink: dict[str, dict[str, list[dict[str, Any]]]],
    runs: dict[str, list[dict[str, Any]]],
    timing: dict[str, list[float]],
) -> None:
    from .builtin import search

    queries = ws.queries[: args.limit] if args.limit else ws.queries
    builtin = [s for s in systems if not s.startswith("qmd-")]
    qmd_systems = [
        s
        for s in systems
        if s.startswith("qmd-") and ds.name.split("-")[0] in args.qmd_datasets.split(",")
    ]
    if builtin:
        idx = open_workspace_index(args, ws)
        try:
            for q in queries:
                for system in builtin:
                    mode, overrides = system_spec(system)
                    t0 = time.perf_counter()
                    agent = search(idx, q.text, mode=mode, overrides=overrides)
                    timing[system].append(time.perf_counter() - t0)
                    record(ds, ws, q, system, agent, sink, runs)
                    if ds.kind == "collection":
                        ranking = search(
                            idx,
                            q.text,
                            mode=mode,
                            overrides=overrides,
                            max_results=100,
                            min_score=0.0,
                            max_chars=10**9,
                        )
                        sink[system].setdefault("ranking", []).append(
                            M.collection_ranking_metrics(q, ranking)
                        )
        finally:
            idx.close()
    if qmd_systems:
        for system in qmd_systems:
            qmd_ws = qmd_system(args, ws, system)
            try:
                for q in queries:
                    t0 = time.perf_counter()
                    agent = qmd_ws.search(q.text)
                    timing[system].append(time.perf_counter() - t0)
                    record(ds, ws, q, system, agent, sink, runs)
                    if ds.kind == "collection":
                        ranking = qmd_ws.ranking(q.text)
                        sink[system].setdefault("ranking", []).append(
                            M.collection_ranking_metrics(q, ranking)
                        )
                answered = sink[system].setdefault("answers", [])
                answered.append({"qmd": float(qmd_ws.from_qmd), "all": float(qmd_ws.answers)})
            finally:
                qmd_ws.close()


def record(
    ds: Dataset,
    ws: Workspace,
    q: Query,
    system: str,
    results: list[dict[str, Any]],
    sink: dict[str, dict[str, list[dict[str, Any]]]],
    runs: dict[str, list[dict[str, Any]]],
) -> None:
    if ds.kind == "conversation":
        row = M.conversation_metrics(q, results, ws.turns)
        row["category"] = q.category
        if row["evidence_total"]:
            sink[system].setdefault("agent", []).append(row)
        runs[system].append({"qid": q.qid, "results": results})
    else:
        sink[system].setdefault("agent", []).append(M.collection_agent_metrics(q, results))


def summarize(
    ds: Dataset,
    per_system: dict[str, dict[str, list[dict[str, Any]]]],
    timing: dict[str, list[float]],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for system, parts in per_system.items():
        entry: dict[str, Any] = {}
        agent_rows = parts.get("agent", [])
        if ds.kind == "conversation":
            entry["agent"] = M.summarize_conversation(agent_rows)
            by_cat: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for r in agent_rows:
                by_cat[r["category"]].append(r)
            entry["by_category"] = {
                c: M.summarize_conversation(rows) for c, rows in sorted(by_cat.items())
            }
        else:
            entry["agent"] = M.summarize_mean(
                agent_rows, ["hit", "rr", "n_results", "span_lines", "chars"]
            )
            entry["ranking"] = M.summarize_mean(
                parts.get("ranking", []), ["ndcg@10", "recall@10", "recall@100"]
            )
        answers = parts.get("answers")
        if answers:
            total = sum(a["all"] for a in answers)
            entry["answered_by_qmd"] = sum(a["qmd"] for a in answers) / total if total else 0.0
        t = sorted(timing.get(system, []))
        if t:
            entry["latency_ms"] = {
                "p50": 1000 * t[len(t) // 2],
                "p95": 1000 * t[int(len(t) * 0.95) - 1 if len(t) > 1 else 0],
            }
        out[system] = entry
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for s in systems:
        if s not in QMD:
            system_spec(s)
    report: dict[str, Any] = {
        "systems": systems,
        "chunking": [args.chunk_tokens, args.chunk_overlap, args.daily_notes],
        "max_results": args.max_results,
        "search_config": args.search_config,
        "constants": getattr(args, "constants", {}),
        "model": args.model,
        "embedded": [args.embedded, args.embedded_order] if args.embedded is not None else None,
        "datasets": {},
    }
    datasets = load_datasets(args)
    for ds in datasets:
        print(
            f"{ds.name}: {len(ds.workspaces)} workspace(s), {sum(len(w.queries) for w in ds.workspaces)} queries",
            file=sys.stderr,
            flush=True,
        )
        per_system: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(dict)
        runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        timing: dict[str, list[float]] = defaultdict(list)
        for ws in ds.workspaces:
            run_workspace(args, ds, ws, systems, per_system, runs, timing)
        report["datasets"][ds.name] = summarize(ds, per_system, timing)
        if args.runs_out and ds.kind == "conversation":
            many = len(runs) > 1
            for system, lines in runs.items():
                path = runs_path(args.runs_out, ds.name, system, many)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(
                    "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines),
                    encoding="utf-8",
                )
                print(f"  runs → {path}", file=sys.stderr)
    wanted = {d.strip() for d in args.datasets.split(",")}
    if "offtopic" in wanted:
        report["offtopic"] = run_offtopic(args, datasets, systems)
    if "crosslingual" in wanted:
        report["crosslingual"] = run_crosslingual(args, systems)
    return report


def run_offtopic(
    args: argparse.Namespace, datasets: list[Dataset], systems: list[str]
) -> dict[str, Any]:
    """Every off-topic set through every system: share answered, characters injected."""
    from .builtin import search

    wanted = set(args.offtopic_sets.split(",")) if args.offtopic_sets else None
    out: dict[str, Any] = {}
    xl_ws = XL.load_crosslingual(args.out / "workspaces")[0].workspaces[0]
    builtin = [s for s in systems if s not in QMD]
    for ot in OT.build_sets(datasets, wanted, xl_ws):
        print(f"{ot.name}: {ot.queries} off-topic queries", file=sys.stderr, flush=True)
        rows: dict[str, list[dict[str, float]]] = defaultdict(list)
        for ws, queries in ot.pairs:
            queries = queries[: args.limit] if args.limit else queries
            if builtin:
                idx = open_workspace_index(args, ws)
                try:
                    for q in queries:
                        for system in builtin:
                            mode, overrides = system_spec(system)
                            got = search(idx, q.text, mode=mode, overrides=overrides)
                            rows[system].append(OT.offtopic_row(got))
                finally:
                    idx.close()
            for system in (s for s in systems if s in QMD):
                qmd_ws = qmd_system(args, ws, system)
                try:
                    for q in queries:
                        rows[system].append(OT.offtopic_row(qmd_ws.search(q.text)))
                finally:
                    qmd_ws.close()
        out[ot.name] = {system: OT.summarize(r) for system, r in rows.items()}
    return out


def qmd_system(args: argparse.Namespace, ws: Workspace, system: str) -> Any:
    """memoryd over the real qmd for one workspace, in the mode `system` names."""
    from .qmd import QmdSystem, embed_model

    mode = QMD[system]
    home = args.out / "qmd" / (ws.name if mode == "search" else f"{ws.name}-{mode}")
    return QmdSystem(ws.root, home, args.out / "qmd-state", mode, embed_model(args.data))


def run_crosslingual(args: argparse.Namespace, systems: list[str]) -> dict[str, Any]:
    """The judged cross-lingual set (crosslingual.py) through every system."""
    from .builtin import search

    ds, judged = XL.load_crosslingual(args.out / "workspaces")
    ws = ds.workspaces[0]
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    builtin = [s for s in systems if s not in QMD]
    if builtin:
        idx = open_workspace_index(args, ws)
        try:
            for q in ws.queries:
                for system in builtin:
                    mode, overrides = system_spec(system)
                    got = search(idx, q.text, mode=mode, overrides=overrides)
                    rows[system].append(
                        {"direction": q.category, **XL.crosslingual_row(judged[q.qid], got)}
                    )
        finally:
            idx.close()
    for system in (s for s in systems if s in QMD):
        qmd_ws = qmd_system(args, ws, system)
        try:
            for q in ws.queries:
                got = qmd_ws.search(q.text)
                rows[system].append(
                    {"direction": q.category, **XL.crosslingual_row(judged[q.qid], got)}
                )
        finally:
            qmd_ws.close()
    out: dict[str, Any] = {}
    for system, items in rows.items():
        entry = M.summarize_mean(items, ["hit", "rr", "n_results", "chars"])
        by_dir: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in items:
            by_dir[r["direction"]].append(r)
        entry["by_direction"] = {
            d: M.mean(r["hit"] for r in rs) for d, rs in sorted(by_dir.items())
        }
        out[system] = entry
    return out


def index_suffix(args: argparse.Namespace) -> str:
    from .builtin import chunk_suffix

    return (
        chunk_suffix(args.chunk_tokens, args.chunk_overlap, args.daily_notes)
        + (f"-{args.model}" if args.model else "")
        + (f"-{args.provider}" if args.provider != "local" else "")
    )


def search_config(args: argparse.Namespace) -> dict[str, Any] | None:
    """What the command line changes in memorySearch (`--max-results`, `--search-config`)."""
    extra: dict[str, Any] = dict(args.search_config or {})
    if args.max_results:
        extra = deep_merge(extra, {"query": {"maxResults": args.max_results}})
    return extra or None


def open_workspace_index(args: argparse.Namespace, ws: Any) -> Any:
    """The cached index of one eval workspace, for the model and chunking `args` name; with
    `--embedded`, a copy of it in which only that share of the chunks keeps its vector."""
    from .builtin import open_index, partial_copy

    full = args.out / "index" / f"{ws.name}-{index_suffix(args)}.sqlite"
    options: dict[str, Any] = {
        "provider": args.provider,
        "model": args.model,
        "tokens": args.chunk_tokens,
        "overlap": args.chunk_overlap,
        "daily": args.daily_notes,
        "extra": search_config(args),
    }
    idx = open_index(ws.root, full, **options)
    if args.embedded is None:
        return idx
    idx.close()
    share = f"{round(args.embedded * 100)}{args.embedded_order}"
    partial = args.out / "partial" / f"{ws.name}-{index_suffix(args)}-e{share}.sqlite"
    kept, total = partial_copy(full, partial, args.embedded, args.embedded_order)
    print(f"  [{ws.name}] {kept} of {total} chunks keep their vector", file=sys.stderr)
    return open_index(ws.root, partial, embed=False, **options)


def score(args: argparse.Namespace) -> dict[str, Any]:
    """Score an external runs JSONL (`{qid, results}` per line) against a LoCoMo file."""
    if not args.runs:
        raise SystemExit("score needs --runs PATH")
    args.datasets = "locomo"
    ds = load_datasets(args)[0]
    by_qid = {q.qid: (ws, q) for ws in ds.workspaces for q in ws.queries}
    per: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(dict)
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    name = args.runs.stem
    for line in args.runs.read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            if item["qid"] in by_qid:
                ws, q = by_qid[item["qid"]]
                record(ds, ws, q, name, item["results"], per, runs)
    return {"systems": [name], "datasets": {ds.name: summarize(ds, per, {})}}


def set_constants(assignments: list[str]) -> dict[str, Any]:
    """Apply `--constant MODULE.NAME=VALUE` (VALUE read as JSON); returns what was set."""
    import importlib

    done: dict[str, Any] = {}
    for item in assignments:
        target, sep, raw = item.partition("=")
        module_name, _, name = target.rpartition(".")
        if not sep or not module_name:
            raise SystemExit(f"--constant wants MODULE.NAME=VALUE, got {item!r}")
        module = importlib.import_module(module_name)
        if not hasattr(module, name):
            raise SystemExit(f"{module_name} has no constant {name}")
        value = json.loads(raw)
        if type(value) is not type(getattr(module, name)):
            raise SystemExit(f"{target} is a {type(getattr(module, name)).__name__}")
        setattr(module, name, value)
        done[target] = value
    return done


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    args.constants = set_constants(args.constant)
    report = score(args) if args.command == "score" else run(args)
    print_tables(report)
    path = args.report or args.out / "report.json"
    write_report(report, path)
    print(f"report → {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
