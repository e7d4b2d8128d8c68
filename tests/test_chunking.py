"""Chunking: ~N-token chunks on line boundaries with exact 1-based ranges and overlap.

`old_chunk_lines` below is a frozen copy of the implementation before chunking became linear
(binary search over re-estimated prefixes, quadratic on long lines): the property tests require
today's output to be identical to it, and `bench/bench_chunking.py` times the two side by side.
"""

from __future__ import annotations

import itertools
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core import chunking
from memoryd.core import text as text_module
from memoryd.core.chunking import Chunk, chunk_lines
from memoryd.core.text import TokenPrefix, estimate_tokens, segment_for_fts

# --- the implementation before this change, frozen -------------------------------------------------

_OLD_CJK_CHAR = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002a6df]"
)


def old_estimate_tokens(text: str) -> int:
    cjk = len(_OLD_CJK_CHAR.findall(text))
    rest = len(text) - cjk
    return cjk + (rest + 3) // 4


def _old_cut_long_line(line: str, max_tokens: int) -> list[str]:
    pieces: list[str] = []
    rest = line
    while old_estimate_tokens(rest) > max_tokens:
        lo, hi = 1, len(rest)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if old_estimate_tokens(rest[:mid]) <= max_tokens:
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


def old_chunk_lines(text: str, *, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    if overlap >= tokens:
        raise ValueError("overlap must be smaller than tokens")
    units: list[tuple[int, str, int]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        cost = old_estimate_tokens(line) + 1
        if cost > tokens:
            for piece in _old_cut_long_line(line, tokens - 1):
                units.append((number, piece, old_estimate_tokens(piece) + 1))
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
        back = end
        carried = 0
        while back - 1 > start and carried + units[back - 1][2] <= overlap:
            back -= 1
            carried += units[back][2]
        start = back
    return chunks


# --- the contract ---------------------------------------------------------------------------


def test_line_ranges_are_exact_and_cover_every_line() -> None:
    text = "\n".join(f"line {i} " + "word " * 30 for i in range(1, 60))
    chunks = chunk_lines(text, tokens=400, overlap=80)
    lines = text.splitlines()
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 59
    for c in chunks:
        assert c.text == "\n".join(lines[c.start_line - 1 : c.end_line])
        assert c.tokens <= 400
    covered = set()
    for c in chunks:
        covered.update(range(c.start_line, c.end_line + 1))
    assert covered == set(range(1, 60))


def test_consecutive_chunks_overlap_by_about_the_overlap() -> None:
    text = "\n".join("w " * 18 for _ in range(200))  # ~10 tokens a line
    chunks = chunk_lines(text, tokens=100, overlap=30)
    for a, b in itertools.pairwise(chunks):
        shared = a.end_line - b.start_line + 1
        assert 1 <= shared <= 3


def test_over_long_lines_are_cut_and_keep_their_line_number() -> None:
    text = "short\n" + "x" * 5000 + "\nafter"
    chunks = chunk_lines(text, tokens=400, overlap=80)
    long_parts = [c for c in chunks if c.start_line == 2 and c.end_line == 2]
    assert len(long_parts) >= 3
    assert all(c.tokens <= 400 for c in chunks)
    assert "".join(c.text for c in long_parts).count("x") >= 4000


def test_cjk_is_not_under_counted() -> None:
    cjk = "我们明天去北京开会讨论新的项目计划" * 20
    assert estimate_tokens(cjk) >= len(cjk)
    chunks = chunk_lines("\n".join([cjk] * 3), tokens=400, overlap=80)
    assert all(len(c.text) <= 400 for c in chunks)


def test_blank_input_has_no_chunks() -> None:
    assert chunk_lines("") == []
    assert chunk_lines("\n\n   \n") == []


def test_cjk_segmentation_splits_ideographs_only() -> None:
    assert segment_for_fts("去北京 ok").split() == ["去", "北", "京", "ok"]
    assert segment_for_fts("hello world") == "hello world"


# ASCII text skips the CJK patterns: it must give exactly what the full patterns give.
_FULL_CJK_RUN = re.compile(f"[{text_module._CJK_CLASS}]+")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), st.text(st.characters(max_codepoint=127), max_size=200)))
def test_the_ascii_shortcuts_agree_with_the_full_cjk_patterns(text: str) -> None:
    assert segment_for_fts(text) == _FULL_CJK_RUN.sub(
        lambda m: " " + " ".join(m.group(0)) + " ", text
    )
    assert text_module.has_cjk(text) == bool(_FULL_CJK_RUN.search(text))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=300), min_size=1, max_size=40), st.integers(20, 200))
