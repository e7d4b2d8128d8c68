"""The per-query fusions: each list rescaled within the query's candidates, best hit near 1."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from ..text import query_terms
from ._candidates import Candidate, RankParams, _matched_terms, with_score

RRF_K = 60


def _fuse_ranks(candidates: Sequence[Candidate], params: RankParams) -> list[Candidate]:
    """`weighted` (`w·cos + w·1/(1+rank)`) and `rrf` (weighted reciprocal-rank fusion)."""
    vw, tw = params.vector_weight, params.text_weight
    total = vw + tw
    vw, tw = vw / total, tw / total
    have_vectors = any(c.vector_score is not None for c in candidates)
    out = []
    for c in candidates:
        t = 1.0 / (1.0 + c.text_rank) if c.text_rank is not None else 0.0
        if not have_vectors:
            score = t
        elif params.fusion == "weighted":
            score = vw * max(0.0, c.vector_score or 0.0) + tw * t
        else:  # rrf, scaled so a chunk ranked first by both lists scores 1.0
            rrf = 0.0
            if c.vector_rank is not None:
                rrf += vw / (RRF_K + 1 + c.vector_rank)
            if c.text_rank is not None:
                rrf += tw / (RRF_K + 1 + c.text_rank)
            score = rrf * (RRF_K + 1)
        out.append(with_score(c, score))
    return out


def _scaled(
    vectors: Sequence[float | None], texts: Sequence[float | None], how: str = "minmax"
) -> tuple[list[float | None], list[float | None]]:
    """Each list rescaled per query to 0..1 (None where it lacks the chunk), as raw cosines and
    BM25 are not comparable."""
    if how == "zscore":
        return _zscored(vectors), _zscored(texts)
    vs = [v for v in vectors if v is not None]
    vlo, vhi = (min(vs), max(vs)) if vs else (0.0, 1.0)
    vspan = (vhi - vlo) or 1.0
    tbest = max((t for t in texts if t is not None), default=1.0)
    # BM25 is scaled by the best hit only: a list's weakest keyword hit still matched a term
    return (
        [None if v is None else (v - vlo) / vspan if len(vs) > 1 else 1.0 for v in vectors],
        [None if t is None else (t / tbest if tbest > 0 else 0.0) for t in texts],
    )


def _zscored(values: Sequence[float | None]) -> list[float | None]:
    """±3 standard deviations of the present values span the unit range."""
    xs = [x for x in values if x is not None]
    if not xs:
        return [None] * len(values)
    mu = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mu) ** 2 for x in xs) / len(xs)) or 1.0
    return [None if x is None else min(1.0, max(0.0, 0.5 + (x - mu) / (6 * sd))) for x in values]


def _fuse_normalized(
    candidates: Sequence[Candidate], params: RankParams, how: str
) -> list[Candidate]:
    total = params.vector_weight + params.text_weight
    vw, tw = params.vector_weight / total, params.text_weight / total
    vnorm, tnorm = _scaled(
        [c.vector_score for c in candidates], [c.text_score for c in candidates], how
    )
    have_vectors = any(v is not None for v in vnorm)
    have_text = any(t is not None for t in tnorm)
    out = []
    for c, v, t in zip(candidates, vnorm, tnorm, strict=True):
        if have_vectors and have_text:
            score = vw * (v or 0.0) + tw * (t or 0.0)
        else:
            score = (v if have_vectors else t) or 0.0
        out.append(with_score(c, score))
    return out


# Tuned on bench/eval's judged sets (docs/retrieval-quality.md).
AUTO_TEXT_WEIGHT = 0.7  # share of the keyword side for ordinary questions
AUTO_EXACT_TEXT_WEIGHT = 0.85  # share when the query carries exact tokens (IDs, numbers, code)

_EXACT_TOKEN = re.compile(
    r"""(?x)
    "[^"]+"                              # a quoted phrase
    | `[^`]+`                            # inline code
    | \b\w*\d\w*\b                        # anything with a digit: IDs, versions, dates, codes
    | \b\w+[_./:\\-]\w[\w./:\\-]*           # paths, dotted names, snake_case, key:value
    | \b[a-z]+[A-Z]\w*                    # camelCase
    | \b[A-Z]{2,}\b                        # ACRONYMS, ERROR_CODES
    """
)


def exact_token_share(query: str) -> float:
    """Share of the query's content terms that look like exact tokens rather than prose."""
    terms = query_terms(query)
    if not terms:
        return 0.0
    exact = {t.lower().strip('"`') for m in _EXACT_TOKEN.finditer(query) for t in [m.group(0)]}
    exact_terms = {t for e in exact for t in query_terms(e)}
    return min(1.0, len(exact_terms & set(terms)) / len(terms))


def auto_text_weight(query: str) -> float:
    """The keyword side's share in `relative`: lexical for exact tokens, balanced for prose."""
    share = exact_token_share(query)
    return AUTO_TEXT_WEIGHT + (AUTO_EXACT_TEXT_WEIGHT - AUTO_TEXT_WEIGHT) * min(1.0, 2 * share)


def _fuse_relative(
    candidates: Sequence[Candidate], query: str, params: RankParams
) -> list[Candidate]:
    """`auto`'s order without its calibration; weights come from the query, not the config."""
    terms = query_terms(query)
    matched = [_matched_terms(c, terms) for c in candidates]
    scores = _relative_scores(
        candidates,
        query,
        [c.vector_score for c in candidates],
        [len(m) / len(terms) if terms else 0.0 for m in matched],
        [None] * len(candidates),
    )
    return [with_score(c, s) for c, s in zip(candidates, scores, strict=True)]


def _relative_scores(
    candidates: Sequence[Candidate],
    query: str,
    vectors: Sequence[float | None],
    coverage: Sequence[float],
    apart: Sequence[float | None],
) -> list[float]:
    """Each candidate against the query's best on both lists: min-max vectors, BM25 over the best
    times term coverage; `apart` (vector evidence of a chunk sharing no words) lets such a chunk's
    vector side take the keyword share too, in proportion."""
    tw = auto_text_weight(query)
    vw = 1.0 - tw
    vnorm, tnorm = _scaled(vectors, [c.text_score for c in candidates])
    have_vectors = any(v is not None for v in vectors)
    have_text = any(t is not None for t in tnorm)
    out = []
    for v, t, cov, strength in zip(vnorm, tnorm, coverage, apart, strict=True):
        vn = v or 0.0
        lexical = 0.0 if t is None else t * (0.5 + 0.5 * cov)
        if have_vectors and have_text:
            out.append(vw * vn + tw * lexical if strength is None else vn * (vw + tw * strength))
        elif have_vectors:
            out.append(vn)
        else:
            out.append(lexical)
    return out
