"""Pure query planning: an agent's question as the `qmd query` document that finds the most for it."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Final, Literal

from ..core.text import STOPWORDS, has_cjk, split_scripts

SearchMode = Literal["search", "vsearch", "query"]

#: Content words a plan is built from: pairs grow as n²/2, and more gain little (docs/qmd.md).
MAX_PLAN_WORDS: Final = 12
#: Words that ask rather than tell, beside the stopwords: they never name what the notes hold.
QUESTION_WORDS: Final = frozenset({"whose", "might", "may", "must", "shall"})

# A line of a query document qmd reads as typed (`lex:`, `vec:`, `hyde:`, `intent:`, `expand:`).
_TYPED_LINE = re.compile(r"^\s*(?:lex|vec|hyde|intent|expand)\s*:", re.IGNORECASE | re.MULTILINE)
# `-term` / `-"phrase"` at a word boundary: qmd's lex negation (`e-mail`, `-5` are not).
_NEGATION = re.compile(r"(?:^|\s)-(?:[^\W\d_]|\")")
# An identifier kept whole (ERR_CART_TTL_EXPIRED, v1.2.3, gpt-4): qmd's lex reads it as a phrase.
_IDENTIFIER = re.compile(r"^[^\W_]+(?:[._-]+[^\W_]+)+$|^\w*_\w*$")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_POSSESSIVE = re.compile(r"['’]s$")
_EDGE_PUNCT = "\"'’`.,;:!?()[]{}<>«»“”‘*#~^|/\\"


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """The `qmd query` document of typed lines, the words snippets are cut by, whether it is the
    caller's own syntax or holds a `vec:` line, and the words a hit must hold a share of."""

    document: str
    snippet_query: str
    verbatim: bool = False
    vector: bool = False
    words: tuple[str, ...] = ()


def is_qmd_syntax(query: str) -> bool:
    """The query is already qmd's: a query document it accepts, a quoted phrase or a `-term`."""
    if _TYPED_LINE.search(query):
        return is_query_document(query)
    quotes = query.count('"')
    return (quotes >= 2 and quotes % 2 == 0) or bool(_NEGATION.search(query))


_LINE = re.compile(r"^(lex|vec|hyde|intent|expand)\s*:\s*(.*)$", re.IGNORECASE)
_SEMANTIC_NEGATION = re.compile(r"(^|\s)-[\w\"]")


def is_query_document(text: str) -> bool:
    """Whether qmd's `parseStructuredQuery` would accept `text`; what it refuses is read as a
    question, so an agent's typo does not look like a failing qmd."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    kinds: list[str] = []
    for line in lines:
        match = _LINE.match(line)
        if match is None or not match.group(2).strip():
            return False
        kind, body = match.group(1).lower(), match.group(2)
        if kind == "lex" and body.count('"') % 2:
            return False
        if kind in ("vec", "hyde") and _SEMANTIC_NEGATION.search(body):
            return False
        kinds.append(kind)
    if "expand" in kinds and len(kinds) > 1:
        return False
    searches = [k for k in kinds if k != "intent"]
    return bool(searches) and kinds.count("intent") <= 1


def content_words(query: str) -> list[str]:
    """The question's content words, in order, lowercased and deduplicated, at most `MAX_PLAN_WORDS`."""
    seen: dict[str, None] = {}
    fallback: dict[str, None] = {}
    for token in query.split():
        token = token.strip(_EDGE_PUNCT)
        if not token:
            continue
        if _IDENTIFIER.match(token) and not has_cjk(token):
            seen.setdefault(token.lower(), None)
            continue
        for raw in _WORD.findall(token.lower()):
            raw = _POSSESSIVE.sub("", raw)
            fallback.setdefault(raw, None)
            if raw in STOPWORDS or raw in QUESTION_WORDS:
                continue
            if len(raw) == 1 and not raw.isdigit() and not has_cjk(raw):
                continue
            for term in split_scripts(raw):
                seen.setdefault(term, None)
    words = list(seen or fallback)
    return words[:MAX_PLAN_WORDS]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _vec_text(query: str) -> str:
    """The question for a `vec:` line: one line, no `-term` (qmd refuses negation there)."""
    return _one_line(re.sub(r"(^|\s)-+(?=[\w\"])", r"\1", query)).replace('"', "")


def lex_lines(words: list[str]) -> list[str]:
    """All the words, every pair, then each word: an OR ranking by how many a document holds."""
    if not words:
        return []
    lines = [" ".join(words)]
    if len(words) > 2:
        lines += [f"{a} {b}" for a, b in itertools.combinations(words, 2)]
    if len(words) > 1:
        lines += words
    return [f"lex: {line}" for line in lines]


def plan_query(query: str, *, mode: SearchMode, vectors: bool) -> QueryPlan | None:
    """The `qmd query` document for `query` in `mode`; None when nothing in it can be searched."""
    text = query.strip()
    if not text:
        return None
    if _TYPED_LINE.search(text) and not is_query_document(text):
        text = _one_line(_TYPED_LINE.sub(" ", text))  # read as the question it holds
    if is_qmd_syntax(text):
        if _TYPED_LINE.search(text):
            body = _TYPED_LINE.sub(" ", text)
            vector = bool(re.search(r"^\s*(?:vec|hyde)\s*:", text, re.I | re.M))
            return QueryPlan(text, _positive(body), verbatim=True, vector=vector)
        return QueryPlan(f"lex: {_one_line(text)}", _positive(text), verbatim=True)
    words = content_words(text)
    if not words:
        return None
    use_vec = vectors and mode != "search"
    vec = [f"vec: {_vec_text(text)}"] if use_vec else []
    if mode == "vsearch" and use_vec:
        return QueryPlan("\n".join(vec), text, vector=True)
    # the `vec:` line first: qmd weighs the first list it fuses twice
    lines = vec + lex_lines(words)
    # no share of a stopword-only question's words, nor with a vector line, which shares none
    held = () if use_vec else tuple(w for w in words if w not in STOPWORDS)
    return QueryPlan("\n".join(lines), text, vector=use_vec, words=held)


def _positive(text: str) -> str:
    """The words of a qmd-syntax query without its negated terms (what snippets should show)."""
    kept = [t for t in _one_line(text).split() if not t.startswith("-")]
    return " ".join(kept).replace('"', " ")
