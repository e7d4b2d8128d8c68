"""Pure snippets for qmd's hits, cut from the file as the built-in index would, interleaved."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Final

from ..core.ranking import continue_snippet, select_snippet
from ..core.results import SearchResult
from ..core.text import text_terms
from ._parse import parse_snippet

#: Characters around qmd's line a window is chosen from: qmd's chunk (900 tokens) either side.
QMD_CHUNK_CHARS: Final = 3600
#: The share of a question's content words a keyword hit must hold, as qmd's scores are ranks and
#: any note sharing one word would otherwise answer (docs/qmd.md).
MIN_WORD_SHARE: Final = 0.5
#: Snippet lines shorter than this say too little to find a moved line by.
_MIN_ANCHOR_CHARS: Final = 12


def content_docid(data: bytes) -> str:
    """qmd's docid of a file's content: the first 6 hex digits of its SHA-256."""
    return hashlib.sha256(data).hexdigest()[:6]


def holds_enough(words: Sequence[str], text: str) -> bool:
    """Whether the text holds `MIN_WORD_SHARE` of the question's content words, as keyword ranking
    matches them (an identifier by all its parts)."""
    if not words:
        return True
    held = 0
    for word in words:
        parts = [p for p in re.split(r"[._-]+", word) if p] or [word]
        held += len(text_terms(parts, text)) == len(set(parts))
    return held / len(words) >= MIN_WORD_SHARE


def file_lines(text: str) -> list[str]:
    """The file's lines (1-based line n is item n-1); a final newline ends a line, adds none."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def refind_line(lines: Sequence[str], line: int, snippet: str | None) -> int | None:
    """Where qmd's `line` is now in an edited file, by the text qmd's snippet showed around it."""
    if not snippet:
        return None
    text, start = parse_snippet(snippet)
    if start is None:
        return None
    shown = text.split("\n")
    for i in sorted(range(len(shown)), key=lambda i: abs(start + i - line)):
        anchor = shown[i].strip()
        prefix = anchor.endswith("...") and i == len(shown) - 1  # qmd cut the snippet here
        if prefix:
            anchor = anchor[:-3].rstrip()
        if len(anchor) < _MIN_ANCHOR_CHARS:
            continue
        was = start + i
        found = [
            n
            for n, text in enumerate(lines, 1)
            if (text.strip().startswith(anchor) if prefix else text.strip() == anchor)
        ]
        if found:
            best = min(found, key=lambda n: abs(n - was))
            return min(max(1, best + line - was), len(lines))
    return None


def _region(lines: Sequence[str], line: int, chars: int) -> tuple[int, int]:
    """0-based [lo, hi] of the lines within `chars` characters before and after `line`."""
    lo = hi = line - 1
    size = 0
    while lo > 0 and size + len(lines[lo - 1]) + 1 <= chars:
        lo -= 1
        size += len(lines[lo]) + 1
    size = 0
    while hi + 1 < len(lines) and size + len(lines[hi + 1]) + 1 <= chars:
        hi += 1
        size += len(lines[hi]) + 1
    return lo, hi


def hit_windows(
    lines: Sequence[str], line: int, query: str, max_chars: int, *, continuation: bool = False
) -> list[tuple[str, int, int]]:
    """The (text, first, last) window for a hit at `line`, with `continuation` the next one too."""
    if not lines:
        return []
    line = min(max(1, line), len(lines))
    lo, hi = _region(lines, line, QMD_CHUNK_CHARS)
    text, first, last = select_snippet(
        "\n".join(lines[lo : hi + 1]), lo + 1, hi + 1, query, max_chars
    )
    out = [(text, first, last)]
    if continuation:
        more = continue_snippet("\n".join(lines), 1, len(lines), last, max_chars)
        if more is not None:
            out.append(more)
    return out


def interleave(*lists: Sequence[Sequence[SearchResult]]) -> list[SearchResult]:
    """Round-robin over per-source lists of hits (each best-first), so no source starves another."""
    ordered = sorted((lst for lst in lists if lst), key=lambda lst: -lst[0][0].score)
    out: list[SearchResult] = []
    for i in range(max((len(lst) for lst in ordered), default=0)):
        for lst in ordered:
            if i < len(lst):
                out.extend(lst[i])
    return out
