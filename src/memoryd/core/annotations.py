"""OpenClaw's `<!-- importance: N -->` annotations in the curated root files, read as OpenClaw
reads them, per entry (list item, heading or paragraph)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Final

from .layout import CURATED_ROOT_NAMES
from .text import text_terms, word_set

_OPENER: Final = re.compile(r"<!--\s*(trigger|importance|project)\s*:", re.IGNORECASE)
_CLOSER: Final = "-->"
_IMPORTANCE: Final = re.compile(r"0*(?:10|[1-9])")  # 1..10, leading zeros allowed
_LIST_ITEM: Final = re.compile(r" ?(?:[-*+]|\d{1,9}[.)])(?:\s|$)")
_HEADING: Final = re.compile(r" {0,3}#{1,6}(?:\s|$)")
# the curated root files are the only ones whose annotations count
_CURATED: Final = frozenset(CURATED_ROOT_NAMES)


def _scan(line: str) -> Iterator[tuple[str, str]]:
    """(kind, trimmed value) of each annotation in `line`, in order."""
    pos = 0
    while (m := _OPENER.search(line, pos)) is not None:
        close = line.find(_CLOSER, m.end())
        if close < 0:
            return
        yield m.group(1).lower(), line[m.end() : close].strip()
        pos = close + len(_CLOSER)


def entry_importance(lines: Sequence[str], *, path: str) -> int | None:
    """The importance of one entry (its lines) of the file at workspace-relative `path`, or None
    (neutral); its trigger and project annotations do not rank."""
    if path not in _CURATED:
        return None
    importance: int | None = None
    for line in lines:
        if not line.rstrip().endswith(_CLOSER):
            continue  # a marker followed by text is prose, not an annotation
        for kind, value in _scan(line):
            if kind == "importance" and _IMPORTANCE.fullmatch(value):
                importance = max(importance or 0, int(value))
    return importance


def entries(text: str) -> list[list[str]]:
    """`text` cut into entries: a list item with its indented lines, a heading, or a paragraph."""
    out: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if not line.strip():
            current = None
            continue
        if current is None or _LIST_ITEM.match(line) or _HEADING.match(line):
            current = [line]
            out.append(current)
            if _HEADING.match(line):
                current = None  # a heading is an entry of one line
        else:
            current.append(line)
    return out


def importance_multiplier(importance: int | None) -> float:
    """OpenClaw's multiplier: `0.75 + 0.05·N` for N in 1..10 (5 is neutral), 1.0 without one."""
    if importance is None:
        return 1.0
    return 0.75 + 0.05 * min(10, max(1, importance))


def chunk_multiplier(path: str, text: str, terms: Sequence[str]) -> float:
    """The multiplier of the chunk's entry holding the most query `terms` (highest on a tie)."""
    if path not in _CURATED or "<!--" not in text:
        return 1.0
    bodies, multipliers, holders = _parsed(path, text)
    if len(set(multipliers)) <= 1:  # one value for every entry: no need to find the query
        return multipliers[0] if multipliers else 1.0
    counts = [0] * len(multipliers)
    for term in text_terms(terms, text) if terms else ():
        held = holders.get(term)
        if held is None:  # held as a stem or a CJK substring: ask each entry
            held = tuple(i for i, body in enumerate(bodies) if text_terms([term], body))
        for i in held:
            counts[i] += 1
    return max(zip(counts, multipliers, strict=True))[1]


@lru_cache(maxsize=1024)
def _parsed(
    path: str, text: str
) -> tuple[tuple[str, ...], tuple[float, ...], Mapping[str, tuple[int, ...]]]:
    """A chunk's entries: their text, their multipliers, and which entries hold each word."""
    bodies, multipliers = [], []
    holders: dict[str, list[int]] = {}
    for i, lines in enumerate(entries(text)):
        body = "\n".join(lines)
        bodies.append(body)
        multipliers.append(importance_multiplier(entry_importance(lines, path=path)))
        for word in word_set(body):
            holders.setdefault(word, []).append(i)
    return tuple(bodies), tuple(multipliers), {w: tuple(h) for w, h in holders.items()}
