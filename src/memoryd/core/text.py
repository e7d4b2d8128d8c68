"""Pure text helpers: token estimates, CJK-aware segmentation for FTS5, query terms."""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from functools import lru_cache
from itertools import accumulate
from typing import Literal

# CJK ideographs, kana, hangul and their punctuation-free extensions.
_CJK_CLASS = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf"  # CJK ext A
    "\u4e00-\u9fff"  # CJK unified
    "\uac00-\ud7af"  # hangul syllables
    "\uf900-\ufaff"  # compatibility ideographs
    "\U00020000-\U0002a6df"
)


# Patterns used through `re`'s own cache, so they compile on first use: a class of CJK ranges
# takes milliseconds to compile, and ASCII text never needs it.
_CJK_CHAR = f"[{_CJK_CLASS}]"
_CJK_RUN = f"[{_CJK_CLASS}]+"
_WORD = rf"[^\W_]+(?:['’][^\W_]+)?|[{_CJK_CLASS}]+"
#: `_WORD` without its CJK branch, which can never match ASCII text
_ASCII_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_SPLIT_WORD = re.compile(r"[\w'’]+", re.UNICODE)
_POSSESSIVE = re.compile(r"['’]s$")

# Function words that carry no topic, so BM25 ranks by the words that matter.
STOPWORDS = frozenset(
    (
        "a about above after again against all am an and any are as at be because been before"
        " being below between both but by can could did do does doing down during each few for from"
        " further had has have having he her here hers herself him himself his how i if in into is"
        " it its itself just me more most my myself no nor not now of off on once only or other our"
        " ours ourselves out over own same she should so some such than that the their theirs them"
        " themselves then there these they this those through to too under until up very was we"
        " were what when where which while who whom why will with would you your yours yourself"
        " yourselves ever did does s t don ll ve re d m o y"
    ).split()
)


def has_cjk(text: str) -> bool:
    return not text.isascii() and re.search(_CJK_CHAR, text) is not None


_KANA = re.compile("[\u3040-\u30ff]")
_HANGUL = re.compile("[\uac00-\ud7af]")
_LATIN_WORD = re.compile(r"[^\W\d_]+")
Script = Literal["latin", "zh", "ja", "ko"]


def script_of(text: str) -> Script:
    """The writing system a text is mostly in: `ja` (any kana), `ko`, `zh` (ideographs), `latin`."""
    if not has_cjk(text):
        return "latin"
    cjk = len(re.findall(_CJK_CHAR, text))
    words = len(_LATIN_WORD.findall(re.sub(_CJK_RUN, " ", text)))
    if cjk < words:
        return "latin"
    if _KANA.search(text):
        return "ja"
    if len(_HANGUL.findall(text)) * 2 >= cjk:
        return "ko"
    return "zh"


def estimate_tokens(text: str) -> int:
    """Cheap token estimate that does not under-count CJK: one token per CJK character, ~4 chars otherwise."""
    cjk = 0 if text.isascii() else len(text) - len(re.sub(_CJK_RUN, "", text))
    rest = len(text) - cjk
    return cjk + (rest + 3) // 4


class TokenPrefix:
    """`estimate_tokens` of any slice of one text in O(log n), after one pass over it."""

    __slots__ = ("_before", "_ends", "_starts")

    def __init__(self, text: str) -> None:
        runs = [] if text.isascii() else [m.span() for m in re.finditer(_CJK_RUN, text)]
        self._starts = [a for a, _ in runs]
        self._ends = [b for _, b in runs]
        self._before = list(accumulate((b - a for a, b in runs), initial=0))  # CJK before run i

    def _cjk_before(self, offset: int) -> int:
        i = bisect_right(self._starts, offset) - 1
        if i < 0:
            return 0
        return self._before[i] + min(offset, self._ends[i]) - self._starts[i]

    def tokens(self, start: int, end: int) -> int:
        cjk = self._cjk_before(end) - self._cjk_before(start) if self._starts else 0
        return cjk + (end - start - cjk + 3) // 4


