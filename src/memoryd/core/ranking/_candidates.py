"""What ranking works on: candidates, settings, index statistics, and path/term matches."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Literal

from ..text import Script, matched_terms, text_terms

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
