"""The rerank stage on qmd (its own reranker or the remote one) over hits that passed minScore;
it only reorders, as qmd's reranked scores stay high for an off-topic query."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from ..core.layout import MemoryRoot, display_path
from ..core.results import SearchResult
from ..rerank import RerankStage, Scorer
from ._parse import parse_search_output, split_qmd_uri
from ._runner import QmdOutput

#: `run(argv, timeout_ms)`: one qmd call (`QmdManager._run`).
Run = Callable[[Sequence[str], int], QmdOutput]


def qmd_scorer(
    run: Run, argv: list[str], paths: Sequence[str], roots: list[MemoryRoot], workspace: Path
) -> Scorer:
    """A scorer giving each path qmd's reranked score for its file (-1 when no longer listed)."""
    by_name = {root.name: root for root in roots}

    def score(query: str, documents: Sequence[str], deadline: float) -> list[float]:
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        by_path: dict[str, float] = {}
        for hit in parse_search_output(run(argv, left_ms).stdout):
            collection, rel = split_qmd_uri(hit.file or "") or ("", "")
            if collection in by_name:
                path = display_path(
                    by_name[collection], PurePosixPath(rel), workspace=str(workspace)
                )
                by_path.setdefault(path, hit.score)
        return [by_path.get(p, -1.0) for p in paths]

    return score


def reranked(
    stage: RerankStage,
    query: str,
    results: list[SearchResult],
    notes: list[str],
    scorer: Scorer | None,
    explain: dict[str, Any] | None,
) -> list[SearchResult]:
    """The first `candidates` results in the stage's order, the rest after; `explain` says how."""
    head = results[: stage.candidates]
    outcome = stage.apply(query, [r.snippet for r in head], scorer)
    if outcome.note:
        notes.append(outcome.note)
    order = outcome.order + list(range(len(head), len(results)))
    out = [results[i] for i in order]
    if explain is None:
        return out
    scores = outcome.scores + [None] * (len(results) - len(head))
    return [
        r.with_(
            explain=explained(
                r, explain, outcome.explain(stage.provider, scores[i], i + 1, after + 1)
            )
        )
        for after, i in enumerate(order)
        for r in [results[i]]
    ]


def explained(
    r: SearchResult, qmd: dict[str, Any], rerank: dict[str, Any] | None
) -> dict[str, Any]:
    """A qmd result's `explain` object: the query document qmd was sent, its own score."""
    return {
        "engine": "qmd",
        "qmd": {**qmd, "score": r.score},
        "rerank": rerank,
        "minScore": qmd.get("minScore"),
        "score": r.score,
    }
