"""Chunking: ~N-token chunks on line boundaries with exact 1-based ranges and overlap."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core.chunking import chunk_lines
from memoryd.core.text import estimate_tokens, segment_for_fts
from memoryd.errors import InvalidInput


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


def test_overlap_must_be_smaller_than_size() -> None:
    with pytest.raises(InvalidInput):
        chunk_lines("x", tokens=10, overlap=10)


def test_cjk_segmentation_splits_ideographs_only() -> None:
    assert segment_for_fts("去北京 ok").split() == ["去", "北", "京", "ok"]
    assert segment_for_fts("hello world") == "hello world"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=300), min_size=1, max_size=40), st.integers(20, 200))
def test_chunks_always_reproduce_their_lines(lines: list[str], size: int) -> None:
    lines = [ln.replace("\r", "").replace("\n", " ") for ln in lines]
    text = "\n".join(lines)
    for c in chunk_lines(text, tokens=size, overlap=size // 4):
        assert 1 <= c.start_line <= c.end_line <= len(text.splitlines())
        assert c.tokens <= size
