"""qmd output parsing: search JSON (clean, noisy, empty, garbage), snippet headers, listings, errors."""

from __future__ import annotations

import json

import pytest

from memoryd.errors import QmdBadOutput
from memoryd.qmd_adapter._collections import CollectionSpec
from memoryd.qmd_adapter._parse import (
    is_busy_error,
    is_collection_exists_error,
    is_missing_collection_error,
    parse_collection_list,
    parse_collection_show,
    parse_search_output,
    parse_snippet,
)

HIT = {
    "docid": "#cef932",
    "score": 0.52,
    "file": "qmd://memory-root-main/MEMORY.md",
    "line": 3,
    "title": "Memory",
    "snippet": "@@ -2,4 @@ (1 before, 1 after)\n\nAlice likes green tea.\n",
}
CLEAN = json.dumps([HIT], indent=2)


@pytest.mark.parametrize(
    ("stdout", "files"),
    [
        (CLEAN, ["qmd://memory-root-main/MEMORY.md"]),
        ("[]", []),
        ("[]\n", []),
        ("No results found.\n", []),
        ("No results found for 'zebra'", []),
        ("\x1b[?25l" + CLEAN + "\x1b[?25h", ["qmd://memory-root-main/MEMORY.md"]),
        (
            "CUDA warning: no device [0]\nLoading [=====] 100%\n" + CLEAN + "\nDone.",
            ["qmd://memory-root-main/MEMORY.md"],
        ),
        ("warning: cache [] is empty\n" + CLEAN, ["qmd://memory-root-main/MEMORY.md"]),
        (json.dumps([{"score": 0.1, "docid": "#abcdef"}]), [None]),
        (json.dumps([HIT, {"score": "high"}]), ["qmd://memory-root-main/MEMORY.md"]),
        (
            json.dumps([{**HIT, "context": "daily notes", "explain": {"x": 1}}]),
            ["qmd://memory-root-main/MEMORY.md"],
        ),
    ],
    ids=[
        "clean",
        "empty-array",
        "empty-array-newline",
        "no-results-text",
        "no-results-with-query",
        "escape-codes-around",
        "noisy-lines-around",
        "stray-empty-array-before-results",
        "docid-only",
        "one-bad-entry-skipped",
        "unknown-fields-ignored",
    ],
)
def test_search_output_is_parsed_defensively(stdout: str, files: list[str | None]) -> None:
    assert [h.file for h in parse_search_output(stdout)] == files


@pytest.mark.parametrize(
    "stdout",
    [
        "",
        "   \n",
        "Segmentation fault",
        '{"error": "boom"}',
        "[1, 2, 3]",
        json.dumps([{"score": "high"}]),
        json.dumps([{"score": 0.3, "title": "no file no docid"}]),
        '[{"score": 0.5, "file": ',
    ],
    ids=[
        "empty",
        "blank",
        "garbage",
        "object",
        "array-of-numbers",
        "all-invalid",
        "no-location",
        "truncated",
    ],
)
def test_unusable_search_output_raises_bad_output(stdout: str) -> None:
    with pytest.raises(QmdBadOutput):
        parse_search_output(stdout)


def test_hit_fields_are_validated_and_kept() -> None:
    (hit,) = parse_search_output(CLEAN)
    assert (hit.score, hit.docid, hit.line) == (0.52, "#cef932", 3)


@pytest.mark.parametrize(
    ("snippet", "text", "start"),
    [
        ("@@ -2,4 @@ (1 before, 1 after)\n\nAlice\nBob\n", "\nAlice\nBob\n", 2),
        ("@@ -10,1 @@\nonly line", "only line", 10),
        ("@@ -7 @@ (0 before, 0 after)\nx", "x", 7),
        ("@@ -1,3 @@", "", 1),
        ("@@ -0,2 @@\na\nb", "a\nb", 1),
        ("no header here", "no header here", None),
        ("@@ broken @@\nx", "@@ broken @@\nx", None),
    ],
)
def test_snippet_header_gives_its_first_line(snippet: str, text: str, start: int | None) -> None:
    assert parse_snippet(snippet) == (text, start)


LIST_OUTPUT = """Collections (2):

memory-root-main (qmd://memory-root-main/)
  Pattern:  MEMORY.md
  Files:    1
  Updated:  0s ago

custom-notes-1a2b3c-main (qmd://custom-notes-1a2b3c-main/)
  Pattern:  **/*.md
  Files:    1
"""


def test_collection_list_gives_names() -> None:
    assert parse_collection_list(LIST_OUTPUT) == ["memory-root-main", "custom-notes-1a2b3c-main"]
    assert parse_collection_list("No collections found. Run 'qmd collection add .'\n") == []


def test_collection_show_gives_path_and_pattern() -> None:
    text = "Collection: memory-dir-main\n  Path:     /ws/my memory\n  Pattern:  **/*.md\n  Include:  yes (default)\n"
    assert parse_collection_show(text) == CollectionSpec(
        "memory-dir-main", "/ws/my memory", "**/*.md"
    )
    assert parse_collection_show("Collection: x\n") is None


@pytest.mark.parametrize(
    ("check", "stderr", "expected"),
    [
        (is_missing_collection_error, "Collection not found: memory-root-main", True),
        (is_missing_collection_error, 'Error: No model file found at "/x.gguf"', False),
        (is_collection_exists_error, "Collection 'memory-dir-a' already exists.", True),
        (
            is_collection_exists_error,
            "A collection already exists for this path and pattern:",
            True,
        ),
        (is_busy_error, "SqliteError: database is locked", True),
        (is_busy_error, "SQLITE_BUSY: cannot commit", True),
        (is_busy_error, "Collection not found", False),
    ],
)
def test_error_kinds_are_recognized_from_stderr(check, stderr: str, expected: bool) -> None:  # type: ignore[no-untyped-def]
    assert check(stderr) is expected
