"""Pure ranking over plain data (candidates, index statistics, path matches): the `rank`
pipeline and its fusions: the default `auto`, whose scores are calibrated against unrelated text
so that one minScore means the same in every query, and the per-query ones, which rescale each
list within the query's candidates."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any, Literal

from ..annotations import chunk_multiplier
from ..layout import note_date
from ..text import (
    Script,
    estimate_tokens,
    matched_terms,
    query_terms,
    script_of,
    text_terms,
    word_set,
)
from ._snippets import continue_snippet, extend_chunk, select_snippet, uncovered_window

# the snippet windows are imported from here by the searchers
__all__ = ["continue_snippet", "extend_chunk", "select_snippet", "uncovered_window"]

Fusion = Literal["auto", "relative", "weighted", "rrf", "minmax", "zscore"]


@dataclass(slots=True)
class Candidate:
    """One chunk seen by either retriever, with what each said about it."""

    chunk_id: int
    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    mtime: float | None = None
    vector_score: float | None = None  # cosine similarity
    vector_rank: int | None = None  # 0-based rank in the vector list
    text_rank: int | None = None  # 0-based rank in the keyword list
    text_score: float | None = None  # positive BM25 strength (higher = better)
    path_level: int = 0  # 3 exact path, 2 basename, 1 stem
    score: float = 0.0
    words: frozenset[str] = field(default_factory=frozenset)
    #: (query terms, those the chunk holds) when the caller worked them out already
    matched: tuple[tuple[str, ...], frozenset[str]] | None = None


def with_score(c: Candidate, score: float) -> Candidate:
    """A copy of `c` with `score`, built directly since `dataclasses.replace` is slow per call."""
    return Candidate(
        c.chunk_id,
        c.path,
        c.source,
        c.start_line,
        c.end_line,
        c.text,
        c.mtime,
        c.vector_score,
        c.vector_rank,
        c.text_rank,
        c.text_score,
        c.path_level,
        score,
        c.words,
        c.matched,
    )


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """Index-wide statistics so a score means the same in every query: chunk and per-term
    counts, the (mean, sd) cosine of `REFERENCE_QUERIES` per script pair, and the query's own
    (chunk id, script, cosine) over a sample of chunks."""

    chunks: int = 0
    term_chunks: Mapping[str, int] = field(default_factory=dict)
    reference: Mapping[tuple[Script, Script], tuple[float, float]] = field(default_factory=dict)
    background: Sequence[tuple[int, Script, float]] = ()


@dataclass(frozen=True, slots=True)
class RankParams:
    max_results: int = 6
    min_score: float = 0.35
    vector_weight: float = 0.7
    text_weight: float = 0.3
    fusion: Fusion = "auto"
    mmr_enabled: bool = False
    mmr_lambda: float = 0.7
    decay_enabled: bool = False
    half_life_days: float = 30.0
    #: Candidates MMR and minScore see, from the config so maxResults=k is a prefix of any
    #: larger maxResults; None: 4 × max_results.
    pool_size: int | None = None


#: A query token that can name a file (`path_match_level` level 2 compares file names to these).
PATH_TOKEN = re.compile(r"[\w.\-]+")


def path_match_level(query: str, path: str) -> int:
    """3 = the query names the path, 2 = the file name, 1 = the whole query is the stem, 0 = none."""
    q, spaced, tokens, bare = _query_path_forms(query)
    p = path.lower()
    if not q:
        return 0
    if q == p or q.endswith("/" + p) or f" {p}" in spaced:
        return 3
    name, stem, _ = _name_and_stem(p)
    if name in tokens:
        return 2
    if len(stem) >= 3 and bare == stem:
        return 1
    return 0


@lru_cache(maxsize=256)
def _query_path_forms(query: str) -> tuple[str, str, frozenset[str], str]:
    """The query lowered, spaced, as path tokens and bare of quotes, once per query."""
    q = query.strip().lower()
    return q, f" {q} ".replace("`", " "), frozenset(PATH_TOKEN.findall(q)), q.strip("`'\" ")


_NAME_WORD = re.compile(r"[^\W\d_]{3,}")


@lru_cache(maxsize=8192)
def _name_and_stem(path: str) -> tuple[str, str, frozenset[str]]:
    """A path's file name, its stem, and the stem's words of three or more letters, lowered."""
    pp = PurePosixPath(path)
    return pp.name, pp.stem, frozenset(w.lower() for w in _NAME_WORD.findall(pp.stem))


def _matched_terms(c: Candidate, terms: Sequence[str]) -> set[str]:
    if not terms:
        return set()
    if c.matched is not None and c.matched[0] == tuple(terms):
        return set(c.matched[1])
    if not c.words:  # a vector-side candidate: its word set would serve only this
        return text_terms(terms, c.text)
    return matched_terms(terms, c.text, c.words)


@lru_cache(maxsize=4096)
def _named(terms: tuple[str, ...], path: str) -> frozenset[str]:
    """Query terms the file name holds (`legacy` in `memory/legacy.md`): evidence for all its chunks."""
    words = _name_and_stem(path)[2]
    return frozenset(matched_terms(terms, " ".join(words), words)) if words else frozenset()


def decay_multiplier(age_days: float, half_life_days: float) -> float:
    """`e^(−ln2/H · age)`: 0.5 at one half-life, 1.0 for age ≤ 0."""
    if age_days <= 0:
        return 1.0
    return math.exp(-math.log(2) / half_life_days * age_days)


def age_in_days(path: str, source: str, mtime: float | None, now: datetime) -> float | None:
    """Age used for decay: from the file name's date for notes, from mtime for sessions; None = evergreen."""
    if source == "sessions":
        return None if mtime is None else max(0.0, (now.timestamp() - mtime) / 86400.0)
    day = note_date(path)
    return None if day is None else max(0.0, (now.date() - day).days)


