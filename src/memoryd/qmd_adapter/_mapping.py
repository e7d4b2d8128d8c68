"""Pure mapping from qmd hits to memoryd results: paths, limits, interleaving."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath

from ..core.results import SearchResult


def split_qmd_uri(uri: str) -> tuple[str, str] | None:
    """`qmd://<collection>/<rel>` → (collection, rel); None for anything else."""
    collection, sep, rel = uri.removeprefix("qmd://").partition("/")
    if not uri.startswith("qmd://") or not collection or not sep or not rel:
        return None
    return collection, rel


def display_path(collection: str, rel: str, *, roots: Mapping[str, str], workspace: str) -> str:
    """Workspace-relative when the file lies inside the workspace, else `qmd/<collection>/<rel>`."""
    root = roots.get(collection)
    if root is not None:
        absolute = os.path.normpath(os.path.join(root, rel))
        ws = os.path.normpath(workspace)
        if absolute.startswith(ws + os.sep):
            return PurePosixPath(*PurePosixPath(os.path.relpath(absolute, ws)).parts).as_posix()
    return f"qmd/{collection}/{rel}"


def interleave(*lists: Sequence[Sequence[SearchResult]]) -> list[SearchResult]:
    """Round-robin over per-source lists of hits (each best-first), so no source starves another."""
    ordered = sorted((lst for lst in lists if lst), key=lambda lst: -lst[0][0].score)
    out: list[SearchResult] = []
    for i in range(max((len(lst) for lst in ordered), default=0)):
        for lst in ordered:
            if i < len(lst):
                out.extend(lst[i])
    return out


def apply_limits(
    results: Iterable[SearchResult], *, max_results: int, min_score: float
) -> list[SearchResult]:
    """Drop hits under `min_score` and keep the first `max_results` (the budget is the orchestrator's)."""
    return [r for r in results if r.score >= min_score][:max_results]
