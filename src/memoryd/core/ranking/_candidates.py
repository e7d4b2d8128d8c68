"""What ranking works on: a candidate chunk, the ranking settings, the index's statistics, and
what a chunk's path and text hold of the query (path matches, matched terms)."""

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
    """A copy of `c` with `score`, built directly: `dataclasses.replace` looks its fields up on
    every call, and every candidate of every search is copied (a test holds the two equal)."""
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
    #: How many of the best fused candidates MMR and minScore look at. A search sets it from
    #: the configuration, never from the request's maxResults, so that the first k results of
    #: maxResults = N are the results of maxResults = k. None: 4 × max_results.
    pool_size: int | None = None


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