# Trivia per script: their cosines with the index's chunks are what "unrelated" scores here.
REFERENCE_QUERIES: Mapping[Script, tuple[str, ...]] = {
    "latin": (
        "What is the boiling point of water at high altitude?",
        "How many players are on a cricket team?",
        "Who painted the ceiling of the Sistine Chapel?",
        "What is the tallest mountain in Africa?",
        "How do bees make honey?",
        "Which planet has the most moons?",
        "What is the plot of Moby Dick?",
        "Why do leaves change colour in autumn?",
    ),
    "zh": (
        "珠穆朗玛峰有多高？",
        "熊猫主要吃什么？",
        "长城是哪个朝代修建的？",
        "如何做红烧肉？",
        "地球到月亮有多远？",
        "唐诗三百首的作者有哪些？",
        "为什么天空是蓝色的？",
        "围棋的规则是什么？",
    ),
    "ja": (
        "富士山の高さはどのくらいですか？",
        "寿司の作り方を教えてください",
        "江戸時代はいつ始まりましたか？",
        "日本で一番長い川はどれですか？",
        "桜はいつ咲きますか？",
        "将棋のルールは何ですか？",
        "なぜ空は青いのですか？",
        "カブトムシは何を食べますか？",
    ),
    "ko": (
        "한라산의 높이는 얼마입니까?",
        "김치는 어떻게 만드나요?",
        "조선 왕조는 언제 시작되었나요?",
        "한국에서 가장 긴 강은 무엇입니까?",
        "벚꽃은 언제 피나요?",
        "바둑의 규칙은 무엇인가요?",
        "하늘은 왜 파란가요?",
        "고래는 무엇을 먹나요?",
    ),
}

# Tuned on bench/eval's judged and off-topic sets; evidence counts linearly from floor to full.
LEX_FLOOR = 0.17  # IDF-weighted share of the query's terms a chunk holds: below, no evidence
LEX_FULL = 1.0
VEC_FLOOR = 1.5  # cosine in reference deviations above unrelated text: below, no evidence
VEC_FULL = 5.0
# The floor for a chunk in the query's own script, where keywords can vouch too.
VEC_FLOOR_SAME_SCRIPT = 1.5
# The best of N unrelated chunks lies ~sqrt(2 ln N) deviations out (`vector_floor`).
VEC_FLOOR_GROWTH = 0.68
SHORT_CHUNK_TOKENS = 160
LONG_CHUNK_TOKENS = 400
RANK_SHAPE = 0.25  # exponent on a result's closeness to the query's best hit (see below)
APART_OFFSET = 0.5  # share of the query's median z over memory taken off a cross-script chunk's


def idf(chunks: int, holding: int) -> float:
    """BM25's inverse document frequency, kept positive: a term in every chunk weighs ~0."""
    return math.log(1.0 + (chunks - holding + 0.5) / (holding + 0.5))


def term_weights(
    terms: Sequence[str], stats: CorpusStats | None, pool: Sequence[Candidate]
) -> dict[str, float]:
    """Each query term's IDF in the index; without index statistics, within the candidates."""
    if stats is not None and stats.chunks > 0:
        return {t: idf(stats.chunks, stats.term_chunks.get(t, 0)) for t in terms}
    matched = [_matched_terms(c, terms) for c in pool]
    return {t: idf(len(pool), sum(1 for m in matched if t in m)) for t in terms}


