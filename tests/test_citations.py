"""Citations on search results and the maxInjectedChars budget, as OpenClaw's memory_search does."""

from __future__ import annotations

from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.citations import (
    CitationsMode,
    apply_citations,
    citations_enabled,
    decorate,
    format_citation,
    trim_to_budget,
)
from memoryd.core.results import SearchResult
from memoryd.core.session_keys import ChatType


def result(
    snippet: str = "text", path: str = "memory/notes.md", start: int = 5, end: int = 7
) -> SearchResult:
    return SearchResult(
        path=path, start_line=start, end_line=end, score=0.5, snippet=snippet, source="memory"
    )


# --------------------------------------------------------------------------- format


@pytest.mark.parametrize(
    ("path", "start", "end", "citation"),
    [
        ("memory/notes.md", 5, 5, "memory/notes.md#L5"),
        ("memory/notes.md", 5, 7, "memory/notes.md#L5-L7"),
        ("MEMORY.md", 1, 1, "MEMORY.md#L1"),
        ("memory/2026-01-02.md", 1, 400, "memory/2026-01-02.md#L1-L400"),
        ("memory/ünïcode 日記.md", 3, 4, "memory/ünïcode 日記.md#L3-L4"),
        ("memory/notes.md", 7, 5, "memory/notes.md#L7"),  # backwards range: the start line
    ],
)
def test_citation_is_path_and_line_or_line_range(
    path: str, start: int, end: int, citation: str
) -> None:
    assert format_citation(path, start, end) == citation


# --------------------------------------------------------------------------- when


@pytest.mark.parametrize(
    ("mode", "chat_type", "enabled"),
    [
        ("on", None, True),
        ("on", "direct", True),
        ("on", "group", True),
        ("on", "channel", True),
        ("off", None, False),
        ("off", "direct", False),
        ("off", "group", False),
        ("off", "channel", False),
        ("auto", None, True),
        ("auto", "direct", True),
        ("auto", "group", False),
        ("auto", "channel", False),
    ],
)
def test_citations_follow_the_mode_and_chat_type(
    mode: CitationsMode, chat_type: ChatType | None, enabled: bool
) -> None:
    assert citations_enabled(mode, chat_type) is enabled


@pytest.mark.parametrize(
    ("session_key", "cited"),
    [
        (None, True),
        ("", True),
        ("agent:main:main", True),
        ("agent:main:cron:daily", True),
        ("agent:main:subagent:x", True),
        ("agent:main:telegram:direct:42", True),
        ("agent:main:slack:dm:u1", True),
        ("agent:main:discord:group:c1", False),
        ("agent:main:discord:channel:c1", False),
        ("Workspace:group:123", False),
        ("agent:main:discord:acct:group:c1", False),
    ],
)
def test_auto_cites_in_direct_chats_and_without_a_session(
    session_key: str | None, cited: bool
) -> None:
    [out] = apply_citations([result()], "auto", session_key=session_key, max_injected_chars=None)
    assert (out.citation is not None) is cited


# --------------------------------------------------------------------------- decoration


def test_on_appends_the_source_line_and_sets_citation() -> None:
    [out] = apply_citations(
        [result("  remember the milk \n", start=5, end=5)], "on", max_injected_chars=None
    )
    assert out.snippet == "remember the milk\n\nSource: memory/notes.md#L5"
    assert out.citation == "memory/notes.md#L5"
    assert out.to_dict()["citation"] == "memory/notes.md#L5"


def test_on_keeps_everything_but_snippet_and_citation() -> None:
    before = result("x", start=2, end=9)
    [after] = apply_citations([before], "on", max_injected_chars=None)
    assert after.with_(snippet=before.snippet, citation=None) == before


def test_off_leaves_the_snippet_alone_and_has_no_citation_field() -> None:
    stale = result("  keep my  spacing \n").with_(citation="memory/old.md#L1")
    [out] = apply_citations([stale], "off", max_injected_chars=None)
    assert out.snippet == "  keep my  spacing \n"
    assert out.citation is None
    assert "citation" not in out.to_dict()
    assert out.to_dict()["path"] == "memory/notes.md"  # memory_get still has what it needs


def test_auto_in_a_group_behaves_like_off() -> None:
    results = [result("a"), result("b", start=1, end=1)]
    assert apply_citations(
        results, "auto", session_key="discord:group:c1", max_injected_chars=None
    ) == apply_citations(results, "off", max_injected_chars=None)


