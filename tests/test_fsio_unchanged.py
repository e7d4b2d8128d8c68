"""`fsio.unchanged`: a walk's stamp vouches for exactly what a new walk would find, no more."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import put
from memoryd.core.layout import MemoryRoot, default_roots
from memoryd.fsio import unchanged, walk


@pytest.fixture
def ws(workspace: Path) -> Path:
    put(workspace / "MEMORY.md", "# Memory\nthe kettle is blue\n")
    put(workspace / "memory" / "2026-01-01.md", "# day\nwe moved the server to ams\n")
    put(workspace / "memory" / "projects" / "alpha.md", "# alpha\nowner: dana\n")
    put(workspace / "memory" / "projects" / "notes.txt", "not memory\n")
    return workspace


def roots(ws: Path) -> list[MemoryRoot]:
    return default_roots(str(ws))


def stamps(ws: Path) -> list[object]:
    """Each root's stamp, through JSON as the index stores it."""
    out = []
    for root in roots(ws):
        stamp = walk(root, anchor=ws).stamp
        assert stamp is not None
        out.append(json.loads(json.dumps(stamp)))
    return out


def all_unchanged(ws: Path, before: list[object]) -> bool:
    return all(unchanged(r, s, anchor=ws) for r, s in zip(roots(ws), before, strict=True))


def found(ws: Path) -> list[tuple[str, int, int, int]]:
    return [
        (f.rel.as_posix(), f.ino, f.size, f.mtime_ns)
        for root in roots(ws)
        for f in walk(root, anchor=ws).files
    ]


def test_an_untouched_workspace_is_unchanged_and_walks_to_the_same_stamp(ws: Path) -> None:
    before = stamps(ws)
    assert all_unchanged(ws, before)
    assert all_unchanged(ws, before)  # checking changes nothing
    assert stamps(ws) == before


def _edit_keeping_size(ws: Path) -> None:
    p = ws / "memory" / "2026-01-01.md"
    text = p.read_text()
    with open(p, "r+") as fh:  # in place: same inode, same size
        fh.write(text.replace("ams", "fra"))
    assert p.stat().st_size == len(text)


def _append(ws: Path) -> None:
    with open(ws / "MEMORY.md", "a") as fh:
        fh.write("the kettle moved\n")


def _hard_link(ws: Path) -> None:
    os.link(ws / "memory" / "2026-01-01.md", ws.parent / "outside-link")  # only nlink shows it


def _folder_to_symlink(ws: Path) -> None:
    moved = ws / "projects-moved"
    (ws / "memory" / "projects").rename(moved)
    (ws / "memory" / "projects").symlink_to(moved)


def _venv_marker(ws: Path) -> None:
    (ws / "memory" / "projects" / "pyvenv.cfg").write_text("home = /usr\n")


CHANGES: dict[str, Callable[[Path], object]] = {
    "edit in place, same size": _edit_keeping_size,
    "append": _append,
    "new note": lambda ws: put(ws / "memory" / "2026-01-02.md", "# new\n"),
    "new note in a new folder": lambda ws: put(ws / "memory" / "2026" / "q1.md", "# q1\n"),
    "deleted note": lambda ws: (ws / "memory" / "2026-01-01.md").unlink(),
    "renamed note": lambda ws: (ws / "memory" / "2026-01-01.md").rename(
        ws / "memory" / "2026-01-09.md"
    ),
    "note replaced by a symlink": lambda ws: (
        (ws / "MEMORY.md").unlink(),
        (ws / "MEMORY.md").symlink_to(ws / "memory" / "2026-01-01.md"),
    ),
    "hard link made elsewhere": _hard_link,
    "mode changed": lambda ws: os.chmod(ws / "memory" / "projects" / "alpha.md", 0o600),
    "folder replaced by a symlink": _folder_to_symlink,
    "virtualenv marker added": _venv_marker,
    "memory folder removed": lambda ws: os.rename(ws / "memory", ws / "old-memory"),
    "curated note created": lambda ws: put(ws / "USER.md", "# user\n"),
}


@pytest.mark.parametrize("change", CHANGES)
def test_every_change_a_walk_would_see_makes_the_stamp_stale(ws: Path, change: str) -> None:
    before, seen = stamps(ws), found(ws)
    CHANGES[change](ws)
    assert not all_unchanged(ws, before)
    assert found(ws) != seen or stamps(ws) != before  # a new walk does see something new


def test_a_new_file_that_is_not_memory_also_counts_as_a_change(ws: Path) -> None:
    # the stamp compares whole listings: a rename into a memory name must never slip through
    before = stamps(ws)
    put(ws / "memory" / "draft.txt", "later\n")
    assert not all_unchanged(ws, before)
    (ws / "memory" / "draft.txt").rename(ws / "memory" / "draft.md")
    assert not all_unchanged(ws, before)


def test_a_stamp_of_another_shape_vouches_for_nothing(ws: Path) -> None:
    root = roots(ws)[-1]  # memory/**/*.md
    good = json.loads(json.dumps(walk(root, anchor=ws).stamp))
    assert unchanged(root, good, anchor=ws)
    for bad in (None, "missing", [], {}, {**good, "dirs": []}, {**good, "mounts": ["x"]}):
        assert not unchanged(root, bad, anchor=ws)
    first = good["dirs"][0]
    assert not unchanged(root, {**good, "dirs": [[*first[:3], {"a": "f"}]]}, anchor=ws)


def test_a_missing_root_stays_vouched_for_until_it_appears(workspace: Path) -> None:
    root = MemoryRoot(str(workspace / "extra"), "**/*.md")
    stamp = walk(root, anchor=workspace).stamp
    assert stamp == "missing" and unchanged(root, stamp, anchor=workspace)
    put(workspace / "extra" / "a.md", "# a\n")
    assert not unchanged(root, stamp, anchor=workspace)