def test_chunks_always_reproduce_their_lines(lines: list[str], size: int) -> None:
    lines = [ln.replace("\r", "").replace("\n", " ") for ln in lines]
    text = "\n".join(lines)
    for c in chunk_lines(text, tokens=size, overlap=size // 4):
        assert 1 <= c.start_line <= c.end_line <= len(text.splitlines())
        assert c.tokens <= size


# --- identical to the frozen implementation -------------------------------------------------

# Letters, spaces, punctuation, accents, CJK (each one token), and the separators splitlines knows.
_CHARS = st.sampled_from(list("abcxyz  .,-_é0") + list("北京東京我们") + ["\n", "\r", "\u2028"])
_budgets = st.integers(2, 120).flatmap(lambda t: st.tuples(st.just(t), st.integers(0, t - 1)))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(_CHARS.filter(lambda c: c not in "\n\r\u2028"), max_size=60), max_size=30),
    _budgets,
)
def test_ordinary_text_chunks_exactly_as_before(lines: list[str], budget: tuple[int, int]) -> None:
    """Lines shorter than the budget: the same chunks, ranges, texts and token counts."""
    tokens, overlap = budget
    text = "\n".join(ln for ln in lines if estimate_tokens(ln) + 1 <= tokens)
    assert chunk_lines(text, tokens=tokens, overlap=overlap) == old_chunk_lines(
        text, tokens=tokens, overlap=overlap
    )


@settings(max_examples=300, deadline=None)
@given(st.text(_CHARS, max_size=2000), _budgets)
def test_any_text_chunks_exactly_as_before(text: str, budget: tuple[int, int]) -> None:
    """Over-long lines too: the pieces are cut where the old binary search cut them."""
    tokens, overlap = budget
    assert chunk_lines(text, tokens=tokens, overlap=overlap) == old_chunk_lines(
        text, tokens=tokens, overlap=overlap
    )


@settings(max_examples=200, deadline=None)
@given(st.text(_CHARS, max_size=300))
def test_token_estimates_are_unchanged_and_any_slice_is_a_lookup(text: str) -> None:
    assert estimate_tokens(text) == old_estimate_tokens(text)
    prefix = TokenPrefix(text)
    for a, b in itertools.combinations_with_replacement(range(0, len(text) + 1, 7), 2):
        assert prefix.tokens(a, b) == estimate_tokens(text[a:b])


# --- linear in the input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "x" * 1_000_000,  # no space to cut on
        ("lorem ipsum dolor sit amet " * 40_000),  # spaces everywhere
        "我们明天去北京开会" * 100_000,  # CJK: one token a character
        "a北 " * 300_000,  # CJK runs broken every few characters
    ],
    ids=["no-spaces", "words", "cjk", "mixed-cjk"],
)
def test_a_long_line_is_scanned_a_constant_number_of_times(
    line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Count every character handed to a token estimate: linear work, not quadratic."""
    scanned = 0
    real_estimate, real_prefix = chunking.estimate_tokens, chunking.TokenPrefix

    def counting_estimate(text: str) -> int:
        nonlocal scanned
        scanned += len(text)
        return real_estimate(text)

    def counting_prefix(text: str) -> TokenPrefix:
        nonlocal scanned
        scanned += len(text)
        return real_prefix(text)

    monkeypatch.setattr(chunking, "estimate_tokens", counting_estimate)
    monkeypatch.setattr(chunking, "TokenPrefix", counting_prefix)
    chunks = chunk_lines(line)
    assert scanned <= 2 * len(line)  # the line's own estimate, then its prefix index
    assert "".join(c.text for c in chunks if c.start_line == 1)  # and it was chunked


def test_five_megabytes_on_one_line_chunk_in_seconds_not_minutes() -> None:
    """The robustness issue's case (136.8 s before): a generous bound, not a tight timing."""
    line = "lorem ipsum dolor sit amet " * 200_000  # 5.4 MB
    started = time.process_time()
    chunks = chunk_lines(line)
    assert time.process_time() - started < 20
    assert {(c.start_line, c.end_line) for c in chunks} == {(1, 1)}
    assert all(c.tokens <= 400 for c in chunks)


def test_query_terms_are_worked_out_once_and_shared_as_a_tuple() -> None:
    from memoryd.core import text

    text.query_terms.cache_clear()
    first = text.query_terms("Where did Caroline's team move the data-center?")
    assert first == ("caroline", "team", "move", "data", "center")
    assert text.query_terms("Where did Caroline's team move the data-center?") is first
    assert text.query_terms.cache_info().hits == 1
