"""Pure mapping from qmd hits to memoryd results: qmd URIs, interleaving."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.results import SearchResult


def split_qmd_uri(uri: str) -> tuple[str, str] | None:
    """`qmd://<collection>/<rel>` → (collection, rel); None for anything else."""
    collection, sep, rel = uri.removeprefix("qmd://").partition("/")
    if not uri.startswith("qmd://") or not collection or not sep or not rel:
        return None
    return collection, rel


def interleave(*lists: Sequence[Sequence[SearchResult]]) -> list[SearchResult]:
    """Round-robin over per-source lists of hits (each best-first), so no source starves another."""
    ordered = sorted((lst for lst in lists if lst), key=lambda lst: -lst[0][0].score)
    out: list[SearchResult] = []
    for i in range(max((len(lst) for lst in ordered), default=0)):
        for lst in ordered:
            if i < len(lst):
                out.extend(lst[i])
    return out