def segment_for_fts(text: str) -> str:
    """Put spaces between CJK characters so FTS5's unicode61 tokenizer indexes each as a term."""
    if text.isascii():
        return text
    return re.sub(_CJK_RUN, lambda m: " " + " ".join(m.group(0)) + " ", text)


def split_scripts(word: str) -> list[str]:
    """A word as query terms: CJK runs as overlapping character pairs (a lone character stays
    itself), the rest (`q4` in `q4会议`) as itself."""
    if not has_cjk(word):
        return [word]
    terms: list[str] = []
    for i, part in enumerate(re.split(f"({_CJK_RUN})", word)):  # the CJK runs at odd places
        if i % 2:
            terms += [part[k : k + 2] for k in range(max(1, len(part) - 1))]
        elif part:
            terms.append(part)
    return terms


def _words(text: str) -> list[str]:
    return _ASCII_WORD.findall(text) if text.isascii() else re.findall(_WORD, text)


@lru_cache(maxsize=256)
def query_terms(query: str) -> tuple[str, ...]:
    """Lowercased content terms of a query, in order, deduplicated; CJK runs become bigrams."""
    seen: dict[str, None] = {}
    for raw in _words(query.lower()):
        # "Caroline's" is about `caroline`: notes say "Caroline:" far more often
        raw = _POSSESSIVE.sub("", raw)
        if raw in STOPWORDS or (len(raw) == 1 and not has_cjk(raw) and not raw.isdigit()):
            continue
        for term in split_scripts(raw):
            seen.setdefault(term, None)
    if not seen:  # a query of only stopwords still searches for them (not a lone letter)
        for raw in _words(query.lower()):
            if len(raw) > 1 or has_cjk(raw) or raw.isdigit():
                seen.setdefault(raw, None)
    return tuple(seen)


