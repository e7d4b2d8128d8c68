"""Snippet windows memoryd cuts for qmd's hits, and finding a hit's line in an edited file (pure)."""

from __future__ import annotations

import hashlib

import pytest

from memoryd.core.ranking import select_snippet
from memoryd.qmd_adapter._snippets import content_docid, file_lines, hit_windows, refind_line


def conversation(n: int = 60) -> list[str]:
    lines = ["# 1:56 pm on 8 May, 2023", ""]
    for i in range(n):
        speaker = "Caroline" if i % 2 else "Melanie"
        lines.append(f"{speaker}: turn {i} says something about the weather and the kids.")
    if n > 30:
        lines[30] = "Caroline: I went to a LGBTQ support group yesterday and it was so powerful."
        lines[31] = "Melanie: Wow, what happened that was so awesome?"
    return lines


def test_the_window_is_the_built_in_index_window_with_exact_lines() -> None:
    lines = conversation()
    (text, first, last), more = hit_windows(
        lines, 31, "When did Caroline go to the LGBTQ support group?", 700, continuation=True
    )
    assert len(text) <= 700
    assert text.split("\n") == lines[first - 1 : last]  # exact 1-based lines
    assert first <= 31 <= last
    # the same window the built-in index cuts from that text
    assert (text, first, last) == select_snippet(
        "\n".join(lines), 1, len(lines), "When did Caroline go to the LGBTQ support group?", 700
    )
    # the best hit's continuation: the lines right after, within the cap
    more_text, more_first, more_last = more
    assert more_first == last + 1 and len(more_text) <= 700
    assert more_text.split("\n") == lines[more_first - 1 : more_last]


def test_a_small_file_is_one_window_and_nothing_follows_it() -> None:
    lines = ["# Notes", "", "The zeppelin budget belongs to Carol."]
    assert hit_windows(lines, 3, "zeppelin budget", 700, continuation=True) == [
        ("# Notes\n\nThe zeppelin budget belongs to Carol.", 1, 3)
    ]


def test_the_window_is_chosen_near_qmds_line_in_a_long_file() -> None:
    # the same words far apart: the window comes from qmd's chunk, around its line
    filler = [
        f"filler line {i} about nothing in particular, padded to some length." for i in range(400)
    ]
    lines = ["kerosene rocket fuel", *filler, "kerosene rocket fuel", *filler]
    far = len(filler) + 2
    ((_, first, last),) = hit_windows(lines, far, "kerosene rocket", 700)
    assert first <= far <= last
    ((_, first, last),) = hit_windows(lines, 1, "kerosene rocket", 700)
    assert first == 1


@pytest.mark.parametrize("line", [0, -3, 10_000])
def test_a_line_outside_the_file_is_clamped(line: int) -> None:
    lines = conversation(10)
    ((text, first, last),) = hit_windows(lines, line, "weather", 700)
    assert text.split("\n") == lines[first - 1 : last]


def test_a_single_overlong_line_is_cut_to_the_cap() -> None:
    lines = ["x" * 3000 + " needle " + "y" * 3000]
    ((text, first, last),) = hit_windows(lines, 1, "needle", 700)
    assert (first, last) == (1, 1) and len(text) == 700 and "needle" in text


def test_empty_file_has_no_window() -> None:
    assert hit_windows([], 1, "anything", 700) == []


def test_file_lines_do_not_count_the_final_newline() -> None:
    assert file_lines("a\nb\n") == ["a", "b"]
    assert file_lines("a\nb") == ["a", "b"]
    assert file_lines("") == [""]
    assert file_lines("\n\n") == ["", ""]


def test_the_docid_is_qmds_content_hash_prefix() -> None:
    data = b"# Notes\n\nzeppelin\n"
    assert content_docid(data) == hashlib.sha256(data).hexdigest()[:6]


def qmd_snippet(lines: list[str], start: int, count: int = 4, cut: int = 40) -> str:
    """A snippet as qmd prints it: `@@ -S,C @@`, the lines, the last one cut with `...`."""
    shown = lines[start - 1 : start - 1 + count]
    shown[-1] = shown[-1][:cut] + "..."
    return f"@@ -{start},{count} @@ ({start - 1} before, 0 after)\n" + "\n".join(shown)


SNIPPET = qmd_snippet(conversation(), 30)


def test_an_edited_file_has_the_hit_found_again_by_its_text() -> None:
    lines = conversation()
    assert "LGBTQ" in lines[31 - 1]
    edited = ["# new heading", "", "three lines", "added above", "", *lines]
    assert refind_line(edited, 31, SNIPPET) == 31 + 5
    assert refind_line(lines, 31, SNIPPET) == 31  # unchanged: where it was


def test_a_truncated_last_snippet_line_matches_as_a_prefix() -> None:
    lines = conversation()
    # every shown line is gone but the one qmd cut short (line 33), now one line higher
    kept = [ln for i, ln in enumerate(lines, 1) if i not in (29, 30, 31, 32)]
    assert lines[33 - 1] == kept[29 - 1]
    assert refind_line(kept, 31, SNIPPET) == 29 - 2  # the hit's line keeps its distance


def test_a_hit_whose_text_is_gone_is_not_found() -> None:
    assert refind_line(["# other", "", "nothing alike"], 31, SNIPPET) is None
    assert refind_line(conversation(), 31, None) is None
    assert refind_line(conversation(), 31, "no header\nat all") is None


def test_the_nearest_copy_of_a_repeated_line_wins() -> None:
    line = "Caroline: I went to a LGBTQ support group yesterday and it was so powerful."
    lines = [line, *["-"] * 50, line, *["-"] * 50, line]
    snippet = f"@@ -52,1 @@\n{line}"
    assert refind_line(lines, 52, snippet) == 52
    assert refind_line(lines, 100, f"@@ -100,1 @@\n{line}") == 103
