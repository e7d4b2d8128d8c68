"""Print the results as Markdown tables and write the JSON report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _f(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}"


def conversation_table(name: str, systems: dict[str, Any]) -> list[str]:
    rows = [
        f"### {name} — agent budget (top 6, ≤ 4000 chars)",
        "| system | evidence | hit | MRR | results | lines | chars | "
        + " | ".join(f"ev {c}" for c in _categories(systems))
        + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(_categories(systems)),
    ]
    for system, e in systems.items():
        a = e["agent"]
        cats = [_f(e["by_category"].get(c, {}).get("evidence", 0.0)) for c in _categories(systems)]
        rows.append(
            f"| {system} | {_f(a['evidence'])} | {_f(a['hit'])} | {_f(a['mrr'])} | {a['results']:.1f} | "
            f"{a['span_lines']:.0f} | {a['chars']:.0f} | " + " | ".join(cats) + " |"
        )
    return rows


def _categories(systems: dict[str, Any]) -> list[str]:
    seen: dict[str, None] = {}
    for e in systems.values():
        for c in e.get("by_category", {}):
            seen.setdefault(c, None)
    return list(seen)


def collection_table(name: str, systems: dict[str, Any]) -> list[str]:
    rows = [
        f"### {name}",
        "| system | nDCG@10 | R@10 | R@100 | hit@agent | MRR@agent | chars |",
        "|---|---|---|---|---|---|---|",
    ]
    for system, e in systems.items():
        r, a = e["ranking"], e["agent"]
        rows.append(
            f"| {system} | {_f(r['ndcg@10'])} | {_f(r['recall@10'])} | {_f(r['recall@100'])} | "
            f"{_f(a['hit'])} | {_f(a['rr'])} | {a['chars']:.0f} |"
        )
    return rows


def print_tables(report: dict[str, Any]) -> None:
    for name, systems in report["datasets"].items():
        first = next(iter(systems.values()), {})
        lines = (
            conversation_table(name, systems)
            if "by_category" in first
            else collection_table(name, systems)
        )
        print("\n".join(lines) + "\n")


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
