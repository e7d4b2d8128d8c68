"""What is memory on disk: discovery by the layout rule and the memory_get reads, on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import agent_for, write
from memoryd.core.layout import (
    MAX_GET_CHARS,
    MemoryRoot,
    default_roots,
    extra_root,
    page_lines,
)
from memoryd.errors import PathNotAllowed
from memoryd.memfiles import discover, read_memory_file


def rels(ws: Path, extra: list[str] | None = None) -> list[str]:
    agent = agent_for(ws, {"extraPaths": extra or []})
    return sorted(f.rel_path for f in discover(agent.memory_roots(), ws))


def get(ws: Path, path: str, roots: list[MemoryRoot] | None = None) -> tuple[str, str]:
    got = read_memory_file(roots or default_roots(str(ws)), ws, path)
    return got.path, got.text


def test_default_memory_files(workspace: Path) -> None:
    write(workspace / "MEMORY.md")
    write(workspace / "memory" / "2026-11-29.md")
    write(workspace / "memory" / "2026-11-29-reset.md")
    write(workspace / "memory" / "projects" / "alpha.md")
    write(workspace / "memory" / "notes.txt")
    write(workspace / "README.md")  # not memory
    assert rels(workspace) == [
        "MEMORY.md",
        "memory/2026-11-29-reset.md",
        "memory/2026-11-29.md",
        "memory/projects/alpha.md",
    ]


def test_noise_folders_are_skipped(workspace: Path) -> None:
    for d in (".git", "node_modules", "__pycache__", ".venv"):
        write(workspace / "memory" / d / "x.md")
    write(workspace / "memory" / "env" / "pyvenv.cfg")
    write(workspace / "memory" / "env" / "y.md")
    write(workspace / "memory" / "kept.md")
    assert rels(workspace) == ["memory/kept.md"]


def test_symlinks_are_ignored_at_every_level(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside / "secret.md")
    write(workspace / "memory" / "real.md")
    os.symlink(outside / "secret.md", workspace / "memory" / "link.md")
    os.symlink(outside, workspace / "memory" / "linkdir")
    # a symlinked root: memory/ itself
    ws2 = tmp_path / "ws2"
    ws2.mkdir()
    os.symlink(outside, ws2 / "memory")
    os.symlink(outside / "secret.md", ws2 / "MEMORY.md")
    assert rels(workspace) == ["memory/real.md"]
    assert rels(ws2) == []
    # extra paths: symlinked root and intermediate folder
    os.symlink(outside, workspace / "notes-link")
    (workspace / "real-notes").mkdir()
    os.symlink(outside, workspace / "real-notes" / "sub")
    assert rels(workspace, ["notes-link", "real-notes/sub/secret.md"]) == ["memory/real.md"]


def test_hard_links_and_deep_folders_are_left_out(workspace: Path, tmp_path: Path) -> None:
    outside = write(tmp_path / "outside.md", "secret\n")
    os.link(outside, workspace / "memory" / "linked.md")
    deep = workspace / "memory"
    for i in range(80):
        deep = deep / f"d{i}"
    write(deep / "too-deep.md")
    write(workspace / "memory" / "a" / "b" / "ok.md")
    assert rels(workspace) == ["memory/a/b/ok.md"]


def test_extra_paths_relative_absolute_home_and_overlap(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(workspace / "docs" / "a.md")
    write(workspace / "docs" / "deep" / "b.md")
    ext = write(tmp_path / "ext" / "c.md")
    home = tmp_path / "home"
    write(home / "h.md")
    monkeypatch.setenv("HOME", str(home))
    write(workspace / "memory" / "m.md")
    got = rels(workspace, ["docs", "docs/deep", str(ext), "~/h.md", "memory/m.md", "missing/"])
    assert got == sorted(
        ["docs/a.md", "docs/deep/b.md", ext.as_posix(), (home / "h.md").as_posix(), "memory/m.md"]
    )


@pytest.mark.parametrize(
    ("requested", "message"),
    [
        ("../etc/passwd.md", "escapes"),
        ("memory/../../x.md", "escapes"),
        ("/etc/hosts.md", "not a memory file"),
        ("memory/notes.txt", "not a Markdown"),
        ("README.md", "not a memory file"),
        ("", "empty"),
        ("memory", "not a Markdown"),
        ("memory/.git/notes.md", "not a memory file"),
        ("memory/node_modules/pkg/README.md", "not a memory file"),
    ],
)
def test_get_refuses_paths_outside_memory(workspace: Path, requested: str, message: str) -> None:
    with pytest.raises(PathNotAllowed, match=message):
        get(workspace, requested)


def test_get_refuses_symlinks_hard_links_and_directories(workspace: Path, tmp_path: Path) -> None:
    write(tmp_path / "out" / "s.md")
    os.symlink(tmp_path / "out" / "s.md", workspace / "memory" / "l.md")
    os.symlink(tmp_path / "out", workspace / "memory" / "ld")
    os.link(tmp_path / "out" / "s.md", workspace / "memory" / "hard.md")
    (workspace / "memory" / "dir.md").mkdir()
    for path in ("memory/l.md", "memory/ld/s.md"):
        with pytest.raises(PathNotAllowed, match="symlink"):
            get(workspace, path)
    with pytest.raises(PathNotAllowed, match="hard links"):
        get(workspace, "memory/hard.md")
    with pytest.raises(PathNotAllowed, match="a folder, not a file"):
        get(workspace, "memory/dir.md")


def test_get_allows_memory_files_extra_paths_and_missing_files(
    workspace: Path, tmp_path: Path
) -> None:
    ext = write(tmp_path / "ext" / "c.md", "extra\n")
    roots = [*default_roots(str(workspace)), extra_root(str(tmp_path / "ext"))]
    assert get(workspace, "memory/2026-01-01.md") == ("memory/2026-01-01.md", "")
    write(workspace / "MEMORY.md", "# M\n")
    assert get(workspace, "MEMORY.md") == ("MEMORY.md", "# M\n")
    assert get(workspace, str(ext), roots) == (ext.as_posix(), "extra\n")
    with pytest.raises(PathNotAllowed, match="escapes"):
        get(workspace, str(tmp_path / "ext" / ".." / "x.md"), roots)


def test_memory_get_pages_a_big_note_and_says_where_to_go_on(workspace: Path) -> None:
    line = "x" * 99 + "\n"
    write(workspace / "memory" / "big.md", line * 1000)  # 100 KB
    roots = default_roots(str(workspace))
    first = read_memory_file(roots, workspace, "memory/big.md")
    assert first.truncated and len(first.text) <= MAX_GET_CHARS and first.text.endswith("\n")
    assert first.next_from == 1 + first.text.count("\n")
    rest = read_memory_file(roots, workspace, "memory/big.md", first.next_from)
    assert rest.text.startswith("x") and rest.next_from == (first.next_from or 0) * 2 - 1
    assert first.to_dict()["nextFrom"] == first.next_from and first.to_dict()["truncated"]
    missing = read_memory_file(roots, workspace, "memory/2099-01-01.md")
    assert missing.to_dict() == {"path": "memory/2099-01-01.md", "text": "", "missing": True}
    past = read_memory_file(roots, workspace, "memory/big.md", 5000)
    assert past.text == "" and past.past_end


@pytest.mark.parametrize(
    ("text", "frm", "n", "out", "cut", "nxt"),
    [
        ("a\nb\nc\n", None, None, "a\nb\nc\n", False, None),
        ("a\nb\nc\n", 2, 1, "b\n", False, None),
        ("a\nb\nc\n", 3, 5, "c\n", False, None),
        ("aaaa\nbbbb\ncccc\n", 1, None, "aaaa\nbbbb\n", True, 3),
        ("aaaaaaaaaaaaaa\nb\n", 1, None, "aaaaaaaaaa", True, 2),
    ],
)
def test_pages_keep_whole_lines_under_the_cap(
    text: str, frm: int | None, n: int | None, out: str, cut: bool, nxt: int | None
) -> None:
    page = page_lines(text, frm, n, max_chars=10)
    assert (page.text, page.truncated, page.next_from) == (out, cut, nxt)