def lexical_evidence(matched: set[str], weights: Mapping[str, float]) -> float:
    """The IDF-weighted share (0..1) of the query's terms a chunk holds; a term absent from the
    index weighs most, so a question about someone unmentioned cannot look answered."""
    total = sum(weights.values())
    if total <= 0:
        return 0.0
    return sum(w for t, w in weights.items() if t in matched) / total


def vector_z(
    c: Candidate,
    query_script: Script,
    stats: CorpusStats | None,
    chunk_script: Script | None = None,
) -> float | None:
    """The cosine in deviations above unrelated queries' of the same (query, chunk) scripts,
    since a model scores any note in the query's own script higher."""
    if c.vector_score is None or stats is None:
        return None
    ref = stats.reference.get((query_script, chunk_script or script_of(c.text)))
    if ref is None and stats.background:
        values = [cos for _, _, cos in stats.background]
        mu = sum(values) / len(values)
        ref = (mu, math.sqrt(sum((x - mu) ** 2 for x in values) / len(values)))
    if ref is None:
        return None
    mu, sd = ref
    return (c.vector_score - mu) / max(sd, 1e-3)


def query_offset(query_script: Script, stats: CorpusStats | None) -> float:
    """The query's median z over memory at large: high for a query close to everything (`xyzzy`)."""
    if stats is None:
        return 0.0
    zs = []
    for _, script, cos in stats.background:
        ref = stats.reference.get((query_script, script))
        if ref is not None:
            zs.append((cos - ref[0]) / max(ref[1], 1e-3))
    if not zs:
        return 0.0
    zs.sort()
    mid = len(zs) // 2
    return zs[mid] if len(zs) % 2 else (zs[mid - 1] + zs[mid]) / 2


def vector_floor(same_script: bool, chunks: int, chunk_tokens: int) -> float:
    """The deviations a chunk's cosine needs to count as evidence: short chunks need
    VEC_FLOOR_GROWTH · sqrt(2 ln chunks), long ones VEC_FLOOR_SAME_SCRIPT, linear between."""
    if not same_script:
        return VEC_FLOOR
    floor = VEC_FLOOR_SAME_SCRIPT
    if chunks < 2:
        return floor
    grown = max(floor, VEC_FLOOR_GROWTH * math.sqrt(2.0 * math.log(chunks)))
    short = _ramp(LONG_CHUNK_TOKENS - chunk_tokens, 0, LONG_CHUNK_TOKENS - SHORT_CHUNK_TOKENS)
    return floor + short * (grown - floor)


def _ramp(x: float, lo: float, hi: float) -> float:
    return min(1.0, max(0.0, (x - lo) / (hi - lo)))


def _calibrated_parts(
    candidates: Sequence[Candidate],
    query: str,
    stats: CorpusStats | None,
    trace: dict[int, dict[str, Any]] | None = None,
) -> tuple[list[float], list[float]]:
    """Each candidate's evidence (0..1) and relative fusion score; `trace` gets their parts."""
    terms = query_terms(query)
    qscript = script_of(query)
    use_keywords = stats is not None and bool(stats.term_chunks)
    use_keywords = use_keywords or any(c.text_rank is not None for c in candidates)
    matched = [_matched_terms(c, terms) for c in candidates]
    weights = term_weights(terms, stats, candidates)
    scripts = [script_of(c.text) for c in candidates]
    zs = [vector_z(c, qscript, stats, s) for c, s in zip(candidates, scripts, strict=True)]
    offset: float | None = None
    evidence = []
    vec_evidence = []
    key = tuple(terms)
    for c, m, z, script in zip(candidates, matched, zs, scripts, strict=True):
        named = _named(key, c.path) if terms else frozenset()
        share = lexical_evidence(m | named, weights) if use_keywords else 0.0
        lex = _ramp(share, LEX_FLOOR, LEX_FULL)
        if z is not None and not m and script != qscript:
            # no keyword can vouch for another script: it must also stand out from the query's offset
            if offset is None:
                offset = max(0.0, query_offset(qscript, stats))
            z -= APART_OFFSET * offset
        vec, floor = 0.0, None
        if z is not None:  # keyword-only: no cosine, so no floor to work out
            chunks = stats.chunks if stats is not None else 0
            floor = vector_floor(script == qscript, chunks, estimate_tokens(c.text))
            vec = _ramp(z, floor, VEC_FULL)
        evidence.append(1.0 - (1.0 - lex) * (1.0 - vec))
        vec_evidence.append(vec)
        if trace is not None:  # `--explain`'s keyword and vector parts of the evidence
            d = _sides(c, m)
            d["keyword"].update(
                fileNameTerms=sorted(named - m),
                termWeights={t: round(w, 4) for t, w in weights.items()},
                share=share,
                evidence=lex,
            )
            if d["vector"] is not None:
                ref = stats.reference.get((qscript, script)) if stats is not None else None
                background = {"mean": ref[0], "sd": ref[1]} if ref is not None else None
                d["vector"].update(z=z, background=background, floor=floor, evidence=vec)
            trace[c.chunk_id] = d
    # calibrated z orders the vector side across scripts; raw cosines where there is none
    vectors = [z if z is not None else c.vector_score for c, z in zip(candidates, zs, strict=True)]
    relative = _relative_scores(
        candidates,
        query,
        vectors,
        [len(m) / len(terms) if terms else 0.0 for m in matched],
        [
            None if m or script == qscript else vec
            for m, script, vec in zip(matched, scripts, vec_evidence, strict=True)
        ],
    )
    return evidence, relative