def test_decorating_an_empty_list_gives_an_empty_list() -> None:
    assert apply_citations([], "on", max_injected_chars=100) == []


def test_input_results_are_not_modified() -> None:
    original = [result("abc")]
    apply_citations(original, "on", max_injected_chars=10)
    assert original == [result("abc")]


# --------------------------------------------------------------------------- budget


@pytest.mark.parametrize(
    ("snippets", "budget", "kept"),
    [
        (["aaaa", "bbbb", "cccc"], None, ["aaaa", "bbbb", "cccc"]),
        (["aaaa", "bbbb", "cccc"], 12, ["aaaa", "bbbb", "cccc"]),
        (["aaaa", "bbbb", "cccc"], 100, ["aaaa", "bbbb", "cccc"]),
        (["aaaa", "bbbb", "cccc"], 10, ["aaaa", "bbbb", "cc"]),
        (["aaaa", "bbbb", "cccc"], 6, ["aaaa", "bb"]),
        (["aaaa", "bbbb", "cccc"], 8, ["aaaa", "bbbb"]),  # exact fit: the rest is dropped
        (["aaaa", "bbbb", "cccc"], 1, ["a"]),
        (["aaaaaaaaaa", "b"], 3, ["aaa"]),
        (["", "aaaa", ""], 4, ["", "aaaa"]),  # nothing left after the budget is spent
        (["", "aaaa", ""], 5, ["", "aaaa", ""]),
        ([], 10, []),
        (["日本語のメモ", "ünï"], 8, ["日本語のメモ", "ün"]),
        (["👍👍👍"], 2, ["👍👍"]),  # code points, never half an emoji
    ],
)
def test_trim_cuts_the_overflowing_snippet_and_drops_the_rest(
    snippets: list[str], budget: int | None, kept: list[str]
) -> None:
    results = [result(s, start=i + 1, end=i + 1) for i, s in enumerate(snippets)]
    trimmed = trim_to_budget(results, budget)
    assert [r.snippet for r in trimmed] == kept
    assert [r.start_line for r in trimmed] == list(range(1, len(kept) + 1))


def test_budget_applies_after_decoration_so_source_lines_count() -> None:
    results = [result("a" * 50, start=1, end=1), result("b" * 50, start=2, end=2)]
    cited = apply_citations(results, "on", max_injected_chars=100)
    first = "a" * 50 + "\n\nSource: memory/notes.md#L1"
    assert [r.snippet for r in cited] == [first, ("b" * 50)[: 100 - len(first)]]
    assert [r.citation for r in cited] == ["memory/notes.md#L1", "memory/notes.md#L2"]
    assert sum(len(r.snippet) for r in cited) == 100


def test_budget_without_citations_is_just_the_trim() -> None:
    results = [result("a" * 60), result("b" * 60)]
    assert apply_citations(results, "off", max_injected_chars=100) == trim_to_budget(results, 100)


# --------------------------------------------------------------------------- properties

snippet_lists = st.lists(st.text(max_size=40), max_size=8)


@given(snippet_lists, st.integers(min_value=1, max_value=200))
def test_trimmed_snippets_fit_the_budget_and_are_prefixes_in_order(
    snippets: list[str], budget: int
) -> None:
    results = [result(s) for s in snippets]
    trimmed = trim_to_budget(results, budget)
    assert sum(len(r.snippet) for r in trimmed) <= budget
    assert len(trimmed) <= len(results)
    for kept, original in zip(trimmed[:-1], results, strict=False):
        assert kept == original
    if trimmed:
        assert results[len(trimmed) - 1].snippet.startswith(trimmed[-1].snippet)


@given(snippet_lists, st.integers(min_value=1, max_value=200))
def test_trimming_twice_changes_nothing(snippets: list[str], budget: int) -> None:
    once = trim_to_budget([result(s) for s in snippets], budget)
    assert trim_to_budget(once, budget) == once


@given(
    snippet_lists, st.sampled_from(get_args(CitationsMode)), st.integers(min_value=1, max_value=300)
)
def test_applied_results_never_exceed_the_budget(
    snippets: list[str], mode: CitationsMode, budget: int
) -> None:
    out = apply_citations([result(s) for s in snippets], mode, max_injected_chars=budget)
    assert sum(len(r.snippet) for r in out) <= budget


@given(snippet_lists)
def test_decorate_off_is_the_identity_on_uncited_results(snippets: list[str]) -> None:
    results = [result(s) for s in snippets]
    assert decorate(results, include=False) == results
