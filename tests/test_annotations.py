"""OpenClaw's curated-memory annotations (`core.annotations`): the parse, the multiplier, the
entry a chunk's multiplier comes from, and the guard that keeps abstention."""

from __future__ import annotations

import pytest

from memoryd.core.annotations import (
    chunk_multiplier,
    entries,
    entry_importance,
    importance_multiplier,
)
from memoryd.core.ranking import Candidate, apply_importance


def importance(*lines: str, path: str = "MEMORY.md") -> int | None:
    return entry_importance(list(lines), path=path)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("- fact <!-- importance: 9 -->", 9),
        ("- fact <!--IMPORTANCE:7-->", 7),  # the opener ignores case and spaces
        ("- fact <!-- importance: 03 -->", 3),  # digits, leading zeros allowed
        ("- fact <!-- importance: 10 -->  ", 10),  # trailing spaces still end in -->
        ("- fact <!-- importance: 11 -->", None),  # out of 1..10: ignored
        ("- fact <!-- importance: 0 -->", None),
        ("- fact <!-- importance: 2.5 -->", None),  # not an integer
        ("- fact <!-- importance: -3 -->", None),
        ("- fact <!-- importance: nine -->", None),
        ("- fact <!-- importance: 9 --> and more text", None),  # not at the line's end
        ("- fact <!-- importance: 9", None),  # never closed
        ("- fact <!-- note: 9 -->", None),  # another comment
    ],
)
def test_importance_is_read_as_openclaw_reads_it(line: str, expected: int | None) -> None:
    assert importance(line) == expected


def test_the_highest_importance_of_an_entry_wins() -> None:
    assert importance("- a fact <!-- importance: 4 -->", "  more of it <!-- importance: 8 -->") == 8
    assert importance("- x <!-- importance: 6 --> <!-- importance: 2 -->") == 6


def test_trigger_and_project_annotations_do_not_rank() -> None:
    line = "- x <!-- trigger: importance: 9 --> <!-- project: github.com/acme/app -->"
    assert importance(line) is None
    assert importance("- x <!-- trigger: deploy --> <!-- importance: 7 -->", path="USER.md") == 7


@pytest.mark.parametrize(
    "path", ["memory/2026-11-29.md", "memory/topics.md", "notes/MEMORY.md", "/srv/x/USER.md"]
)
def test_only_the_curated_root_files_carry_annotations(path: str) -> None:
    assert importance("- x <!-- importance: 9 --> <!-- trigger: a -->", path=path) is None


@pytest.mark.parametrize(
    ("importance", "multiplier"),
    [(None, 1.0), (1, 0.80), (5, 1.0), (9, 1.20), (10, 1.25), (0, 0.80), (99, 1.25)],
)
def test_the_multiplier_is_openclaws(importance: int | None, multiplier: float) -> None:
    assert importance_multiplier(importance) == pytest.approx(multiplier)


def test_entries_are_list_items_headings_and_paragraphs() -> None:
    text = (
        "# Preferences\n"
        "- Likes green tea <!-- importance: 8 -->\n"
        "  (not after 6 pm)\n"
        "  - nested detail\n"
        "- Hates meetings before 10\n"
        "\n"
        "A paragraph\n"
        "over two lines.\n"
        "1. numbered\n"
    )
    assert entries(text) == [
        ["# Preferences"],
        ["- Likes green tea <!-- importance: 8 -->", "  (not after 6 pm)", "  - nested detail"],
        ["- Hates meetings before 10"],
        ["A paragraph", "over two lines."],
        ["1. numbered"],
    ]


CHUNK = (
    "- The staging database lives in Frankfurt <!-- importance: 9 -->\n"
    "- The office plant needs water on Fridays <!-- importance: 2 -->\n"
    "- Lunch is at noon\n"
)


@pytest.mark.parametrize(
    ("terms", "multiplier"),
    [
        (["staging", "database"], 1.20),  # the entry that holds the query
        (["plant", "water"], 0.85),
        (["lunch"], 1.0),  # an entry without annotation is neutral
        (["nothing"], 1.20),  # no entry holds a term: the highest of the tie
    ],
)
def test_a_chunk_takes_the_multiplier_of_the_entry_holding_the_query(
    terms: list[str], multiplier: float
) -> None:
    assert chunk_multiplier("MEMORY.md", CHUNK, terms) == pytest.approx(multiplier)
    assert chunk_multiplier("memory/x.md", CHUNK, terms) == 1.0


def cand(i: int, path: str, text: str, score: float, source: str = "memory") -> Candidate:
    return Candidate(i, path, source, 1, 1, text, score=score)


def test_importance_scales_scores_but_never_lifts_one_past_min_score() -> None:
    important = "- quarterly budget review <!-- importance: 10 -->"
    minor = "- quarterly budget review <!-- importance: 1 -->"
    cs = [
        cand(1, "MEMORY.md", important, 0.60),
        cand(2, "USER.md", important, 0.30),  # below minScore: a boost would carry it over
        cand(3, "MEMORY.md", minor, 0.50),
        cand(4, "MEMORY.md", minor, 0.30),
        cand(5, "memory/notes.md", important, 0.60),  # not a curated root file
        cand(6, "MEMORY.md", important, 0.60, source="sessions"),
    ]
    apply_importance(cs, "quarterly budget", min_score=0.35)
    assert [c.score for c in cs] == pytest.approx([0.75, 0.30, 0.40, 0.24, 0.60, 0.60])


@pytest.mark.parametrize(
    ("query", "multiplier"),
    [("北京开会", 1.20), ("预算", 0.85), ("deploy rotating", 0.80)],  # CJK bigrams, stems
)
def test_the_query_entry_is_found_in_any_script_and_by_stem(query: str, multiplier: float) -> None:
    from memoryd.core.text import query_terms

    text = (
        "- 我们下周在北京开会 <!-- importance: 9 -->\n"
        "- 预算讨论 <!-- importance: 2 -->\n"
        "- Deploys rotated <!-- importance: 1 -->"
    )
    assert chunk_multiplier("USER.md", text, query_terms(query)) == pytest.approx(multiplier)


def test_triggers_and_projects_do_not_rank() -> None:
    # they drive OpenClaw's prompt injection, which memoryd does not do
    text = "- deploys go to fly.io <!-- trigger: deploy --> <!-- project: github.com/acme/app -->"
    assert chunk_multiplier("MEMORY.md", text, ["deploy"]) == 1.0
