"""Fitting texts into an embedding API's limits without a tokenizer: estimate, split, pack."""

from __future__ import annotations

import math
from collections.abc import Sequence


def estimate_tokens(text: str) -> int:
    ascii_chars = sum(1 for ch in text if ch < "\x80")
    return math.ceil(ascii_chars / 3) + (len(text) - ascii_chars)


def _cut(text: str, max_tokens: int) -> int:
    """Largest prefix length whose estimate fits, preferring to end on whitespace."""
    budget = 3 * max_tokens  # in "ascii thirds"
    used = 0
    end = 0
    for i, ch in enumerate(text):
        used += 1 if ch < "\x80" else 3
        if used > budget:
            break
        end = i + 1
    if end < len(text):
        space = text.rfind(" ", 0, end)
        newline = text.rfind("\n", 0, end)
        soft = max(space, newline)
        if soft > end // 2:
            end = soft + 1
    return max(end, 1)


def split_to_tokens(text: str, max_tokens: int) -> list[str]:
    """`text` as consecutive pieces that each fit `max_tokens`, cut at word boundaries."""
    pieces: list[str] = []
    rest = text
    while estimate_tokens(rest) > max_tokens:
        end = _cut(rest, max_tokens)
        pieces.append(rest[:end])
        rest = rest[end:]
    if rest or not pieces:
        pieces.append(rest)
    return pieces


def pack(texts: Sequence[str], *, max_items: int, max_tokens: int | None) -> list[tuple[int, int]]:
    """Split `texts` into [start, stop) request ranges within an API's per-request item/token limits."""
    ranges: list[tuple[int, int]] = []
    start = 0
    tokens = 0
    for i, text in enumerate(texts):
        cost = estimate_tokens(text)
        full = i - start >= max_items or (max_tokens is not None and tokens + cost > max_tokens)
        if full and i > start:
            ranges.append((start, i))
            start, tokens = i, 0
        tokens += cost
    if start < len(texts):
        ranges.append((start, len(texts)))
    return ranges