def fts_match_expression(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH string OR-ing every term (CJK runs become per-character phrases)."""
    parts = [" ".join(segment_for_fts(t).split()) if has_cjk(t) else t for t in terms]
    return fts_or(parts) if parts else None


def fts_or(phrases: Sequence[str]) -> str:
    """An FTS5 MATCH string OR-ing `phrases`, each quoted as one phrase."""
    return " OR ".join('"' + p.replace('"', '""') + '"' for p in phrases)


def trigram_terms(query: str) -> list[str]:
    """Substring terms for the trigram index: whole tokens (incl. `-`, `.`, `_`) of ≥ 3 characters."""
    tokens = (raw.strip(".-/:") for raw in re.findall(r"[\w.\-/:]+", query.lower()))
    return list(dict.fromkeys(t for t in tokens if len(t) >= 3 and t not in STOPWORDS))


#: ASCII bytes → `word_set`'s split: word characters (`_SPLIT_WORD`) lowercased, others a space
_ASCII_WORD_BYTES = bytes(
    (c | 0x20 if 65 <= c <= 90 else c) if (chr(c).isalnum() and c < 128) or c in b"_'" else 32
    for c in range(256)
)


def _ascii_flat(text: str) -> str:
    """ASCII `text` as `word_set` splits it: word characters lowercased, the rest spaces."""
    return text.encode("ascii").translate(_ASCII_WORD_BYTES).decode("ascii")


def word_set(text: str) -> frozenset[str]:
    """Lowercased words (CJK split per character) for Jaccard similarity and term coverage."""
    if text.isascii():
        lowered = text
        words = set(_ascii_flat(text).split())
    else:
        lowered = segment_for_fts(text.lower())
        words = set(_SPLIT_WORD.findall(lowered))
    words -= STOPWORDS
    if "_" in lowered:
        for w in [w for w in words if "_" in w]:
            words.update(p for p in w.split("_") if p and p not in STOPWORDS)
    return frozenset(words)


def matched_terms(terms: Sequence[str], text: str, words: frozenset[str]) -> set[str]:
    """The query terms `text` (whose `word_set` is `words`) holds: as a word or stem, CJK as a substring."""
    found: set[str] = set()
    lowered: str | None = None
    ordered: tuple[str, ...] | None = None
    for term in terms:
        cjk, stem = _term_shape(term)
        if cjk:
            if lowered is None:
                lowered = text.lower()
            if term in lowered:
                found.add(term)
        elif term in words:
            found.add(term)
        elif stem is not None:
            if ordered is None:
                # a prefix test is a binary search, not a scan of the chunk
                ordered = _sorted_words(words)
            at = bisect_left(ordered, stem)
            if at < len(ordered) and ordered[at].startswith(stem):
                found.add(term)
    return found


def text_terms(terms: Sequence[str], text: str) -> set[str]:
    """`matched_terms(terms, text, word_set(text))`, without the word set where it can."""
    if not text.isascii():
        if not may_match(terms, text.lower()):
            return set()
        return matched_terms(terms, text, word_set(text))
    flat = f" {_ascii_flat(text)} "
    views = (flat, flat.replace("_", " ")) if "_" in flat else (flat,)
    found: set[str] = set()
    for term in terms:
        cjk, stem = _term_shape(term)
        if cjk:
            continue  # a CJK term is never in ASCII text
        if _holds_word(views, f" {term} ") or (stem is not None and _holds_word(views, f" {stem}")):
            found.add(term)
    return found


def _holds_word(views: tuple[str, ...], needle: str) -> bool:
    """Whether a non-stopword of space-padded `views` matches `needle` (` word ` or ` prefix`)."""
    for view in views:
        at = view.find(needle)
        while at >= 0:
            if view[at + 1 : view.index(" ", at + 1)] not in STOPWORDS:
                return True
            at = view.find(needle, at + 1)
    return False


def may_match(terms: Sequence[str], lowered: str) -> bool:
    """Whether `matched_terms` can find any of `terms` in a text (`lowered`: the text lowercased)."""
    for term in terms:
        cjk, stem = _term_shape(term)
        if (term if cjk or stem is None else stem) in lowered:
            return True
    return False


@lru_cache(maxsize=4096)
def _term_shape(term: str) -> tuple[bool, str | None]:
    """(is CJK, the stem a longer word may extend or None): 'deploy' ~ 'deploying', 'notes' ~ 'note'."""
    if has_cjk(term):
        return True, None
    stem = term[:-1] if term.endswith("s") and len(term) > 3 else term
    return False, stem if len(stem) >= 4 else None


@lru_cache(maxsize=512)
def _sorted_words(words: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted(words))


def merge_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """(start, end) ranges sorted, overlapping or touching ones joined."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def camel_case(name: str) -> str:
    """`token_estimate` → `tokenEstimate`: a field's key in the JSON of the CLI and MCP."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


# Terminal escapes and C0/C1 controls: qmd colours its output, and errors must be plain text.
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain_text(text: str) -> str:
    """`text` without terminal escapes and control characters (newlines and tabs kept)."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


def visible_controls(text: str) -> str:
    """`text` with every C0/C1 control but newline and tab shown as `\\xNN`, so no note can
    drive the terminal."""
    if text.isprintable():
        return text
    return _CONTROLS.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


#: How much of a file `binary_reason` looks at, as git and grep do.
BINARY_SNIFF_BYTES = 8192
#: Below this share of printable characters (of that much), a file is not text.
MIN_PRINTABLE_SHARE = 0.7
# what does not print: C0/C1 controls but the whitespace ones, and undecodable bytes
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f\ufffd]")


def binary_reason(data: bytes) -> str | None:
    """Why a memory file's bytes are not text (a NUL or too little printable at the start), or None."""
    head = data[:BINARY_SNIFF_BYTES]
    if b"\0" in head:
        return "holds a NUL byte"
    # a multi-byte character cut at the end of the sample counts as one undecodable character
    sample = head.decode("utf-8", errors="replace")
    if not sample:
        return None
    printable = 1.0 - len(_UNPRINTABLE.findall(sample)) / len(sample)
    if printable < MIN_PRINTABLE_SHARE:
        return f"only {printable:.0%} of its first {len(head):,} bytes are printable text"
    return None
