"""The one rule of which files are memory (`core.layout`): roots, globs, memory_get's lexical policy."""

from __future__ import annotations

from datetime import date
from pathlib import PurePosixPath

import pytest

from memoryd.core.layout import (
    MemoryRoot,
    check_line_range,
    daily_note_rel,
    default_roots,
    display_path,
    extra_root,
    glob_match,
    is_daily_note_of,
    locate,
    note_date,
)
from memoryd.errors import InvalidInput, PathNotAllowed

WS = "/ws"
ROOTS = [
    *default_roots(WS),
    extra_root("/srv/notes"),
    MemoryRoot("/srv/handbook", "policies/*.md", name="handbook-main"),
    MemoryRoot("/state/qmd/sessions", "**/*.md", source="sessions", name="sessions-main"),
]


@pytest.mark.parametrize(
    ("path", "pattern", "ok"),
    [
        ("MEMORY.md", "MEMORY.md", True),
        ("memory.md", "MEMORY.md", False),
        ("a.md", "**/*.md", True),
        ("a/b/c.md", "**/*.md", True),
        ("a/b/c.txt", "**/*.md", False),
        ("a/b.md", "*.md", False),
        ("x/notes/y.md", "**/notes/*.md", True),
    ],
)
def test_masks_match_like_qmd(path: str, pattern: str, ok: bool) -> None:
    assert glob_match(PurePosixPath(path), pattern) is ok


@pytest.mark.parametrize(
    ("requested", "root_path", "rel"),
    [
        ("MEMORY.md", "/ws", "MEMORY.md"),
        ("memory.md", "/ws", "memory.md"),
        ("USER.md", "/ws", "USER.md"),
        ("memory/2026-11-29.md", "/ws/memory", "2026-11-29.md"),
        ("memory/projects/a.MD", "/ws/memory", "projects/a.MD"),
        ("/ws/memory/x.md", "/ws/memory", "x.md"),
        ("/srv/notes/deep/n.md", "/srv/notes", "deep/n.md"),
        ("qmd/handbook-main/policies/leave.md", "/srv/handbook", "policies/leave.md"),
        ("/srv/handbook/policies/leave.md", "/srv/handbook", "policies/leave.md"),
        ("memory\\windows\\style.md", "/ws/memory", "windows/style.md"),
    ],
)
def test_memory_files_are_located_in_their_root(requested: str, root_path: str, rel: str) -> None:
    root, got = locate(requested, ROOTS, workspace=WS)
    assert (root.path, got.as_posix()) == (root_path, rel)


@pytest.mark.parametrize(
    ("requested", "message"),
    [
        ("", "empty"),
        ("a\x00.md", "empty or invalid"),
        ("../etc/passwd.md", "escapes"),
        ("memory/../../x.md", "escapes"),
        ("memory/notes.txt", "not a Markdown"),
        ("README.md", "not a memory file"),
        ("user.md", "not a memory file"),
        ("memory/../USER.md", "escapes"),
        ("docs/private.md", "not a memory file"),
        ("/etc/hosts.md", "not a memory file"),
        ("memory/.git/notes.md", "not a memory file"),
        ("memory/node_modules/pkg/README.md", "not a memory file"),
        ("/srv/handbook/README.md", "not a memory file"),
        ("qmd/handbook-main/other/x.md", "not one of this agent's memory files"),
        ("qmd/nope/x.md", "unknown qmd collection"),
        ("qmd/sessions-main/abc.md", "session transcripts"),
        ("/state/qmd/sessions/abc.md", "session transcripts"),
        ("x" * 5000 + ".md", "too long"),
    ],
)
def test_everything_else_is_refused(requested: str, message: str) -> None:
    with pytest.raises(PathNotAllowed, match=message):
        locate(requested, ROOTS, workspace=WS)


def test_display_paths_are_workspace_relative_or_qmd_or_absolute() -> None:
    root, rel = locate("memory/a.md", ROOTS, workspace=WS)
    assert display_path(root, rel, workspace=WS) == "memory/a.md"
    root, rel = locate("qmd/handbook-main/policies/x.md", ROOTS, workspace=WS)
    assert display_path(root, rel, workspace=WS) == "qmd/handbook-main/policies/x.md"
    root, rel = locate("/srv/notes/n.md", ROOTS, workspace=WS)
    assert display_path(root, rel, workspace=WS) == "/srv/notes/n.md"


def test_an_extra_file_is_a_root_of_its_own() -> None:
    root = extra_root("/srv/one[1].md")
    assert root.path == "/srv" and root.accepts(PurePosixPath("one[1].md"))
    assert not root.accepts(PurePosixPath("one1.md"))


@pytest.mark.parametrize(
    ("frm", "lines", "ok"),
    [
        (None, None, True),
        (1, 1, True),
        (0, None, False),
        (-3, None, False),
        (None, 0, False),
        (True, None, False),
    ],
)
def test_line_ranges_are_one_based(frm: int | None, lines: int | None, ok: bool) -> None:
    if ok:
        check_line_range(frm, lines)
    else:
        with pytest.raises(InvalidInput):
            check_line_range(frm, lines)


def test_daily_note_names() -> None:
    day = date(2026, 11, 29)
    assert daily_note_rel(day) == "memory/2026-11-29.md"
    assert is_daily_note_of("2026-11-29.md", day) and is_daily_note_of("2026-11-29-reset.md", day)
    assert not is_daily_note_of("2026-11-290.md", day) and not is_daily_note_of(
        "2026-11-28.md", day
    )
    assert note_date("memory/2026-01-15-trip.md") == date(2026, 1, 15)
    assert note_date("memory/2026-02-30.md") is None and note_date("MEMORY.md") is None
