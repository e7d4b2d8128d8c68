"""Pure ranking: hybrid fusion, temporal decay, path matches, MMR, minScore, snippet windows.

Everything here works on plain data (no SQLite, no clock: `now` is passed in) so each rule has
table-driven tests of its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Literal

from .text import (
    Script,
    estimate_tokens,
    matched_terms,
    query_terms,
    script_of,
    text_terms,
    word_set,
)

Fusion = Literal["auto", "relative", "weighted", "rrf", "minmax", "zscore"]

_DATED = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})(?:[-_.][^/]*)?\.md$")
EVERGREEN_NAMES = frozenset({"memory.md"})
RRF_K = 60


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
    #: (query terms, those the chunk holds) when worked out ahead: a search does it for its
    #: keyword hits while the query embeds (`MemoryIndex._search_synced`)
    matched: tuple[tuple[str, ...], frozenset[str]] | None = None


def with_score(c: Candidate, score: float) -> Candidate:
    """A copy of `c` with `score`: `dataclasses.replace(c, score=score)` in a third of the time
    (~1 us instead of ~3, for each of ~40 candidates a search; a test holds them equal)."""
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
    """What the index knows beyond one query's candidates, so that a score means the same thing
    in every query (see `calibrated_scores`).

    `chunks` / `term_chunks`: how many chunks the keyword index holds, and how many hold each
    query term. `reference`: for a (query script, chunk script) pair, the mean and standard
    deviation of the cosine between the fixed `REFERENCE_QUERIES` of that script and a sample
    of the index's chunks of that script — what this model scores for unrelated text here.
    `background`: the query's own cosine with each chunk of that sample, as (chunk id, script,
    cosine) — how close the query comes to this memory at large.
    """

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


# ----------------------------------------------------------------------------- temporal decay


def file_date(path: str) -> date | None:
    """The date in a daily-note file name (`memory/2026-01-15.md`, `…-slug.md`), else None."""
    match = _DATED.search(path)
    if not match:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None


def is_evergreen(path: str, source: str) -> bool:
    """MEMORY.md/memory.md and undated memory files never decay; only dated notes and sessions do."""
    if source == "sessions":
        return False
    name = PurePosixPath(path).name.lower()
    return name in EVERGREEN_NAMES or file_date(path) is None


def decay_multiplier(age_days: float, half_life_days: float) -> float:
    """`e^(−ln2/H · age)`: 0.5 at one half-life, 1.0 for age ≤ 0."""
    if age_days <= 0:
        return 1.0
    return math.exp(-math.log(2) / half_life_days * age_days)


def age_in_days(path: str, source: str, mtime: float | None, now: datetime) -> float | None:
    """Age used for decay: from the file name's date for notes, from mtime for sessions; None = evergreen."""
    if is_evergreen(path, source):
        return None
    if source == "sessions":
        if mtime is None:
            return None
        return max(0.0, (now.timestamp() - mtime) / 86400.0)
    day = file_date(path)
    assert day is not None
    return max(0.0, (now.date() - day).days)


# ----------------------------------------------------------------------------- path matches


#: A query token that can name a file (`path_match_level` level 2 compares file names to these).
PATH_TOKEN = re.compile(r"[\w.\-]+")


def path_match_level(query: str, path: str) -> int:
    """3 = the query names the path, 2 = the file name, 1 = the query is the file's stem; 0 = no match.

    A stem only counts when it is the whole query (`projects`, `2026-02-10`): a stem that merely
    appears among other words ("home network setup") is ordinary text, not a file reference.
    """
    q, spaced, tokens, bare = _query_path_forms(query)
    p = path.lower()
    if not q:
        return 0
    if q == p or q.endswith("/" + p) or f" {p}" in spaced:
        return 3
    name, stem = _name_and_stem(p)
    if name in tokens:
        return 2
    if len(stem) >= 3 and bare == stem:
        return 1
    return 0


@lru_cache(maxsize=256)
def _query_path_forms(query: str) -> tuple[str, str, frozenset[str], str]:
    """What `path_match_level` compares every candidate's path with, worked out once per query:
    the lowered query, it spaced (backticks as spaces), its path tokens, it bare of quotes."""
    q = query.strip().lower()
    return q, f" {q} ".replace("`", " "), frozenset(PATH_TOKEN.findall(q)), q.strip("`'\" ")