def _sides(c: Candidate, matched: set[str]) -> dict[str, Any]:
    """What each list said of a candidate, as `--explain` shows it, then the later steps' parts
    in the order they apply (None where a step does not)."""
    keyword = {"bm25": c.text_score, "rank": c.text_rank, "matchedTerms": sorted(matched)}
    vector = None if c.vector_score is None else {"cosine": c.vector_score, "rank": c.vector_rank}
    return {"keyword": keyword, "vector": vector, **dict.fromkeys(_LATER_PARTS)}


_LATER_PARTS = ("fused", "calibration", "decay", "importance", "path", "mmr", "rerank", "minScore")


def _calibrated(
    candidates: Sequence[Candidate],
    query: str,
    stats: CorpusStats | None,
    *,
    partial_vectors: bool,
    trace: dict[int, dict[str, Any]] | None = None,
) -> list[Candidate]:
    """`auto`: `confidence × closeness^RANK_SHAPE`, where confidence is the best chunk's evidence
    `1 − (1 − lexical)(1 − vector)` and closeness its share of the best relative fusion score, so
    an off-topic query scores low throughout and minScore abstains. `partial_vectors`: a chunk
    only the vector side found scores at most its own evidence, as the best of the few chunks
    embedded so far may be unrelated."""
    if not candidates:
        return []
    evidence, relative = _calibrated_parts(candidates, query, stats, trace)
    confidence, best = max(evidence), max(relative)
    out = []
    for c, ev, r in zip(candidates, evidence, relative, strict=True):
        closeness = r / best if best > 0 else 1.0
        score = confidence * closeness**RANK_SHAPE
        found_by_vector_only = (
            partial_vectors
            and c.vector_score is not None
            and c.text_rank is None
            and path_match_level(query, c.path) == 0
        )
        out.append(with_score(c, min(score, ev) if found_by_vector_only else score))
        if trace is not None:
            d = trace[c.chunk_id]
            d["fused"] = {"fusion": "auto", "relative": r, "best": best, "closeness": closeness}
            d["calibration"] = {
                "evidence": ev,
                "confidence": confidence,
                "rankShape": RANK_SHAPE,
                "cappedAtEvidence": found_by_vector_only,
                "score": out[-1].score,
                "background": _background(stats),
            }
    return out


def _background(stats: CorpusStats | None) -> dict[str, Any] | None:
    """What the calibration compared cosines with: the index's reference per script pair."""
    if stats is None:
        return None
    return {
        "chunks": stats.chunks,
        "reference": {
            f"{q}->{c}": {"mean": round(mu, 6), "sd": round(sd, 6)}
            for (q, c), (mu, sd) in stats.reference.items()
        },
        "sampled": len(stats.background),
    }


RRF_K = 60


def _fuse_ranks(candidates: Sequence[Candidate], params: RankParams) -> list[Candidate]:
    """`weighted` (`w·cos + w·1/(1+rank)`) and `rrf` (weighted reciprocal-rank fusion)."""
    total = params.vector_weight + params.text_weight
    vw, tw = params.vector_weight / total, params.text_weight / total
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


