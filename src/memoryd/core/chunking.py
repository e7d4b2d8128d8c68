"""Pure chunking: Markdown text → ~N-token chunks split on lines, with exact 1-based line ranges."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..errors import InvalidInput
from .text import estimate_tokens


@dataclass(frozen=True, slots=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    text: str
    tokens: int

    @property
    def hash(self) -> str:
        return content_hash(self.text)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _cut_long_line(line: str, max_tokens: int) -> list[str]:
    """Split one over-long line into pieces of at most ~max_tokens each (on spaces when possible)."""
    pieces: list[str] = []
    rest = line
    while estimate_tokens(rest) > max_tokens:
        # binary search the longest prefix within budget
        lo, hi = 1, len(rest)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if estimate_tokens(rest[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        cut = lo
        space = rest.rfind(" ", cut // 2, cut)
        if space > 0:
            cut = space + 1
        pieces.append(rest[:cut])
        rest = rest[cut:]
    if rest:
        pieces.append(rest)
    return pieces


def chunk_lines(text: str, *, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    """Split `text` into chunks of about `tokens` estimated tokens with `overlap` tokens repeated.

    Boundaries fall between lines; a line longer than the budget is cut into pieces that keep
    its line number. Blank-only input yields no chunks.
    """
    if overlap >= tokens:
        raise InvalidInput("overlap must be smaller than tokens")
    units: list[tuple[int, str, int]] = []  # (line number, text, tokens)
    for number, line in enumerate(text.splitlines(), start=1):
        cost = estimate_tokens(line) + 1  # +1 for the newline
        if cost > tokens:
            for piece in _cut_long_line(line, tokens - 1):
                units.append((number, piece, estimate_tokens(piece) + 1))
        else:
            units.append((number, line, cost))

    chunks: list[Chunk] = []
    start = 0
    n = len(units)
    while start < n:
        end = start
        used = 0
        while end < n and (used + units[end][2] <= tokens or end == start):
            used += units[end][2]
            end += 1
        body = "\n".join(u[1] for u in units[start:end])
        if body.strip():
            chunks.append(Chunk(units[start][0], units[end - 1][0], body, used))
        if end >= n:
            break
        # step back so the next chunk repeats ~overlap tokens, but always move forward
        back = end
        carried = 0
        while back - 1 > start and carried + units[back - 1][2] <= overlap:
            back -= 1
            carried += units[back][2]
        start = back
    return chunks