@lru_cache(maxsize=8192)
def _name_and_stem(path: str) -> tuple[str, str]:
    # every search asks this of each candidate's path; paths repeat from query to query
    pp = PurePosixPath(path)
    return pp.name, pp.stem


# ----------------------------------------------------------------------------- fusion


def fuse(
    candidates: Sequence[Candidate],
    query: str,
    params: RankParams,
    stats: CorpusStats | None = None,
) -> list[Candidate]:
    """Give every candidate a 0..1 `score` from its vector and keyword evidence.

    `auto` (the default) scores calibrated evidence that means the same in every query (see
    `calibrated_scores`); the others rescale per query, so their best hit is always near 1:
    `weighted` is the seed's `w·cos + w·1/(1+rank)`, `rrf` weighted reciprocal-rank fusion,
    `minmax` / `zscore` rescale each list before the weighted sum, and `relative` is the
    previous default (see `_fuse_relative`).
    """
    if params.fusion == "auto":
        return calibrated_scores(candidates, query, stats)
    if params.fusion == "relative":
        return _fuse_relative(candidates, query, params)
    if params.fusion in ("minmax", "zscore"):
        return _fuse_normalized(candidates, params, params.fusion)
    vw, tw = params.vector_weight, params.text_weight
    total = vw + tw
    vw, tw = vw / total, tw / total
    have_vectors = any(c.vector_score is not None for c in candidates)
    out = []
    for c in candidates:
        v = max(0.0, c.vector_score or 0.0)
        if params.fusion == "weighted":
            t = 1.0 / (1.0 + c.text_rank) if c.text_rank is not None else 0.0
            score = vw * v + tw * t if have_vectors else t
        else:  # rrf
            rrf = 0.0
            if c.vector_rank is not None:
                rrf += vw / (RRF_K + 1 + c.vector_rank)
            if c.text_rank is not None:
                rrf += tw / (RRF_K + 1 + c.text_rank)
            # scale so a chunk ranked first by both lists scores 1.0
            score = (
                rrf * (RRF_K + 1)
                if have_vectors
                else (1.0 / (1.0 + c.text_rank) if c.text_rank is not None else 0.0)
            )
        out.append(with_score(c, score))
    return out


