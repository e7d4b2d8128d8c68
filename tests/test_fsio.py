"""memoryd.fsio: which files memory is on a real file system, all-or-nothing appends, private state.

The rule table builds each case on disk (symlinks at every level, hard links, FIFOs, sockets,
devices, skipped folders, odd names) and states what `walk`, `read_file` and `append_file` do
with it. Appends are cut short for real (`RLIMIT_FSIZE`, a full tmpfs); private modes are checked
under umask 022 and by reading as another user.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import pytest

from memoryd.builtin_index._sqlite_util import make_private
from memoryd.core.layout import MAX_DEPTH, MemoryRoot
from memoryd.errors import MemoryWriteFailed, PathNotAllowed, StateError
from memoryd.fsio import (
    append_file,
    private_dir,
    private_file,
    read_file,
    walk,
    write_private_atomic,
)
from memoryd.fsio._chain import Reason
from second_user import as_nobody, needs_root

SECRET = b"OUTSIDE-SECRET\n"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def write(path: Path, data: bytes = b"# note\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every regular file under `folder` (not following links) with its bytes."""
    out: dict[str, bytes] = {}
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                out[str(p.relative_to(folder))] = p.read_bytes()
    return out


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    write(folder / "secret.md", SECRET)
    write(folder / "dir" / "note.md", SECRET)
    return folder


def memory_root(ws: Path) -> MemoryRoot:
    return MemoryRoot(str(ws / "memory"), "**/*.md")


# --------------------------------------------------------------------------- the rule table

Outcome = Literal["served", "refused", "missing"]


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Path, Path], None]  # (workspace, outside)
    rel: str
    read: Outcome
    listed: bool = False
    reported: tuple[tuple[str, Reason], ...] = ()  # what walk's `skipped` says, exactly
    root: Callable[[Path], MemoryRoot] = memory_root

    def __str__(self) -> str:
        return self.id


def note(rel: str, data: bytes = b"# note\n") -> Callable[[Path, Path], None]:
    def build(ws: Path, outside: Path) -> None:
        write(ws / "memory" / rel, data)

    return build


def link(rel: str, target: str) -> Callable[[Path, Path], None]:
    def build(ws: Path, outside: Path) -> None:
        path = ws / "memory" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(outside / target)

    return build


def hard_link_outside(ws: Path, outside: Path) -> None:
    os.link(outside / "secret.md", ws / "memory" / "hard.md")


def hard_link_inside(ws: Path, outside: Path) -> None:
    one = write(ws / "memory" / "one.md")
    os.link(one, ws / "memory" / "two.md")


def fifo(ws: Path, outside: Path) -> None:
    os.mkfifo(ws / "memory" / "pipe.md")


def unix_socket(ws: Path, outside: Path) -> None:
    # bind by a relative name: the absolute path may exceed sun_path's 108 bytes
    cwd = os.getcwd()
    os.chdir(ws / "memory")
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind("sock.md")
    finally:
        os.chdir(cwd)


