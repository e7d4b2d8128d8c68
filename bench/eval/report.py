"""Print the results as Markdown tables and write the JSON report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _f(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}"


def conversation_table(name: str, systems: dict[str, Any], top: int | None = None) -> list[str]:
    rows = [
        f"### {name} — agent budget (top {top or 6}, ≤ 4000 chars)",
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


def offtopic_table(sets: dict[str, Any]) -> list[str]:
    """Per system, the share of off-topic queries that returned anything, per set and pooled."""
    names = list(sets)
    systems = list(dict.fromkeys(s for per in sets.values() for s in per))
    rows = [
        "### off-topic — share of queries returning anything (chars injected per query, pooled)",
        "| system | " + " | ".join(names) + " | pooled | chars |",
        "|---|" + "---|" * (len(names) + 2),
    ]
    for system in systems:
        cells = [f"{100 * sets[n][system]['any']:.1f}%" for n in names if system in sets[n]]
        pooled = pooled_offtopic(sets, system)
        rows.append(
            f"| {system} | " + " | ".join(cells) + f" | **{100 * pooled['any']:.1f}%** | "
            f"{pooled['chars']:.0f} |"
        )
    return rows


def pooled_offtopic(sets: dict[str, Any], system: str) -> dict[str, float]:
    """Off-topic figures pooled over sets, each set weighted equally (sizes differ 10×)."""
    per = [sets[n][system] for n in sets if system in sets[n]]
    if not per:
        return {"any": 0.0, "chars": 0.0}
    return {
        "any": sum(p["any"] for p in per) / len(per),
        "chars": sum(p["chars"] for p in per) / len(per),
    }


def crosslingual_table(systems: dict[str, Any]) -> list[str]:
    dirs = list(dict.fromkeys(d for e in systems.values() for d in e.get("by_direction", {})))
    rows = [
        "### cross-lingual — answered (note returned, answering line in the snippet)",
        "| system | answered | MRR | results | chars | " + " | ".join(dirs) + " |",
        "|---|---|---|---|---|" + "---|" * len(dirs),
    ]
    for system, e in systems.items():
        cells = [_f(e["by_direction"].get(d, 0.0)) for d in dirs]
        rows.append(
            f"| {system} | {_f(e['hit'])} | {_f(e['rr'])} | {e['n_results']:.1f} | "
            f"{e['chars']:.0f} | " + " | ".join(cells) + " |"
        )
    return rows


def summary_table(report: dict[str, Any]) -> list[str]:
    """On-topic and off-topic side by side: a system cannot win one by losing the other."""
    ds = report.get("datasets", {})
    off = report.get("offtopic", {})
    xl = report.get("crosslingual", {})
    systems = report.get("systems") or list(dict.fromkeys(s for v in ds.values() for s in v))
    rows = [
        "### summary — on-topic and off-topic together",
        "| system | LoCoMo evidence | multi-hop | open-domain | Cranfield nDCG@10 | CISI nDCG@10 "
        "| cross-lingual | off-topic answered | off-topic chars |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for system in systems:
        loc = ds.get("locomo", {}).get(system)
        cells = [
            _f(loc["agent"]["evidence"]) if loc else "–",
            _f(loc["by_category"].get("multi-hop", {}).get("evidence", 0.0)) if loc else "–",
            _f(loc["by_category"].get("open-domain", {}).get("evidence", 0.0)) if loc else "–",
        ]
        for name in ("cranfield", "cisi"):
            e = ds.get(name, {}).get(system)
            cells.append(_f(e["ranking"]["ndcg@10"]) if e else "–")
        cells.append(_f(xl[system]["hit"]) if system in xl else "–")
        if any(system in per for per in off.values()):
            pooled = pooled_offtopic(off, system)
            cells += [f"{100 * pooled['any']:.1f}%", f"{pooled['chars']:.0f}"]
        else:
            cells += ["–", "–"]
        rows.append(f"| {system} | " + " | ".join(cells) + " |")
    return rows


def print_tables(report: dict[str, Any]) -> None:
    for name, systems in report["datasets"].items():
        first = next(iter(systems.values()), {})
        lines = (
            conversation_table(name, systems, report.get("max_results"))
            if "by_category" in first
            else collection_table(name, systems)
        )
        shares = [
            f"{system} {100 * e['answered_by_qmd']:.1f} %"
            for system, e in systems.items()
            if "answered_by_qmd" in e
        ]
        if shares:  # failover is for failures: a qmd system's answers should be qmd's own
            lines.append(f"\nanswered by qmd (`backend: qmd`): {', '.join(shares)}")
        print("\n".join(lines) + "\n")
    if report.get("offtopic"):
        print("\n".join(offtopic_table(report["offtopic"])) + "\n")
    if report.get("crosslingual"):
        print("\n".join(crosslingual_table(report["crosslingual"])) + "\n")
    if report.get("offtopic") or report.get("crosslingual"):
        print("\n".join(summary_table(report)) + "\n")


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
