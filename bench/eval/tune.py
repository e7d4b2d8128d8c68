"""Fusion tuning without re-searching: capture each query's candidates once, re-rank offline.

`capture` runs every query once through `MemoryIndex.search` (hybrid, so both candidate lists
are fetched exactly as the real path fetches them) and records the candidates handed to
`rank()`. `evaluate` then replays `rank()` → `select_snippet()` → `trim_to_budget()` — the
same functions the index calls — for any fusion/parameters, in milliseconds per query.
Keyword-only and vector-only replays drop the other list's fields, which is what those modes
fetch. Figures for the README come from `python -m bench.eval`, not from here.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import memoryd.builtin_index._search as index_mod
from memoryd.core.citations import trim_to_budget
from memoryd.core.ranking import Candidate, CorpusStats, RankParams, rank, select_snippet
from memoryd.core.results import MAX_SNIPPET_CHARS, SearchResult

from . import metrics as M
from .builtin import NOW, chunk_suffix, open_index, search
from .datasets import Dataset, Query, Workspace


@dataclasses.dataclass
class Captured:
    qid: str
    query: str
    candidates: list[Candidate]
    k: int
    stats: CorpusStats | None = None


def capture(
    ds: Dataset,
    out: Path,
    *,
    max_results: int,
    tokens: int | None = None,
    overlap: int | None = None,
    model: str | None = None,
) -> dict[str, list[Captured]]:
    """Per workspace, the candidates of every query (k = max_results × candidateMultiplier)."""
    return capture_pairs(
        [(ws.name, ws, ws.queries) for ws in ds.workspaces],
        out,
        max_results=max_results,
        tokens=tokens,
        overlap=overlap,
        model=model,
    )


def capture_pairs(
    pairs: list[tuple[str, Workspace, list[Query]]],
    out: Path,
    *,
    max_results: int,
    tokens: int | None = None,
    overlap: int | None = None,
    model: str | None = None,
) -> dict[str, list[Captured]]:
    """Candidates (and corpus statistics) of queries asked of any workspace, keyed by label."""
    got: dict[str, list[Captured]] = {}
    real_rank = index_mod.rank
    holder: list[tuple[list[Candidate], CorpusStats | None]] = []

    def recording(
        cands: Any,
        query: str,
        params: RankParams,
        *,
        now: Any = None,
        stats: CorpusStats | None = None,
    ) -> list[Candidate]:
        holder.append(([dataclasses.replace(c) for c in cands], stats))
        return real_rank(cands, query, params, now=now, stats=stats)

    suffix = chunk_suffix(tokens, overlap) + (f"-{model}" if model else "")
    index_mod.rank = recording  # type: ignore[assignment]
    try:
        for label, ws, queries in pairs:
            idx = open_index(
                ws.root,
                out / "index" / f"{ws.name}-{suffix}.sqlite",
                tokens=tokens,
                overlap=overlap,
                model=model,
            )
            rows = []
            for q in queries:
                holder.clear()
                search(
                    idx, q.text, mode=None, max_results=max_results, min_score=0.0, max_chars=10**9
                )
                cands, stats = holder[0]
                rows.append(
                    Captured(
                        q.qid,
                        q.text,
                        cands,
                        max_results * idx.cfg.query.hybrid.candidate_multiplier,
                        stats,
                    )
                )
            got.setdefault(label, []).extend(rows)
            idx.close()
            print(f"  captured {label}: {len(rows)} queries", file=sys.stderr, flush=True)
    finally:
        index_mod.rank = real_rank  # type: ignore[assignment]
    return got


def side(cands: list[Candidate], mode: str | None) -> list[Candidate]:
    out = []
    for c in cands:
        c = dataclasses.replace(c)
        if mode == "keyword":
            if c.text_rank is None and c.path_level == 0 and c.vector_rank is not None:
                continue
            c.vector_score = c.vector_rank = None
        elif mode == "vector":
            if c.vector_rank is None:
                continue
            c.text_rank = c.text_score = None
        out.append(c)
    return out


def side_stats(stats: CorpusStats | None, mode: str | None) -> CorpusStats | None:
    """What each mode's search computes: no background without vectors, no term counts without keywords."""
    if stats is None or mode is None:
        return stats
    if mode == "keyword":
        return dataclasses.replace(stats, background=())
    return dataclasses.replace(stats, term_chunks={})


def replay(
    cap: Captured,
    params: RankParams,
    mode: str | None,
    max_chars: int | None,
    rank_fn: Callable[..., list[Candidate]] = rank,
) -> list[dict[str, Any]]:
    ranked = rank_fn(
        side(cap.candidates, mode), cap.query, params, now=NOW, stats=side_stats(cap.stats, mode)
    )
    results = []
    for c in ranked:
        snippet, first, last = select_snippet(
            c.text, c.start_line, c.end_line, cap.query, MAX_SNIPPET_CHARS
        )
        results.append(SearchResult(c.path, first, last, c.score, snippet, source="memory"))
    results = trim_to_budget(results, max_chars)
    return [
        {
            "path": r.path,
            "startLine": r.start_line,
            "endLine": r.end_line,
            "snippet": r.snippet,
            "score": r.score,
        }
        for r in results
    ]


def evaluate(
    ds: Dataset,
    caps: dict[str, list[Captured]],
    params: RankParams,
    mode: str | None,
    *,
    ranking: bool = False,
) -> dict[str, float]:
    rows = []
    by_ws: dict[str, Workspace] = {w.name: w for w in ds.workspaces}
    for ws_name, items in caps.items():
        ws = by_ws[ws_name]
        queries = {q.qid: q for q in ws.queries}
        for cap in items:
            q = queries[cap.qid]
            if ds.kind == "conversation":
                row = M.conversation_metrics(q, replay(cap, params, mode, 4000), ws.turns)
                if row["evidence_total"]:
                    row["category"] = q.category
                    rows.append(row)
            elif ranking:
                p = dataclasses.replace(params, max_results=100, min_score=0.0)
                rows.append(M.collection_ranking_metrics(q, replay(cap, p, mode, None)))
            else:
                p = dataclasses.replace(params, max_results=6)
                rows.append(M.collection_agent_metrics(q, replay(cap, p, mode, 4000)))
    if ds.kind == "conversation":
        return M.summarize_conversation(rows)
    keys = (
        ["ndcg@10", "recall@10", "recall@100"] if ranking else ["hit", "rr", "chars", "n_results"]
    )
    return M.summarize_mean(rows, keys)


def save(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj))


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if name == "Captured":  # pickled from `python -m bench.eval.tune`, i.e. `__main__`
            return Captured
        return super().find_class(module, name)


def load(path: Path) -> Any:
    with path.open("rb") as fh:
        return _Unpickler(fh).load()


def _main(argv: list[str]) -> None:
    from .__main__ import load_datasets, parse_args

    args = parse_args(argv)
    for ds in load_datasets(args):
        mr = 6 if ds.kind == "conversation" else 100
        caps = capture(
            ds,
            args.out,
            max_results=mr,
            tokens=args.chunk_tokens,
            overlap=args.chunk_overlap,
            model=args.model,
        )
        suffix = chunk_suffix(args.chunk_tokens, args.chunk_overlap) + (
            f"-{args.model}" if args.model else ""
        )
        save(caps, args.out / "capture" / f"{ds.name}-{suffix}.pkl")


if __name__ == "__main__":
    _main(sys.argv[1:])
