"""Snippet windows: the lines of a chunk that best answer the query, within a character budget."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..text import query_terms, text_terms

# Where a window's matches sit (0.5 = centred): before the middle, as missed evidence tends to follow.
SNIPPET_MATCH_AT = 0.4


def select_snippet(
    text: str, start_line: int, end_line: int, query: str, max_chars: int = 700
) -> tuple[str, int, int]:
    """(snippet, first, last): the window of whole lines ≤ max_chars scoring the most distinct
    query terms, each weighted by how few lines hold it, plus half the weighted hits; ties go to
    matches nearest SNIPPET_MATCH_AT; one over-long line is cut around its first match."""
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
        size, j = -1, i  # -1: no newline before the first line
        present: set[str] = set()
        repeated = 0.0
        # the first line always: a single line longer than the budget is cut below
        while j < n and (j == i or size + 1 + len(lines[j]) <= max_chars):
            size += 1 + len(lines[j])
            present |= hits[j]
            repeated += sum(weight[t] for t in hits[j])
            j += 1
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
    """The chunk's next window after `after_line` (an answer often follows the matching line);
    None when nothing after it fits."""
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
    """(text, last line): the chunk with up to `max_chars` of the lines of `following` chunks
    of its file after it (overlaps taken once, a gap stops), for `continue_snippet`."""
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
    """The window without the edge lines `shown` ranges cover; None if nothing is left."""
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