def char_device(ws: Path, outside: Path) -> None:
    try:
        os.mknod(ws / "memory" / "null.md", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError as err:
        pytest.skip(f"cannot create a device node here ({err.strerror}); needs CAP_MKNOD")


def venv(ws: Path, outside: Path) -> None:
    write(ws / "memory" / "env" / "pyvenv.cfg", b"home = /usr/bin\n")
    write(ws / "memory" / "env" / "lib" / "x.md")


def symlinked_memory(ws: Path, outside: Path) -> None:
    (ws / "memory").rmdir()
    (ws / "memory").symlink_to(outside / "dir", target_is_directory=True)


def symlinked_long_term(ws: Path, outside: Path) -> None:
    (ws / "MEMORY.md").symlink_to(outside / "secret.md")


def folder_named_like_a_note(ws: Path, outside: Path) -> None:
    write(ws / "memory" / "dir.md" / "inner.md")


def symlinked_extra_parent(ws: Path, outside: Path) -> None:
    (ws / "notes").symlink_to(outside, target_is_directory=True)


def elsewhere(link_name: str, target: str) -> Callable[[Path, Path], None]:
    """A configured extra folder outside the workspace: <tmp>/elsewhere/dir/note.md, and a
    symlink <tmp>/<link_name> → <tmp>/<target>."""

    def build(ws: Path, outside: Path) -> None:
        write(ws.parent / "elsewhere" / "dir" / "note.md", b"# extra\n")
        (ws.parent / link_name).symlink_to(ws.parent / target, target_is_directory=True)

    return build


def nothing(ws: Path, outside: Path) -> None:
    pass


def long_term_root(ws: Path) -> MemoryRoot:
    return MemoryRoot(str(ws), "MEMORY.md")


def extra_below_symlink(ws: Path) -> MemoryRoot:
    return MemoryRoot(str(ws / "notes" / "dir"), "**/*.md")


def outside_root_via_symlinked_parent(ws: Path) -> MemoryRoot:
    # the parents of a configured folder outside the workspace are configuration: followed
    return MemoryRoot(str(ws.parent / "via" / "dir"), "**/*.md")


def outside_root_that_is_a_symlink(ws: Path) -> MemoryRoot:
    return MemoryRoot(str(ws.parent / "linked-root"), "**/*.md")


def patterned_root(ws: Path) -> MemoryRoot:
    return MemoryRoot(str(ws / "memory"), "notes/*.md")


NAME_255 = "é" * 126 + ".md"  # 252 + 3 bytes: the longest name ext4 stores
NAME_256 = "a" * 253 + ".md"

CASES = [
    Case("a regular note", note("a.md"), "a.md", "served", listed=True),
    Case("a note in a sub-folder", note("p/q/a.md"), "p/q/a.md", "served", listed=True),
    Case(
        "spaces and unicode in names",
        note("my notes/café ☕ 日本.md"),
        "my notes/café ☕ 日本.md",
        "served",
        listed=True,
    ),
    Case("a 255-byte name", note(NAME_255), NAME_255, "served", listed=True),
    Case("a name longer than 255 bytes", nothing, NAME_256, "refused"),
    Case(
        "a symlinked note",
        link("l.md", "secret.md"),
        "l.md",
        "refused",
        reported=(("l.md", "symlink"),),
    ),
    Case(
        "a dangling symlink",
        link("gone.md", "missing.md"),
        "gone.md",
        "refused",
        reported=(("gone.md", "symlink"),),
    ),
    Case(
        "a symlinked folder (level 1)",
        link("sub", "dir"),
        "sub/note.md",
        "refused",
        reported=(("sub", "symlink"),),
    ),
    Case(
        "a symlinked folder (level 2)",
        link("a/sub", "dir"),
        "a/sub/note.md",
        "refused",
        reported=(("a/sub", "symlink"),),
    ),
    Case(
        "a symlinked folder (level 3)",
        link("a/b/sub", "dir"),
        "a/b/sub/note.md",
        "refused",
        reported=(("a/b/sub", "symlink"),),
    ),
    Case(
        "memory/ itself a symlink",
        symlinked_memory,
        "note.md",
        "refused",
        reported=((".", "symlink"),),
    ),
    Case(
        "MEMORY.md a symlink",
        symlinked_long_term,
        "MEMORY.md",
        "refused",
        reported=(("MEMORY.md", "symlink"),),
        root=long_term_root,
    ),
    Case(
        "an extra folder inside the workspace below a symlink",
        symlinked_extra_parent,
        "note.md",
        "refused",
        reported=((".", "symlink"),),
        root=extra_below_symlink,
    ),
    Case(
        "an extra folder outside the workspace, reached through a symlinked parent",
        elsewhere("via", "elsewhere"),
        "note.md",
        "served",
        listed=True,
        root=outside_root_via_symlinked_parent,
    ),
    Case(
        "an extra folder outside the workspace that is itself a symlink",
        elsewhere("linked-root", "elsewhere/dir"),
        "note.md",
        "refused",
        reported=((".", "symlink"),),
        root=outside_root_that_is_a_symlink,
    ),
    Case(
        "a hard link to an outside file",
        hard_link_outside,
        "hard.md",
        "refused",
        reported=(("hard.md", "hard_link"),),
    ),
    Case(
        "two memory names for one file",
        hard_link_inside,
        "one.md",
        "refused",
        reported=(("one.md", "hard_link"), ("two.md", "hard_link")),
    ),
    Case("a FIFO", fifo, "pipe.md", "refused", reported=(("pipe.md", "special_file"),)),
    Case("a socket", unix_socket, "sock.md", "refused", reported=(("sock.md", "special_file"),)),
    Case(
        "a character device",
        char_device,
        "null.md",
        "refused",
        reported=(("null.md", "special_file"),),
    ),
    Case(".git is never read", note(".git/x.md"), ".git/x.md", "refused"),
    Case("node_modules is never read", note("node_modules/x.md"), "node_modules/x.md", "refused"),
    Case(".venv is never read", note("a/.venv/x.md"), "a/.venv/x.md", "refused"),
    Case("a folder holding pyvenv.cfg is never read", venv, "env/lib/x.md", "refused"),
    Case("a non-Markdown file", note("notes.txt"), "notes.txt", "refused"),
    Case(
        "a file the root's pattern does not select",
        note("other/x.md"),
        "other/x.md",
        "refused",
        root=patterned_root,
    ),
    Case(
        "a file the root's pattern selects",
        note("notes/x.md"),
        "notes/x.md",
        "served",
        listed=True,
        root=patterned_root,
    ),
    Case(
        "a folder named like a note",
        folder_named_like_a_note,
        "dir.md",
        "refused",
    ),
    Case("a note used as a folder", note("a.md"), "a.md/b.md", "refused"),
    Case("a missing note", nothing, "nope.md", "missing"),
    Case("a missing folder", nothing, "no/such/note.md", "missing"),
]


@pytest.fixture
def built(case: Case, workspace: Path, outside: Path) -> tuple[MemoryRoot, Path]:
    case.build(workspace, outside)
    return case.root(workspace), workspace


def _ids(case: Case) -> str:
    return case.id


pytestmark = pytest.mark.timeout(60)


@pytest.mark.timeout(10)  # a FIFO that is opened blocks forever
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_walk_lists_only_what_the_rule_accepts_and_reports_refusals(
    case: Case, built: tuple[MemoryRoot, Path]
) -> None:
    root, ws = built
    result = walk(root, anchor=ws)
    listed = [f.rel for f in result.files]
    assert (PurePosixPath(case.rel) in listed) is case.listed
    assert not any(b"OUTSIDE" in (Path(root.path) / f.rel).read_bytes() for f in result.files)
    reported = {(s.rel.as_posix(), s.reason) for s in result.skipped}
    assert reported == set(case.reported)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_read_file_serves_refuses_or_misses_by_the_rule(
    case: Case, built: tuple[MemoryRoot, Path]
) -> None:
    root, ws = built
    if case.read == "refused":
        with pytest.raises(PathNotAllowed) as refused:
            read_file(root, case.rel, anchor=ws)
        assert "\n" not in str(refused.value)
        return
    got = read_file(root, case.rel, anchor=ws)
    if case.read == "missing":
        assert got is None
        return
    assert got is not None
    on_disk = Path(root.path, case.rel)
    assert got.data == on_disk.read_bytes()
    st = on_disk.stat()
    assert (got.size, got.mtime_ns) == (st.st_size, st.st_mtime_ns)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_append_file_refuses_what_read_refuses_and_never_writes_outside(
    case: Case, built: tuple[MemoryRoot, Path], outside: Path
) -> None:
    root, ws = built
    before = snapshot(outside)
    if case.read == "refused":
        with pytest.raises(PathNotAllowed):
            append_file(root, case.rel, b"appended\n", anchor=ws)
        assert snapshot(outside) == before
        assert not (outside / "missing.md").exists()  # a dangling link's target is never made
        return
    old = Path(root.path, case.rel).read_bytes() if case.read == "served" else b""
    outcome = append_file(root, case.rel, b"appended\n", anchor=ws)
    assert outcome.created is (case.read == "missing")
    assert Path(root.path, case.rel).read_bytes() == old + b"appended\n"


@pytest.mark.parametrize(
    "rel",
    ["/etc/passwd.md", "../outside/secret.md", "a/../../x.md", "", ".", "a\x00b.md"],
)
def test_read_and_append_refuse_paths_that_are_not_relative_to_the_root(
    rel: str, workspace: Path, outside: Path
) -> None:
    root = memory_root(workspace)
    with pytest.raises(PathNotAllowed):
        read_file(root, rel, anchor=workspace)
    with pytest.raises(PathNotAllowed):
        append_file(root, rel, b"x\n", anchor=workspace)
    assert snapshot(outside) == {"secret.md": SECRET, "dir/note.md": SECRET}


def test_walk_of_a_missing_root_is_empty_and_quiet(tmp_path: Path) -> None:
    result = walk(MemoryRoot(str(tmp_path / "nowhere" / "memory")), anchor=tmp_path / "nowhere")
    assert (result.files, result.skipped) == ((), ())


def test_walk_of_the_workspace_root_reads_only_its_top_level_for_memory_md(
    workspace: Path,
) -> None:
    write(workspace / "MEMORY.md")
    write(workspace / "sub" / "MEMORY.md")
    write(workspace / "memory" / "MEMORY.md")
    result = walk(MemoryRoot(str(workspace), "MEMORY.md"), anchor=workspace)
    assert [f.rel.as_posix() for f in result.files] == ["MEMORY.md"]


def test_walk_sorts_files_by_their_path_string(workspace: Path) -> None:
    for rel in ("b.md", "a/z.md", "a.md", "a/b/c.md", "c/a.md"):
        write(workspace / "memory" / rel)
    assert [f.rel.as_posix() for f in walk(memory_root(workspace)).files] == [
        "a.md",
        "a/b/c.md",
        "a/z.md",
        "b.md",
        "c/a.md",
    ]


# --------------------------------------------------------------------------- depth


@pytest.fixture
def deep_tree(workspace: Path) -> Iterator[tuple[Path, list[int]]]:
    """memory/d/d/…/d, 1,000 folders deep, with x.md at a few depths; removed bottom-up."""
    depth = 1000
    with_notes = [1, MAX_DEPTH, MAX_DEPTH + 1, depth]
    memory = workspace / "memory"
    folders = [memory]
    for _ in range(depth):
        folders.append(folders[-1] / "d")
        os.mkdir(folders[-1])
    for k in with_notes:
        (folders[k] / "x.md").write_bytes(f"depth {k}\n".encode())
    yield memory, with_notes
    for k in with_notes:
        (folders[k] / "x.md").unlink()
    for folder in reversed(folders[1:]):  # shutil.rmtree recurses and would hit the limit
        os.rmdir(folder)


def test_walk_survives_1000_nested_folders_and_stops_below_max_depth(
    workspace: Path, deep_tree: tuple[Path, list[int]]
) -> None:
    result = walk(memory_root(workspace), anchor=workspace)
    assert sorted(len(f.rel.parts) - 1 for f in result.files) == [1, MAX_DEPTH]
    assert [(s.rel.as_posix().count("d"), s.reason) for s in result.skipped] == [
        (MAX_DEPTH + 1, "too_deep")
    ]


def test_read_file_serves_max_depth_and_refuses_deeper(
    workspace: Path, deep_tree: tuple[Path, list[int]]
) -> None:
    root = memory_root(workspace)
    at_limit = "/".join(["d"] * MAX_DEPTH + ["x.md"])
    got = read_file(root, at_limit, anchor=workspace)
    assert got is not None and got.data == f"depth {MAX_DEPTH}\n".encode()
    with pytest.raises(PathNotAllowed):
        read_file(root, "/".join(["d"] * (MAX_DEPTH + 1) + ["x.md"]), anchor=workspace)


# --------------------------------------------------------------------------- reading limits


@pytest.mark.parametrize(
    ("max_bytes", "data", "truncated"),
    [
        (None, b"0123456789", False),
        (10, b"0123456789", False),
        (4, b"0123", True),
        (0, b"", True),
    ],
)
def test_read_file_reads_at_most_max_bytes_and_says_when_it_cut(
    workspace: Path, max_bytes: int | None, data: bytes, truncated: bool
) -> None:
    write(workspace / "memory" / "n.md", b"0123456789")
    got = read_file(memory_root(workspace), "n.md", anchor=workspace, max_bytes=max_bytes)
    assert got is not None
    assert (got.data, got.truncated, got.size) == (data, truncated, 10)


def test_read_file_reads_files_larger_than_one_chunk(workspace: Path) -> None:
    big = os.urandom(3 * (1 << 20) + 17)
    write(workspace / "memory" / "big.md", big)
    got = read_file(memory_root(workspace), "big.md", anchor=workspace)
    assert got is not None and got.data == big


# --------------------------------------------------------------------------- other OSErrors

_EMFILE_CHILD = textwrap.dedent(
    """
    import json, os, resource, sys
    from memoryd.core.layout import MemoryRoot
    from memoryd.fsio import append_file, read_file, walk
    ws = sys.argv[1]
    root = MemoryRoot(os.path.join(ws, "memory"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    held = []
    try:
        while True:
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    os.close(held.pop())  # one descriptor left: the root opens, the next openat fails
    out = {}
    for name, call in [
        ("read", lambda: read_file(root, "sub/a.md", anchor=ws)),
        ("append", lambda: append_file(root, "sub/a.md", b"x\\n", anchor=ws)),
        ("walk", lambda: [s.reason for s in walk(root, anchor=ws).skipped]),
    ]:
        try:
            out[name] = ["ok", repr(call())]
        except Exception as err:
            out[name] = [type(err).__name__, getattr(err, "code", None)]
    print(json.dumps(out))
    """
)


def test_running_out_of_descriptors_is_a_memoryd_error_not_an_oserror(workspace: Path) -> None:
    write(workspace / "memory" / "sub" / "a.md")
    proc = subprocess.run(
        [sys.executable, "-c", _EMFILE_CHILD, str(workspace)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = json.loads(proc.stdout)
    assert out["read"] == ["MemoryReadFailed", "read_failed"]
    assert out["append"] == ["MemoryWriteFailed", "write_failed"]
    assert out["walk"] == ["ok", "['unreadable']"]


@needs_root
def test_permission_denied_is_a_memoryd_error(shared_base: Path) -> None:
    ws = shared_base / "ws"
    write(ws / "memory" / "private.md")
    os.chmod(ws / "memory" / "private.md", 0o600)
    root = memory_root(ws)
    assert as_nobody(lambda: read_file(root, "private.md", anchor=ws)) == (
        "MemoryReadFailed:read_failed"
    )
    assert as_nobody(lambda: append_file(root, "private.md", b"x\n", anchor=ws)) == (
        "MemoryWriteFailed:write_failed"
    )
    assert as_nobody(lambda: append_file(root, "new.md", b"x\n", anchor=ws)) == (
        "MemoryWriteFailed:write_failed"
    )


# --------------------------------------------------------------------------- appends


def test_append_creates_missing_folders_and_a_new_file_with_its_prefix(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    root = memory_root(ws)
    first = append_file(root, "2026/11-29.md", b"one\n", anchor=ws, new_file_prefix=b"# day\n\n")
    second = append_file(root, "2026/11-29.md", b"two\n", anchor=ws, new_file_prefix=b"# day\n\n")
    assert (ws / "memory" / "2026" / "11-29.md").read_bytes() == b"# day\n\none\ntwo\n"
    assert (first.created, first.bytes_written) == (True, 11)
    assert (second.created, second.bytes_written) == (False, 4)


@pytest.mark.parametrize(
    ("existing", "payload", "expected"),
    [
        (b"", b"x\n", b"# P\n\nx\n"),  # empty counts as new: the prefix goes first
        (b"hand written", b"x\n", b"hand written\nx\n"),  # no trailing newline: one is added
        (b"hand written\n", b"x\n", b"hand written\nx\n"),
        (b"a\n\n", b"x\n", b"a\n\nx\n"),
    ],
)
def test_append_starts_on_a_new_line_and_prefixes_only_an_empty_file(
    workspace: Path, existing: bytes, payload: bytes, expected: bytes
) -> None:
    path = write(workspace / "memory" / "n.md", existing)
    outcome = append_file(
        memory_root(workspace), "n.md", payload, anchor=workspace, new_file_prefix=b"# P\n\n"
    )
    assert path.read_bytes() == expected
    assert outcome.created is False
    assert outcome.bytes_written == len(expected) - len(existing)


def test_append_never_creates_folders_through_a_symlink(workspace: Path, outside: Path) -> None:
    (workspace / "memory" / "sub").symlink_to(outside / "dir", target_is_directory=True)
    with pytest.raises(PathNotAllowed, match="symlink"):
        append_file(memory_root(workspace), "sub/new/n.md", b"x\n", anchor=workspace)
    assert not (outside / "dir" / "new").exists()


_FSIZE_CHILD = textwrap.dedent(
    """
    import json, os, resource, sys
    from memoryd.core.layout import MemoryRoot
    from memoryd.errors import MemoryWriteFailed
    from memoryd.fsio import append_file
    folder, limit, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    payload = b"r" * (size - 1) + b"\\n"
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # Python ignores SIGXFSZ
    out = {}
    try:
        append_file(MemoryRoot(folder), "note.md", payload)
        out["fsio"] = "appended"
    except MemoryWriteFailed as err:
        out["fsio"] = str(err)
    try:
        with open(os.path.join(folder, "naive.md"), "ab") as fh:
            fh.write(payload)
        out["naive"] = "appended"
    except OSError as err:
        out["naive"] = err.strerror
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize(
    ("room", "torn_naive"),
    [(1000, True), (0, False)],
    ids=["short write", "no room at all"],
)
def test_an_append_past_the_file_size_limit_leaves_the_note_as_it_was(
    tmp_path: Path, room: int, torn_naive: bool
) -> None:
    old = b"# 2026-11-29\n\n" + b"an earlier record\n" * 500
    note_md = write(tmp_path / "note.md", old)
    naive_md = write(tmp_path / "naive.md", old)
    proc = subprocess.run(
        [sys.executable, "-c", _FSIZE_CHILD, str(tmp_path), str(len(old) + room), str(64 * 1024)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = json.loads(proc.stdout)
    assert "File too large" in out["fsio"] and "nothing was left behind" in out["fsio"]
    assert note_md.read_bytes() == old
    # the same append done naively leaves a torn record (the failure this guards against)
    assert (naive_md.stat().st_size > len(old)) is torn_naive
    # and the next append continues right after the old content, not after a fragment
    append_file(MemoryRoot(str(tmp_path)), "note.md", b"next\n")
    assert note_md.read_bytes() == old + b"next\n"


_FULL_DISK_CHILD = textwrap.dedent(
    """
    import hashlib, json, os, sys
    from memoryd.core.layout import MemoryRoot
    from memoryd.errors import MemoryWriteFailed
    from memoryd.fsio import append_file
    mnt = sys.argv[1]
    old = b"an earlier record\\n" * 5000  # ~88 KiB
    for name in ("note.md", "naive.md"):
        with open(os.path.join(mnt, name), "wb") as fh:
            fh.write(old)
    big = b"r" * (128 * 1024 - 1) + b"\\n"
    out = {"old_size": len(old)}
    try:
        append_file(MemoryRoot(mnt), "note.md", big)
        out["fsio"] = "appended"
    except MemoryWriteFailed as err:
        out["fsio"] = str(err)
    data = open(os.path.join(mnt, "note.md"), "rb").read()
    out["after_failure"] = [len(data), data == old]
    append_file(MemoryRoot(mnt), "note.md", b"next\\n")
    data = open(os.path.join(mnt, "note.md"), "rb").read()
    out["after_next"] = data == old + b"next\\n"
    try:
        with open(os.path.join(mnt, "naive.md"), "ab") as fh:
            fh.write(big)
        out["naive"] = "appended"
    except OSError as err:
        out["naive"] = err.strerror
    out["naive_size"] = os.path.getsize(os.path.join(mnt, "naive.md"))
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(not IS_ROOT, reason="mounting a small tmpfs needs root")
def test_an_append_on_a_full_disk_leaves_the_note_as_it_was(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("util-linux unshare is not installed")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # a private mount namespace: the tmpfs disappears with the child, whatever happens
    script = f'mount -t tmpfs -o size=256k tmpfs "$1" && exec "{sys.executable}" -c "$2" "$1"'
    proc = subprocess.run(
        [
            unshare,
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            str(mnt),
            _FULL_DISK_CHILD,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0 and "mount" in proc.stderr and not proc.stdout:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "No space left on device" in out["fsio"] and "nothing was left behind" in out["fsio"]
    assert out["after_failure"] == [out["old_size"], True]
    assert out["after_next"] is True
    # the naive append on the same full disk leaves a torn record behind
    assert out["naive"] == "No space left on device"
    assert out["naive_size"] > out["old_size"]


_CONCURRENT_CHILD = textwrap.dedent(
    """
    import sys
    from memoryd.core.layout import MemoryRoot
    from memoryd.fsio import append_file
    folder, me, files, records = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    root = MemoryRoot(folder)
    sys.stdin.read(1)  # start together: every first append races to create the file
    for i in range(records):
        for f in range(files):
            body = f"{me} {i} ".encode() + b"." * (97 * i % 3000) + b"\\n"
            append_file(root, f"n{f}.md", body, new_file_prefix=b"# heading\\n\\n")
    """
)


@pytest.mark.timeout(120)
def test_concurrent_appends_from_many_processes_neither_interleave_nor_repeat_the_prefix(
    tmp_path: Path,
) -> None:
    writers, files, records = 4, 20, 15
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _CONCURRENT_CHILD,
                str(tmp_path),
                f"w{w}",
                str(files),
                str(records),
            ],
            stdin=subprocess.PIPE,
        )
        for w in range(writers)
    ]
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()  # end of input: go
    assert [p.wait(timeout=100) for p in procs] == [0] * writers
    for f in range(files):
        lines = (tmp_path / f"n{f}.md").read_bytes().split(b"\n")
        assert lines[:2] == [b"# heading", b""]
        body = [line for line in lines[2:] if line]
        assert len(body) == writers * records
        expected = {
            f"w{w} {i} ".encode() + b"." * (97 * i % 3000)
            for w in range(writers)
            for i in range(records)
        }
        assert set(body) == expected
        assert b"# heading" not in b"\n".join(lines[2:])


def test_append_waits_for_another_writers_lock_and_gives_up_after_its_timeout(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    from memoryd.fsio import _chain

    monkeypatch.setattr(_chain, "_LOCK_TIMEOUT_S", 0.2)
    path = write(workspace / "memory" / "n.md", b"old\n")
    root = memory_root(workspace)
    with open(path, "rb") as other_writer:
        fcntl.flock(other_writer, fcntl.LOCK_EX)
        with pytest.raises(MemoryWriteFailed, match="timed out waiting for another writer"):
            append_file(root, "n.md", b"new\n", anchor=workspace)
        assert path.read_bytes() == b"old\n"
    append_file(root, "n.md", b"new\n", anchor=workspace)
    assert path.read_bytes() == b"old\nnew\n"


# --------------------------------------------------------------------------- private state


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.usefixtures("umask_022")
def test_private_dir_creates_the_folder_and_its_missing_parents_0700(tmp_path: Path) -> None:
    target = tmp_path / "state" / "agents" / "main"
    assert private_dir(target) == target
    assert [mode(p) for p in (tmp_path / "state", target.parent, target)] == [0o700] * 3


@pytest.mark.usefixtures("umask_022")
def test_private_dir_sets_an_existing_open_folder_back_to_0700(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.mkdir(mode=0o755)
    os.chmod(target, 0o755)
    private_dir(target)
    assert mode(target) == 0o700
    private_dir(target)  # idempotent
    assert mode(target) == 0o700


@pytest.mark.usefixtures("umask_022")
def test_private_dir_leaves_existing_ancestors_alone(tmp_path: Path) -> None:
    parent = tmp_path / "home"
    parent.mkdir()
    os.chmod(parent, 0o755)
    private_dir(parent / "state")
    assert mode(parent) == 0o755


@pytest.mark.skipif(not IS_ROOT, reason="needs root to hand a folder to another user")
def test_private_dir_refuses_another_users_folder_open_to_others(tmp_path: Path) -> None:
    import pwd

    target = tmp_path / "state"
    target.mkdir()
    os.chmod(target, 0o755)
    os.chown(target, pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(StateError, match="open to other users"):
        private_dir(target)
    assert mode(target) == 0o755


def test_private_dir_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    write(tmp_path / "state")
    with pytest.raises(StateError, match="not a folder"):
        private_dir(tmp_path / "state")
    with pytest.raises(StateError):
        private_dir(tmp_path / "state" / "below")


@pytest.mark.usefixtures("umask_022")
def test_private_file_creates_an_empty_0600_file_and_fixes_an_open_one(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    private_file(fresh)
    assert (fresh.read_bytes(), mode(fresh)) == (b"", 0o600)
    old = write(tmp_path / "old.db", b"keep me")
    os.chmod(old, 0o644)
    private_file(old)
    assert (old.read_bytes(), mode(old)) == (b"keep me", 0o600)


def test_private_file_refuses_a_symlink_and_a_folder(tmp_path: Path, outside: Path) -> None:
    os.chmod(outside / "secret.md", 0o644)
    (tmp_path / "link.db").symlink_to(outside / "secret.md")
    with pytest.raises(StateError, match="symlink"):
        private_file(tmp_path / "link.db")
    assert mode(outside / "secret.md") == 0o644  # the link's target is never touched
    (tmp_path / "folder.db").mkdir()
    with pytest.raises(StateError):
        private_file(tmp_path / "folder.db")


@pytest.mark.usefixtures("umask_022")
def test_write_private_atomic_replaces_the_file_with_a_0600_one_and_leaves_no_temp(
    tmp_path: Path,
) -> None:
    target = write(tmp_path / "sessions.json", b"old")
    os.chmod(target, 0o644)
    write_private_atomic(target, b'{"new": true}\n')
    assert (target.read_bytes(), mode(target)) == (b'{"new": true}\n', 0o600)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sessions.json"]


def test_write_private_atomic_failure_keeps_the_old_state_and_no_temp(tmp_path: Path) -> None:
    (tmp_path / "target").mkdir()  # a folder in the way: the rename fails
    write(tmp_path / "target" / "inside", b"kept")
    with pytest.raises(StateError):
        write_private_atomic(tmp_path / "target", b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]
    assert (tmp_path / "target" / "inside").read_bytes() == b"kept"
    with pytest.raises(StateError):
        write_private_atomic(tmp_path / "missing" / "x.json", b"new")


def _sqlite_modules() -> list[Any]:
    modules: list[Any] = [sqlite3]
    with contextlib.suppress(ImportError):
        import sqlean

        modules.append(sqlean)
    return modules


@pytest.mark.usefixtures("umask_022")
@pytest.mark.parametrize("binding", _sqlite_modules(), ids=lambda m: m.__name__)
def test_sqlite_gives_its_wal_and_shm_files_the_database_files_mode(
    tmp_path: Path, binding: Any
) -> None:
    def open_and_write(db: Path) -> Any:
        conn = binding.connect(str(db), isolation_level=None)
        conn.execute("pragma journal_mode = wal")
        conn.execute("create table t (x)")
        conn.execute("insert into t values (1)")
        return conn

    prepared = tmp_path / "state" / "index.sqlite"
    make_private(prepared)
    unprepared = tmp_path / "plain.sqlite"
    conns = [open_and_write(prepared), open_and_write(unprepared)]
    try:
        # both connections are open, so the -wal and -shm files exist now
        assert [mode(Path(f"{prepared}{s}")) for s in ("", "-wal", "-shm")] == [0o600] * 3
        assert mode(prepared.parent) == 0o700
        # without make_private the umask leaves the index readable by everyone
        assert [mode(Path(f"{unprepared}{s}")) for s in ("", "-wal", "-shm")] == [0o644] * 3
    finally:
        for conn in conns:
            conn.close()


@pytest.mark.usefixtures("umask_022")
def test_make_private_fixes_side_files_left_open_by_an_older_version(tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite"
    for suffix in ("", "-wal", "-shm"):
        os.chmod(write(Path(f"{db}{suffix}"), b""), 0o644)
    make_private(db)
    assert [mode(Path(f"{db}{s}")) for s in ("", "-wal", "-shm")] == [0o600] * 3
    assert not Path(f"{db}-journal").exists()  # side files are fixed, never created


def _nobody_can(argv: list[str]) -> subprocess.CompletedProcess[str]:
    import grp

    return subprocess.run(
        argv,
        user="nobody",
        group=grp.getgrgid(__import__("pwd").getpwnam("nobody").pw_gid).gr_name,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.skipif(not IS_ROOT, reason="needs root to run a command as another user (nobody)")
@pytest.mark.usefixtures("umask_022")
def test_another_local_user_cannot_read_private_state(shared_base: Path) -> None:
    state = private_dir(shared_base / "state")
    write_private_atomic(state / "sessions.json", b'{"secret": 1}\n')
    db = state / "memory" / "main.sqlite"
    make_private(db)
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("pragma journal_mode = wal")
    conn.execute("create table t (x)")
    public = write(shared_base / "public.txt", b"anyone\n")
    try:
        # the control: the same user reads an ordinary file in the same place
        assert _nobody_can(["cat", str(public)]).stdout == "anyone\n"
        for path in (state / "sessions.json", db, Path(f"{db}-wal")):
            os.chmod(state, 0o755)  # even with the folder opened up, the file itself is 0600
            denied = _nobody_can(["cat", str(path)])
            assert denied.returncode != 0 and "Permission denied" in denied.stderr, path
            private_dir(state)
        listing = _nobody_can(["ls", str(state)])
        assert listing.returncode != 0 and "Permission denied" in listing.stderr
    finally:
        conn.close()
