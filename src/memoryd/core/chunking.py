"""Pure chunking: Markdown → ~N-token chunks on line boundaries with 1-based line ranges, linear
in the input, and the rule for each file's chunk size (`ChunkingPlan`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .layout import is_daily_note_path
from .text import TokenPrefix, estimate_tokens


@dataclass(frozen=True, slots=True)
class ChunkingPlan:
    """The one rule for a file's chunk size, `(tokens, overlap)`, daily notes apart when
    `daily_notes` is set; an index records `fingerprint()` so a change re-chunks everything."""

    tokens: int
    overlap: int
    daily_notes: tuple[int, int] | None = None

    def for_file(self, rel_path: str) -> tuple[int, int]:
        """The (tokens, overlap) of one memory file, by its workspace-relative path."""
        if self.daily_notes is not None and is_daily_note_path(rel_path):
            return self.daily_notes
        return self.tokens, self.overlap

    def fingerprint(self) -> str | None:
        """The daily-note size as `tokens/overlap`, None when every file uses the same."""
        return None if self.daily_notes is None else "{}/{}".format(*self.daily_notes)


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


def _cut_long_line(line: str, max_tokens: int) -> list[tuple[str, int]]:
    """(piece, tokens) of ≤ ~max_tokens each, cut after a space in a piece's second half if any."""
    prefix = TokenPrefix(line)
    pieces: list[tuple[str, int]] = []
    pos, n = 0, len(line)
    while prefix.tokens(pos, n) > max_tokens:
        # a character costs at least a quarter token: O(log budget) steps whatever the length
        lo, hi = 1, min(n - pos, 4 * max_tokens + 4)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if prefix.tokens(pos, pos + mid) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        cut = lo
        space = line.rfind(" ", pos + cut // 2, pos + cut)
        if space > pos:
            cut = space - pos + 1
        pieces.append((line[pos : pos + cut], prefix.tokens(pos, pos + cut)))
        pos += cut
    if pos < n:
        pieces.append((line[pos:], prefix.tokens(pos, n)))
    return pieces


def chunk_lines(text: str, *, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    """Chunks of ~`tokens` with `overlap` repeated, between lines; a longer line's pieces keep its number."""
    units: list[tuple[int, str, int]] = []  # (line number, text, tokens)
    for number, line in enumerate(text.splitlines(), start=1):
        cost = estimate_tokens(line) + 1  # +1 for the newline
        if cost > tokens:
            for piece, piece_tokens in _cut_long_line(line, tokens - 1):
                units.append((number, piece, piece_tokens + 1))
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
