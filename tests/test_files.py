"""What is memory: discovery rules and the memory_get path policy, on real files and symlinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memoryd.builtin_index._files import discover, resolve_get_path, slice_lines
from memoryd.errors import PathNotAllowed


def write(p: Path, text: str = "x\n") -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def rels(ws: Path, extra: list[str] | None = None) -> list[str]:
    return sorted(f.rel_path for f in discover(ws, extra))


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
    ],
)
def test_get_refuses_paths_outside_memory(workspace: Path, requested: str, message: str) -> None:
    with pytest.raises(PathNotAllowed, match=message):
        resolve_get_path(workspace, [], requested)


def test_get_refuses_symlinks_and_directories(workspace: Path, tmp_path: Path) -> None:
    write(tmp_path / "out" / "s.md")
    os.symlink(tmp_path / "out" / "s.md", workspace / "memory" / "l.md")
    os.symlink(tmp_path / "out", workspace / "memory" / "ld")
    (workspace / "memory" / "dir.md").mkdir()
    for path in ("memory/l.md", "memory/ld/s.md"):
        with pytest.raises(PathNotAllowed, match="symlink"):
            resolve_get_path(workspace, [], path)
    with pytest.raises(PathNotAllowed, match="directory"):
        resolve_get_path(workspace, [], "memory/dir.md")


def test_get_allows_memory_files_extra_paths_and_missing_files(
    workspace: Path, tmp_path: Path
) -> None:
    ext = write(tmp_path / "ext" / "c.md")
    assert resolve_get_path(workspace, [], "memory/2026-01-01.md")[1] == "memory/2026-01-01.md"
    assert resolve_get_path(workspace, [], "MEMORY.md")[1] == "MEMORY.md"
    assert resolve_get_path(workspace, [str(tmp_path / "ext")], str(ext))[0] == ext
    with pytest.raises(PathNotAllowed, match="escapes"):
        resolve_get_path(workspace, [str(tmp_path / "ext")], str(tmp_path / "ext" / ".." / "x.md"))


@pytest.mark.parametrize(
    ("frm", "n", "expected"),
    [
        (None, None, "a\nb\nc\n"),
        (2, None, "b\nc\n"),
        (2, 1, "b\n"),
        (1, 0, ""),
        (4, None, ""),
        (9, 2, ""),
    ],
)
def test_slice_lines(frm: int | None, n: int | None, expected: str) -> None:
    assert slice_lines("a\nb\nc\n", frm, n) == expected
