"""What is memory on disk: discovery by the layout rule and the memory_get reads, on real files."""

from __future__ import annotations

import itertools
import json
import os
import random
import tracemalloc
from pathlib import Path

import pytest

from helpers import agent_for, write
from memoryd.core.layout import (
    MAX_GET_CHARS,
    MAX_GET_LINES,
    MemoryRoot,
    _page,
    default_roots,
    extra_root,
    page_blocks,
)
from memoryd.core.results import FileText
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


def page_lines(
    text: str,
    from_line: int | None,
    lines: int | None,
    *,
    max_chars: int = MAX_GET_CHARS,
    max_lines: int = MAX_GET_LINES,
) -> FileText:
    """The page cut from the whole text at once: what `page_blocks` must equal."""
    start = max(1, from_line or 1)
    rest = iter(text.splitlines(keepends=True)[start - 1 :])
    return _page("n.md", rest, start, lines, max_chars, max_lines)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@pytest.mark.parametrize("seed", range(60))
def test_a_page_read_block_by_block_is_the_page_of_the_whole_text(seed: int) -> None:
    # Line breaks of every kind (a "\r\n" may straddle two blocks), multi-byte characters cut
    # between blocks, undecodable bytes and over-long lines: the streamed page must equal the
    # page of the decoded whole, for every window.
    rng = random.Random(seed)
    alphabet = ["a", "é", "語", "\n", "\r\n", "  ", "\xff"]
    if seed % 2:  # the rarer breaks, which the block-by-block scan must not count as "\n"
        alphabet += ["\r", "\u2028", "\x85", "\x0c"]
    pieces = [rng.choice(alphabet) * rng.choice([1, 1, 2, 15]) for _ in range(rng.randint(0, 60))]
    data = "".join(pieces).encode("utf-8", errors="surrogatepass")
    if seed % 3 == 0:
        data = data.replace("\xff".encode(), b"\xff")  # a byte that is not UTF-8
    blocks = _split(data, [rng.randint(0, len(data)) for _ in range(rng.randint(0, 40))])
    text = data.decode("utf-8", errors="replace")
    for frm in (None, 1, 2, 3, 7, 40, 200):
        for n in (None, 1, 2, 5):
            for cap in (3, 10, 10_000):
                whole = page_lines(text, frm, n, max_chars=cap, max_lines=4)
                streamed = page_blocks("n.md", iter(blocks), frm, n, max_chars=cap, max_lines=4)
                assert streamed == whole, (blocks, frm, n, cap)


def test_memory_get_of_a_50_mb_note_reads_a_page_not_the_file(workspace: Path) -> None:
    # One 50 MB note (the issue: 53 MB of JSON, 208 MB RSS): the answer is one page, and the
    # read holds a block and the page, never the file, wherever the page starts.
    line = "the deploy moved to fly.io and the webhook secret was rotated today\n"
    note = workspace / "memory" / "2026-11-01.md"
    note.parent.mkdir(parents=True, exist_ok=True)
    with note.open("w") as out:
        out.write(line * (50_000_000 // len(line)))
        out.write("x" * 3_000_000 + "\n")  # and one over-long line at the end
    total_lines = 50_000_000 // len(line) + 1
    roots = default_roots(str(workspace))
    for frm, want_lines in ((None, 20_000 // len(line)), (total_lines - 2, 2)):
        tracemalloc.start()
        try:
            got = read_memory_file(roots, workspace, "memory/2026-11-01.md", frm)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert got.text.count("\n") == want_lines and got.truncated
        assert len(json.dumps(got.to_dict())) < 2 * MAX_GET_CHARS
        assert peak < 8_000_000, f"peak {peak / 1e6:.1f} MB for a 53 MB note"
    last = read_memory_file(roots, workspace, "memory/2026-11-01.md", total_lines)
    assert last.text == "x" * MAX_GET_CHARS and last.truncated and last.next_from == total_lines + 1
