"""Pure mapping from qmd hits to memoryd results: paths, limits, interleaving."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath

from ..core.results import SearchResult

QMD_PATH_PREFIX = "qmd/"


def split_qmd_uri(uri: str) -> tuple[str, str] | None:
    """`qmd://<collection>/<rel>` → (collection, rel); None for anything else."""
    return _split_after("qmd://", uri)


def split_qmd_path(path: str) -> tuple[str, str] | None:
    """memoryd's `qmd/<collection>/<rel>` display path → (collection, rel); None otherwise."""
    return _split_after(QMD_PATH_PREFIX, path)


def _split_after(prefix: str, text: str) -> tuple[str, str] | None:
    collection, sep, rel = text.removeprefix(prefix).partition("/")
    if not text.startswith(prefix) or not collection or not sep or not rel:
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
    return f"{QMD_PATH_PREFIX}{collection}/{rel}"


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