def fuse(
    candidates: Sequence[Candidate],
    query: str,
    params: RankParams,
    stats: CorpusStats | None = None,
    trace: dict[int, dict[str, Any]] | None = None,
    partial_vectors: bool = False,
) -> list[Candidate]:
    """A 0..1 `score` per candidate: `auto` calibrated, the others rescaled per query."""
    if params.fusion == "auto":
        return _calibrated(candidates, query, stats, partial_vectors=partial_vectors, trace=trace)
    if params.fusion == "relative":
        out = _fuse_relative(candidates, query, params)
    elif params.fusion in ("minmax", "zscore"):
        out = _fuse_normalized(candidates, params, params.fusion)
    else:
        out = _fuse_ranks(candidates, params)
    if trace is not None:
        terms = query_terms(query)
        for c in out:
            d = trace[c.chunk_id] = _sides(c, _matched_terms(c, terms))
            d["fused"] = {"fusion": params.fusion, "score": c.score}
    return out


def mmr(candidates: Sequence[Candidate], k: int, lam: float) -> list[Candidate]:
    """Maximal marginal relevance: pick λ·score − (1−λ)·max Jaccard to already-picked chunks."""
    pool = list(candidates)
    for c in pool:
        if not c.words:
            c.words = word_set(c.text)
    chosen: list[Candidate] = []
    while pool and len(chosen) < k:
        best_i, best_val = 0, -math.inf
        for i, c in enumerate(pool):
            sim = max(
                (len(c.words & s.words) / max(1, len(c.words | s.words)) for s in chosen),
                default=0.0,
            )
            val = lam * c.score - (1 - lam) * sim
            if val > best_val:
                best_i, best_val = i, val
        chosen.append(pool.pop(best_i))
    return chosen


def apply_importance(
    candidates: Sequence[Candidate],
    query: str,
    min_score: float,
    trace: dict[int, dict[str, Any]] | None = None,
) -> None:
    """Multiply curated-root candidates' scores by their importance in place; a boost never lifts
    a score over `min_score`, so an abstaining query stays empty."""
    terms = query_terms(query)
    for c in candidates:
        m = chunk_multiplier(c.path, c.text, terms) if c.source == "memory" else 1.0
        if m == 1.0:
            continue
        if c.score < min_score and m > 1.0:
            m = 1.0  # a boost never lifts a score over minScore
        c.score *= m
        if trace is not None:
            trace[c.chunk_id]["importance"] = {"multiplier": m}


def rank(
    candidates: Iterable[Candidate],
    query: str,
    params: RankParams,
    *,
    now: datetime | None = None,
    stats: CorpusStats | None = None,
    partial_vectors: bool = False,
    trace: dict[int, dict[str, Any]] | None = None,
) -> list[Candidate]:
    """Fuse → decay → importance → path boost → sort → MMR → minScore → top-K; `trace` (for
    `--explain`) gets how each chunk id's score was computed."""
    now = now or datetime.now(UTC)
    fused = fuse(list(candidates), query, params, stats, trace, partial_vectors)
    if params.decay_enabled:
        for c in fused:
            age = age_in_days(c.path, c.source, c.mtime, now)
            if age is not None:
                m = decay_multiplier(age, params.half_life_days)
                c.score *= m
                if trace is not None:
                    trace[c.chunk_id]["decay"] = {"ageDays": age, "multiplier": m}
    apply_importance(fused, query, params.min_score, trace)
    for c in fused:
        c.path_level = path_match_level(query, c.path)
    fused.sort(key=lambda c: (c.path_level > 0, c.path_level, c.score), reverse=True)

    pool_size = params.pool_size or max(params.max_results * 4, params.max_results)
    pool = fused[:pool_size]
    if params.mmr_enabled and len(pool) > 1:
        boosted = [c for c in pool if c.path_level > 0]
        rest = [c for c in pool if c.path_level == 0]
        ordered = boosted + mmr(rest, len(rest), params.mmr_lambda)
    else:
        ordered = pool
    if trace is not None:
        before = {c.chunk_id: i for i, c in enumerate(pool)}
        for i, c in enumerate(ordered):
            d = trace[c.chunk_id]
            d["path"] = {"level": c.path_level, "match": _PATH_LEVELS[c.path_level]}
            d["mmr"] = (
                {"lambda": params.mmr_lambda, "before": before[c.chunk_id] + 1, "after": i + 1}
                if params.mmr_enabled
                else None
            )
            d["score"] = c.score

    picked = [c for c in ordered if c.score >= params.min_score or c.path_level > 0]
    # per-query fusions put every best hit near 1: keyword hits fill empty slots (auto abstains)
    if params.fusion != "auto" and len(picked) < params.max_results:
        chosen = {c.chunk_id for c in picked}
        picked += [c for c in ordered if c.chunk_id not in chosen and c.text_rank is not None]
    return picked[: params.max_results]


_PATH_LEVELS = {0: None, 1: "stem", 2: "file name", 3: "path"}