def _minmax(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    return lo, (hi - lo) or 1.0


def normalized_sides(
    candidates: Sequence[Candidate], how: str = "minmax"
) -> tuple[list[float | None], list[float | None]]:
    """Each list rescaled per query to 0..1 (None where the list did not return the chunk).

    Cosine similarities of one embedding model crowd into a narrow band (e5: unrelated text
    ≈ 0.75–0.85) and BM25 strengths are unbounded, so neither is comparable to the other raw;
    rescaled within the query's own candidates, "best of this list" means 1 on both sides.
    """
    vs = [c.vector_score for c in candidates if c.vector_score is not None]
    ts = [c.text_score for c in candidates if c.text_score is not None]
    vnorm: list[float | None] = []
    tnorm: list[float | None] = []
    if how == "zscore":

        def z(values: list[float]) -> tuple[float, float]:
            mu = sum(values) / len(values)
            sd = math.sqrt(sum((x - mu) ** 2 for x in values) / len(values)) or 1.0
            return mu, sd

        vmu, vsd = z(vs) if vs else (0.0, 1.0)
        tmu, tsd = z(ts) if ts else (0.0, 1.0)
        for c in candidates:
            # ±3 standard deviations span the unit range
            vnorm.append(
                None
                if c.vector_score is None
                else min(1.0, max(0.0, 0.5 + (c.vector_score - vmu) / (6 * vsd)))
            )
            tnorm.append(
                None
                if c.text_score is None
                else min(1.0, max(0.0, 0.5 + (c.text_score - tmu) / (6 * tsd)))
            )
        return vnorm, tnorm
    vlo, vspan = _minmax(vs) if vs else (0.0, 1.0)
    tbest = max(ts) if ts else 1.0
    for c in candidates:
        vnorm.append(
            None
            if c.vector_score is None
            else (c.vector_score - vlo) / vspan
            if len(vs) > 1
            else 1.0
        )
        # BM25 is scaled by the best hit only: a list's weakest keyword hit still matched a term
        tnorm.append(None if c.text_score is None else (c.text_score / tbest if tbest > 0 else 0.0))
    return vnorm, tnorm


def _fuse_normalized(
    candidates: Sequence[Candidate], params: RankParams, how: str
) -> list[Candidate]:
    total = params.vector_weight + params.text_weight
    vw, tw = params.vector_weight / total, params.text_weight / total
    vnorm, tnorm = normalized_sides(candidates, how)
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


# Tuned on bench/eval (LoCoMo dev, Cranfield, CISI): see the README, "Retrieval quality".
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
    tw = AUTO_TEXT_WEIGHT + (AUTO_EXACT_TEXT_WEIGHT - AUTO_TEXT_WEIGHT) * min(1.0, 2 * share)
    return tw


def _fuse_relative(
    candidates: Sequence[Candidate], query: str, params: RankParams
) -> list[Candidate]:
    """The previous default: per-query min-max on both lists, query-dependent weights, coverage.

    Each list is rescaled within the query's candidates (`normalized_sides`), so the narrow
    cosine band of e5-style models no longer drowns keyword evidence. The keyword side is
    scaled by how many query terms the chunk contains, and weighs more when the query carries
    exact tokens (IDs, numbers, code). The configured vector/text weights belong to the other
    fusions; `relative` and `auto` pick their weights per query.
    """
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
    """How each candidate compares with the query's best on both lists (the order of `auto`).

    `vectors` are min-max rescaled over the candidates, BM25 is divided by the best keyword
    hit and multiplied by term coverage; the keyword side weighs `auto_text_weight`.

    `apart` is None for a chunk that can share the query's words and, for one that cannot
    (another script, no term in common), its calibrated vector evidence (0..1): such a chunk
    would otherwise lose the whole keyword share to chunks matching one common word, so its
    vector side also takes that share, in proportion to how strong its own evidence is.
    """
    tw = auto_text_weight(query)
    vw = 1.0 - tw
    vs = [v for v in vectors if v is not None]
    ts = [c.text_score for c in candidates if c.text_score is not None]
    vlo, vspan = _minmax(vs) if vs else (0.0, 1.0)
    tbest = max(ts) if ts else 1.0
    out = []
    for c, v, cov, strength in zip(candidates, vectors, coverage, apart, strict=True):
        vn = 0.0 if v is None else ((v - vlo) / vspan if len(vs) > 1 else 1.0)
        # BM25 is scaled by the best hit only: a list's weakest keyword hit still matched a term
        t = c.text_score / tbest if c.text_score is not None and tbest > 0 else 0.0
        lexical = t * (0.5 + 0.5 * cov) if c.text_score is not None else 0.0
        if vs and ts:
            out.append(vw * vn + tw * lexical if strength is None else vn * (vw + tw * strength))
        elif vs:
            out.append(vn)
        else:
            out.append(lexical)
    return out


def _matched_terms(c: Candidate, terms: Sequence[str]) -> set[str]:
    if not terms:
        return set()
    if c.matched is not None and c.matched[0] == tuple(terms):
        return set(c.matched[1])
    if not c.words:  # a vector-side candidate: its word set would serve only this
        return text_terms(terms, c.text)
    return matched_terms(terms, c.text, c.words)


_NAME_WORD = re.compile(r"[^\W\d_]{3,}")


@lru_cache(maxsize=4096)
def _named(terms: tuple[str, ...], path: str) -> frozenset[str]:
    """Query terms the chunk's file name holds (`legacy` in `memory/legacy.md`).

    A file named after the topic is evidence about all its chunks, as a keyword in the text
    is. Only the name's words count: every path holds `memory`, and a daily note's date is
    already in its heading.
    """
    words = _name_words(path)
    return frozenset(matched_terms(terms, " ".join(words), words)) if words else frozenset()


@lru_cache(maxsize=8192)
def _name_words(path: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _NAME_WORD.findall(_name_and_stem(path)[1]))


def _coverage(c: Candidate, terms: Sequence[str]) -> float:
    if not terms:
        return 0.0
    return len(_matched_terms(c, terms)) / len(terms)


# ----------------------------------------------------------------------------- calibrated evidence

# Unrelated questions of each script, embedded once per provider by the index: their cosines
# against the index's own chunks are what "unrelated" scores with this model and this memory.
# Trivia about the world, not about anyone's notes; a few accidental matches in a large sample
# move the mean little.
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

# Tuned on bench/eval (LoCoMo dev, Cranfield, CISI and the off-topic sets): see
# docs/retrieval-quality.md. Evidence counts linearly between a floor and a full mark.
LEX_FLOOR = 0.17  # IDF-weighted share of the query's terms a chunk holds: below, no evidence
LEX_FULL = 1.0
VEC_FLOOR = 1.5  # cosine in reference deviations above unrelated text: below, no evidence
VEC_FULL = 5.0
# The floor for a chunk in the query's own script, where keywords can vouch too. Equal to
# VEC_FLOOR with 400-token chunks; shorter chunks reach higher cosines with unrelated questions
# (more, narrower chunks: the best of them stands further out), measured in
# docs/retrieval-quality.md (round 4).
VEC_FLOOR_SAME_SCRIPT = 1.5
# The same-script floor also grows with the index, for short chunks: the best of N unrelated
# chunks lies about sqrt(2 ln N) deviations out, and the best of many narrow chunks (daily notes
# at 160 tokens) further out than the best of fewer, longer ones (measured: an unrelated chat's
# questions found evidence in 18 % of the LoCoMo conversations at 160/16 tokens and a fixed
# floor of 1.5, in 9.6 % at 400/80). A chunk of SHORT_CHUNK_TOKENS or fewer needs
# max(VEC_FLOOR_SAME_SCRIPT, VEC_FLOOR_GROWTH · sqrt(2 ln N)), one of LONG_CHUNK_TOKENS or
# more VEC_FLOOR_SAME_SCRIPT, linear between (docs/retrieval-quality.md, round 5).
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
    """The IDF-weighted share of the query's terms that a chunk holds (0..1).

    A term absent from the whole index weighs the most of all, so a question about someone
    this memory never mentions cannot look answered by its common words.
    """
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
    """The candidate's cosine in standard deviations above what unrelated queries score.

    The reference is per (query script, chunk script): e5 scores any Chinese note ~0.1 higher
    for a Chinese question than any English one, and comparing each cosine with the baseline
    of its own script pair is what lets an English note answer a Chinese question.
    """
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
    """How far above the reference the query sits on memory at large: its median z there.

    A query close to *everything* (a nonsense word such as `xyzzy`, which e5 places near any
    foreign-language text) sits high; a real question sits near 0 except on what it is about,
    which the median ignores.
    """
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
    """The deviations above the reference a chunk's cosine needs to count as evidence: for a
    chunk of `chunk_tokens` in an index of `chunks` chunks (see VEC_FLOOR_GROWTH)."""
    if not same_script:
        return VEC_FLOOR
    floor = VEC_FLOOR_SAME_SCRIPT
    if VEC_FLOOR_GROWTH <= 0 or chunks < 2:
        return floor
    grown = max(floor, VEC_FLOOR_GROWTH * math.sqrt(2.0 * math.log(chunks)))
    short = _ramp(LONG_CHUNK_TOKENS - chunk_tokens, 0, LONG_CHUNK_TOKENS - SHORT_CHUNK_TOKENS)
    return floor + short * (grown - floor)


def _ramp(x: float, lo: float, hi: float) -> float:
    return min(1.0, max(0.0, (x - lo) / (hi - lo)))


def calibrated_scores(
    candidates: Sequence[Candidate], query: str, stats: CorpusStats | None
) -> list[Candidate]:
    """memoryd's default: scores that mean the same in every query, so minScore can abstain.

    A chunk's *evidence* is `1 − (1 − lexical)(1 − vector)`: keyword evidence is the
    IDF-weighted share of the query's terms it holds (`lexical_evidence`, counted from
    LEX_FLOOR to LEX_FULL), vector evidence its cosine above the reference background
    (`vector_z`, from VEC_FLOOR to VEC_FULL deviations). Either kind alone can carry a chunk:
    a paraphrase shares no words, a note in another language cannot. The query's *confidence*
    is its best chunk's evidence: how sure we are that this memory holds anything about it.

    Each result scores `confidence × closeness^RANK_SHAPE`, where closeness is the chunk's
    share of the best hit's relative fusion score (`_relative_scores`, the order tuned on
    judged data). So every result of an off-topic query scores below its low confidence,
    and minScore drops them all, while a real question keeps its top results in the order
    that finds the most evidence: evidence alone ranks worse than the relative fusion
    (measured: docs/retrieval-quality.md).
    """
    if not candidates:
        return []
    evidence, relative = _calibrated_parts(candidates, query, stats)
    confidence = max(evidence)
    best = max(relative)
    out = []
    for c, r in zip(candidates, relative, strict=True):
        closeness = r / best if best > 0 else 1.0
        out.append(with_score(c, confidence * closeness**RANK_SHAPE))
    return out


def _calibrated_parts(
    candidates: Sequence[Candidate], query: str, stats: CorpusStats | None
) -> tuple[list[float], list[float]]:
    """Each candidate's own evidence (0..1) and its relative fusion score (see
    `calibrated_scores`)."""
    terms = query_terms(query)
    qscript = script_of(query)
    use_keywords = bool(stats.term_chunks) if stats is not None else False
    use_keywords = use_keywords or any(c.text_rank is not None for c in candidates)
    matched = [_matched_terms(c, terms) for c in candidates]
    weights = term_weights(terms, stats, candidates)
    scripts = [script_of(c.text) for c in candidates]
    zs = [vector_z(c, qscript, stats, s) for c, s in zip(candidates, scripts, strict=True)]
    offset: float | None = None
    evidence = []
    vec_evidence = []
    named_by_path: dict[str, frozenset[str]] = {}  # a file's chunks share their name's terms
    key = tuple(terms)
    for c, m, z, script in zip(candidates, matched, zs, scripts, strict=True):
        named = named_by_path.get(c.path)
        if named is None:
            named = named_by_path[c.path] = _named(key, c.path) if terms else frozenset()
        lex = (
            _ramp(lexical_evidence(m | named, weights), LEX_FLOOR, LEX_FULL)
            if use_keywords
            else 0.0
        )
        if z is not None and not m and script != qscript:
            # only the cosine vouches for a chunk in another script: it must also stand out
            # from how close this query comes to memory at large, not just from unrelated
            # queries (keywords are that check for chunks in the query's own script)
            if offset is None:
                offset = max(0.0, query_offset(qscript, stats))
            z -= APART_OFFSET * offset
        vec = 0.0
        if z is not None:  # keyword-only: no cosine, so no floor to work out
            floor = vector_floor(
                script == qscript,
                stats.chunks if stats is not None else 0,
                estimate_tokens(c.text),
            )
            vec = _ramp(z, floor, VEC_FULL)
        evidence.append(1.0 - (1.0 - lex) * (1.0 - vec))
        vec_evidence.append(vec)
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


def partial_vector_scores(
    candidates: Sequence[Candidate], query: str, stats: CorpusStats | None
) -> list[Candidate]:
    """`calibrated_scores` for an index whose chunks are only partly embedded.

    The vector side then ranks only the embedded part: its best cosine is the best of
    whatever was embedded first, often unrelated, and the relative fusion would score that
    chunk next to the keyword hits (an English question's best "vector hit" on a fresh demo
    workspace was its Japanese note). A chunk without a vector gets only its keyword share,
    as in every fusion. A chunk that only the vector side found is scored at most by its own
    calibrated evidence (its cosine above the reference background), never by its place
    among the few chunks embedded so far; a chunk the keywords found too keeps its fused score.
    """
    if not candidates:
        return []
    evidence, relative = _calibrated_parts(candidates, query, stats)
    confidence, best = max(evidence), max(relative)
    out = []
    for c, ev, r in zip(candidates, evidence, relative, strict=True):
        score = confidence * (r / best if best > 0 else 1.0) ** RANK_SHAPE
        found_by_vector_only = (
            c.vector_score is not None
            and c.text_rank is None
            and path_match_level(query, c.path) == 0
        )
        out.append(with_score(c, min(score, ev) if found_by_vector_only else score))
    return out


# ----------------------------------------------------------------------------- MMR


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


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
            sim = max((jaccard(c.words, s.words) for s in chosen), default=0.0)
            val = lam * c.score - (1 - lam) * sim
            if val > best_val:
                best_i, best_val = i, val
        chosen.append(pool.pop(best_i))
    return chosen


# ----------------------------------------------------------------------------- the pipeline


def rank(
    candidates: Iterable[Candidate],
    query: str,
    params: RankParams,
    *,
    now: datetime | None = None,
    stats: CorpusStats | None = None,
    partial_vectors: bool = False,
) -> list[Candidate]:
    """Fuse → decay → path boost → sort → MMR → minScore (keyword hits survive / fill) → top-K.

    `partial_vectors`: some chunks still wait for their vectors; the default fusion then scores
    by `partial_vector_scores`.
    """
    now = now or datetime.now(UTC)
    if partial_vectors and params.fusion == "auto":
        fused = partial_vector_scores(list(candidates), query, stats)
    else:
        fused = fuse(list(candidates), query, params, stats)
    if params.decay_enabled:
        for c in fused:
            age = age_in_days(c.path, c.source, c.mtime, now)
            if age is not None:
                c.score *= decay_multiplier(age, params.half_life_days)
    for c in fused:
        c.path_level = path_match_level(query, c.path)
    fused.sort(key=lambda c: (c.path_level > 0, c.path_level, c.score), reverse=True)

    pool_size = max(params.max_results * 4, params.max_results)
    pool = fused[:pool_size]
    if params.mmr_enabled and len(pool) > 1:
        boosted = [c for c in pool if c.path_level > 0]
        rest = [c for c in pool if c.path_level == 0]
        ordered = boosted + mmr(rest, len(rest), params.mmr_lambda)
    else:
        ordered = pool

    passing = [c for c in ordered if c.score >= params.min_score or c.path_level > 0]
    picked = passing[: params.max_results]
    # The per-query fusions put every query's best hit near 1, so minScore cannot tell an
    # off-topic query from a real one there; they keep the seed's rule that keyword hits fill
    # empty slots. Calibrated scores abstain instead: a keyword hit under minScore is noise.
    if params.fusion != "auto" and len(picked) < params.max_results:
        chosen = {c.chunk_id for c in picked}
        for c in ordered:
            if len(picked) >= params.max_results:
                break
            if c.chunk_id not in chosen and c.text_rank is not None:
                picked.append(c)
                chosen.add(c.chunk_id)
    # keep the ranking order among survivors
    order = {c.chunk_id: i for i, c in enumerate(ordered)}
    picked.sort(key=lambda c: order[c.chunk_id])
    return picked


# ----------------------------------------------------------------------------- snippets

# Where a snippet window's matching lines sit, as a share of the window (0.5 = centred).
# Tuned on LoCoMo dev: of the evidence lines a top-6 chunk held but its 700-character window
# missed, 97 lay after the window and 36 before it; 0.4 reaches 0.005 more evidence, 0.5 / 0.33
# / 0.25 less (docs/retrieval-quality.md).
SNIPPET_MATCH_AT = 0.4


def select_snippet(
    text: str, start_line: int, end_line: int, query: str, max_chars: int = 700
) -> tuple[str, int, int]:
    """The window of whole lines (≤ max_chars) inside a chunk that best matches the query.

    A window scores the distinct query terms it holds, each weighted by how few of the chunk's
    lines contain it (a speaker's name on every line says nothing about where the answer is),
    plus half the weighted hits per line. Ties go to the window whose matches sit nearest
    SNIPPET_MATCH_AT of its length: a little before the middle, so more of the lines *after* a
    match come with it (in a conversation the answer follows the line that names the topic).
    Returns (snippet, first line, last line). Falls back to the chunk's head when nothing
    matches; a single over-long line is cut around its first match.
    """
    lines = text.split("\n")
    if len(text) <= max_chars:
        return text, start_line, end_line
    terms = query_terms(query)
    hits = [text_terms(terms, line) for line in lines]
    n = len(lines)
    df = {t: sum(1 for h in hits if t in h) for t in terms}
    weight = {t: math.log(n / df[t]) if df[t] else 0.0 for t in terms}

    best: tuple[tuple[float, float], int, int] | None = None  # ((score, centring), i, j)
    for i in range(n):
        size = 0
        j = i
        present: set[str] = set()
        repeated = 0.0
        while j < n and size + len(lines[j]) + (1 if j > i else 0) <= max_chars:
            size += len(lines[j]) + (1 if j > i else 0)
            present |= hits[j]
            repeated += sum(weight[t] for t in hits[j])
            j += 1
        if j == i:  # a single line longer than the budget
            j = i + 1
            present = hits[i]
            repeated = sum(weight[t] for t in hits[i])
        score = sum(weight[t] for t in present) + 0.5 * repeated
        matched = [k for k in range(i, j) if any(weight[t] > 0 for t in hits[k])]
        target = i + (j - 1 - i) * SNIPPET_MATCH_AT
        centring = -abs((matched[0] + matched[-1]) / 2 - target) if matched else 0.0
        key = (round(score, 9), centring)
        if best is None or key > best[0]:
            best = (key, i, j)
        if j >= n:
            break
    assert best is not None
    _, i, j = best
    first = min(start_line + i, end_line)
    last = min(start_line + j - 1, end_line)
    snippet = "\n".join(lines[i:j])
    if len(snippet) > max_chars:
        low = snippet.lower()
        pos = min((low.find(t) for t in terms if t in low), default=0)
        begin = max(0, min(pos - max_chars // 4, len(snippet) - max_chars))
        snippet = snippet[begin : begin + max_chars]
    return snippet, first, last


def continue_snippet(
    text: str, start_line: int, end_line: int, after_line: int, max_chars: int = 700
) -> tuple[str, int, int] | None:
    """The whole lines of a chunk right after `after_line`, up to `max_chars`: where the best
    hit's window stopped, the next window of the same chunk (in a conversation the answer
    often comes a few turns after the line that matched). None when the window reached the
    chunk's end or nothing after it fits."""
    lines = text.split("\n")
    i = after_line - start_line + 1
    if after_line >= end_line or i <= 0 or i >= len(lines):
        return None
    taken: list[str] = []
    size = 0
    for line in lines[i:]:
        extra = len(line) + (1 if taken else 0)
        if size + extra > max_chars:
            break
        taken.append(line)
        size += extra
    while taken and not taken[-1].strip():
        taken.pop()  # a blank line at the end says nothing
    if not taken or not "".join(taken).strip():
        return None
    return "\n".join(taken), after_line + 1, min(after_line + len(taken), end_line)


def extend_chunk(
    text: str,
    start_line: int,
    end_line: int,
    following: Sequence[tuple[str, int, int]],
    max_chars: int = 700,
) -> tuple[str, int]:
    """A chunk's text with the lines of the next chunks of its file that come after it.

    `following` holds (text, start line, end line) of later chunks of the same file, in order;
    overlapping lines are taken once, and the first gap in line numbers stops it. At most
    `max_chars` are added (whole lines), enough for `continue_snippet` to go on past the chunk's
    end: with chunks shorter than a snippet, the best window *is* the whole chunk, and the reply
    after it lies in the next one. Returns (text, last line).
    """
    out = text.split("\n")
    last = end_line
    added = 0
    for f_text, f_start, f_end in following:
        if f_start > last + 1 or f_end <= last:
            break  # not the continuation of these lines
        lines = f_text.split("\n")[last + 1 - f_start :]
        for line in lines:
            if added + len(line) + 1 > max_chars:
                return "\n".join(out), last
            out.append(line)
            added += len(line) + 1
            last += 1
        last = min(last, f_end)
    return "\n".join(out), last


def uncovered_window(
    snippet: str, first: int, last: int, shown: Sequence[tuple[int, int]]
) -> tuple[str, int, int] | None:
    """A result's window without the lines at its edges that earlier results of the same file
    already show (`shown`: their line ranges); None when nothing new is left.

    Overlapping chunks, and the best hit's continuation, often return the same lines twice: an
    agent reads them once, and the budget they took can carry another result. Only the edges
    are cut, so the window stays one run of lines; a window with a shown run inside it keeps it.
    """
    lines = snippet.split("\n")
    if len(lines) != last - first + 1:
        # one long line cut to the cap: whole or nothing
        seen = any(a <= first and last <= b for a, b in shown)
        return None if seen else (snippet, first, last)

    def is_shown(line: int) -> bool:
        return any(a <= line <= b for a, b in shown)

    lo, hi = first, last
    while lo <= hi and is_shown(lo):
        lo += 1
    while hi >= lo and is_shown(hi):
        hi -= 1
    if lo > hi:
        return None
    kept = lines[lo - first : hi - first + 1]
    if not "".join(kept).strip():
        return None
    return "\n".join(kept), lo, hi
