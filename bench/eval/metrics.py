"""Metrics over returned results: pure functions of (results, judgments)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .datasets import Query, Turn, doc_id_of


def evidence_reached(result: Mapping[str, Any], turn: Turn) -> bool:
    """The evidence turn reached the agent: its line is in the result's range and its text in the snippet."""
    return (
        result["path"] == turn.path
        and result["startLine"] <= turn.line <= result["endLine"]
        and turn.text in result["snippet"]
    )


def conversation_metrics(
    query: Query, results: Sequence[Mapping[str, Any]], turns: Mapping[str, Turn]
) -> dict[str, Any]:
    """Per-question agent metrics for LoCoMo-style evidence judgments."""
    evidence = [turns[e] for e in dict.fromkeys(query.evidence) if e in turns]
    reached = [any(evidence_reached(r, t) for r in results) for t in evidence]
    first = next(
        (i for i, r in enumerate(results, 1) if any(evidence_reached(r, t) for t in evidence)), None
    )
    return {
        "evidence_total": len(evidence),
        "evidence_reached": sum(reached),
        "hit": 1.0 if first else 0.0,
        "rr": 1.0 / first if first else 0.0,
        **footprint(results),
    }


def footprint(results: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """What the agent had to read: results, lines spanned and snippet characters."""
    return {
        "n_results": float(len(results)),
        "span_lines": float(sum(r["endLine"] - r["startLine"] + 1 for r in results)),
        "chars": float(sum(len(r["snippet"]) for r in results)),
    }


def ranked_docs(results: Iterable[Mapping[str, Any]]) -> list[str]:
    """Doc ids in first-seen order (a document can return several chunks)."""
    out: dict[str, None] = {}
    for r in results:
        doc = doc_id_of(r["path"])
        if doc is not None:
            out.setdefault(doc, None)
    return list(out)


def ndcg_at(ranked: Sequence[str], gains: Mapping[str, float], k: int) -> float:
    dcg = sum(gains.get(d, 0.0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: Sequence[str], gains: Mapping[str, float], k: int) -> float:
    relevant = {d for d, g in gains.items() if g > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def collection_ranking_metrics(
    query: Query, results: Sequence[Mapping[str, Any]]
) -> dict[str, float]:
    docs = ranked_docs(results)
    return {
        "ndcg@10": ndcg_at(docs, query.relevant, 10),
        "recall@10": recall_at(docs, query.relevant, 10),
        "recall@100": recall_at(docs, query.relevant, 100),
    }


def collection_agent_metrics(
    query: Query, results: Sequence[Mapping[str, Any]]
) -> dict[str, float]:
    """Agent budget run on a document collection: did a relevant abstract reach the agent, how high."""
    first = next(
        (i for i, r in enumerate(results, 1) if doc_id_of(r["path"]) in query.relevant), None
    )
    return {"hit": 1.0 if first else 0.0, "rr": 1.0 / first if first else 0.0, **footprint(results)}


def mean(values: Iterable[float]) -> float:
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0


def summarize_conversation(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Evidence = share of all evidence turns that reached the agent (micro); hit/MRR per question."""
    total = sum(r["evidence_total"] for r in rows)
    return {
        "questions": float(len(rows)),
        "evidence": sum(r["evidence_reached"] for r in rows) / total if total else 0.0,
        "hit": mean(r["hit"] for r in rows),
        "mrr": mean(r["rr"] for r in rows),
        "results": mean(r["n_results"] for r in rows),
        "span_lines": mean(r["span_lines"] for r in rows),
        "chars": mean(r["chars"] for r in rows),
    }


def summarize_mean(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, float]:
    return {"queries": float(len(rows)), **{k: mean(r[k] for r in rows) for k in keys}}
