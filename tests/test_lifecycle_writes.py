"""memory_append: targets, headings, new-line rule, refusals, and real concurrent writers."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest

import helpers
from memoryd.config import ResolvedAgent
from memoryd.errors import InvalidMemoryWrite, PathNotAllowed, WorkspaceReadOnly
from memoryd.lifecycle.writes import MAX_APPEND_BYTES, append_memory

NOW = datetime(2026, 11, 29, 14, 5)


def agent_for(ws: Path, access: str = "rw") -> ResolvedAgent:
    return helpers.agent_for(ws, defaults={"workspaceAccess": access})


def test_daily_append_creates_todays_note_with_a_heading(workspace: Path) -> None:
    result = append_memory(agent_for(workspace), "daily", "Shipped the flush check.", now=NOW)
    path = workspace / "memory" / "2026-11-29.md"
    assert result.path == path
    assert result.relative_path == "memory/2026-11-29.md"
    assert result.created is True
    assert path.read_text() == "# 2026-11-29\n\nShipped the flush check.\n"
    assert result.bytes_written == len(path.read_bytes())


def test_daily_append_creates_the_memory_folder_when_missing(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws).mkdir()
    (ws / "MEMORY.md").write_text("# Memory\n")
    append_memory(agent_for(ws), "daily", "first note", now=NOW)
    assert (ws / "memory" / "2026-11-29.md").is_file()


def test_folders_an_append_creates_are_never_group_or_world_writable(tmp_path: Path) -> None:
    """`memoryd append --target daily` under umask 000 once created `memory/` 0777."""
    from cli_support import run_memoryd

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("# Memory\n")
    old = os.umask(0)
    try:
        out = run_memoryd(["append", "--workspace", str(ws), "--target", "daily", "a note"])
    finally:
        os.umask(old)
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE((ws / "memory").stat().st_mode) == 0o755
    note = next((ws / "memory").glob("*.md"))
    assert stat.S_IMODE(note.stat().st_mode) & 0o022 == 0


@pytest.mark.parametrize("umask", [0o000, 0o002, 0o022, 0o077])
def test_nested_folders_created_by_an_append_are_at_most_0755(tmp_path: Path, umask: int) -> None:
    from memoryd.core.layout import MemoryRoot
    from memoryd.fsio import append_file

    ws = tmp_path / "ws"
    ws.mkdir()
    old = os.umask(umask)
    try:
        append_file(MemoryRoot(str(ws / "memory"), "**/*.md"), "a/b/note.md", b"x\n", anchor=ws)
    finally:
        os.umask(old)
    for folder in (ws / "memory", ws / "memory" / "a", ws / "memory" / "a" / "b"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755 & ~umask, folder


def test_second_append_adds_below_without_another_heading(workspace: Path) -> None:
    agent = agent_for(workspace)
    append_memory(agent, "daily", "one", now=NOW)
    result = append_memory(agent, "daily", "two\n\n\n", now=NOW)
    assert result.created is False
    assert result.bytes_written == len(b"two\n")
    assert (workspace / "memory" / "2026-11-29.md").read_text() == "# 2026-11-29\n\none\ntwo\n"


def test_append_starts_on_a_new_line_when_the_file_lacks_one(workspace: Path) -> None:
    path = workspace / "memory" / "2026-11-29.md"
    path.write_text("# 2026-11-29\n\nwritten by hand, no newline")
    append_memory(agent_for(workspace), "daily", "appended", now=NOW)
    assert path.read_text() == "# 2026-11-29\n\nwritten by hand, no newline\nappended\n"


def test_the_date_of_now_picks_the_daily_file(workspace: Path) -> None:
    append_memory(agent_for(workspace), "daily", "late", now=datetime(2026, 12, 31, 23, 59))
    assert (workspace / "memory" / "2026-12-31.md").is_file()


def test_long_term_append_goes_to_memory_md(workspace: Path) -> None:
    (workspace / "MEMORY.md").write_text("# Memory\n\n- likes tea\n")
    result = append_memory(agent_for(workspace), "long-term", "- prefers mornings", now=NOW)
    assert result.relative_path == "MEMORY.md"
    assert (workspace / "MEMORY.md").read_text() == "# Memory\n\n- likes tea\n- prefers mornings\n"


def test_long_term_append_uses_lowercase_memory_md_only_when_uppercase_is_absent(
    workspace: Path,
) -> None:
    (workspace / "memory.md").write_text("lower\n")
    result = append_memory(agent_for(workspace), "long-term", "more", now=NOW)
    assert result.relative_path == "memory.md"
    assert (workspace / "memory.md").read_text() == "lower\nmore\n"
    assert not (workspace / "MEMORY.md").exists()


def test_long_term_append_creates_memory_md_with_a_heading(workspace: Path) -> None:
    result = append_memory(agent_for(workspace), "long-term", "- durable fact", now=NOW)
    assert result.created is True
    assert (workspace / "MEMORY.md").read_text() == "# Memory\n\n- durable fact\n"


@pytest.mark.parametrize("access", ["ro", "none"])
def test_writes_are_refused_unless_the_workspace_is_read_write(
    workspace: Path, access: str
) -> None:
    with pytest.raises(WorkspaceReadOnly, match=access):
        append_memory(agent_for(workspace, access), "daily", "nope", now=NOW)
    assert list((workspace / "memory").iterdir()) == []


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t"])
def test_empty_text_is_rejected(workspace: Path, text: str) -> None:
    with pytest.raises(InvalidMemoryWrite, match="empty"):
        append_memory(agent_for(workspace), "daily", text, now=NOW)
    assert not (workspace / "memory" / "2026-11-29.md").exists()


def test_oversized_text_is_rejected_with_the_limit_in_the_message(workspace: Path) -> None:
    text = "x" * (MAX_APPEND_BYTES + 1)
    with pytest.raises(InvalidMemoryWrite, match=str(MAX_APPEND_BYTES)):
        append_memory(agent_for(workspace), "daily", text, now=NOW)


def test_text_exactly_at_the_limit_is_accepted(workspace: Path) -> None:
    text = "y" * (MAX_APPEND_BYTES - 1)  # plus the newline
    result = append_memory(agent_for(workspace), "long-term", text, now=NOW)
    assert result.created and (workspace / "MEMORY.md").read_text().endswith(text + "\n")
    with pytest.raises(InvalidMemoryWrite, match="at most"):
        append_memory(agent_for(workspace), "long-term", text + "y", now=NOW)


def test_unknown_target_and_nul_bytes_are_rejected(workspace: Path) -> None:
    with pytest.raises(InvalidMemoryWrite, match="unknown target"):
        append_memory(agent_for(workspace), "weekly", "x", now=NOW)
    with pytest.raises(InvalidMemoryWrite, match="NUL"):
        append_memory(agent_for(workspace), "daily", "a\x00b", now=NOW)


def test_a_memory_folder_symlinked_outside_the_workspace_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (ws / "memory").symlink_to(outside)
    with pytest.raises(PathNotAllowed):
        append_memory(agent_for(ws), "daily", "escape", now=NOW)
    assert list(outside.iterdir()) == []


def test_a_dangling_memory_symlink_is_refused_without_creating_anything(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "memory").symlink_to(tmp_path / "nowhere")
    with pytest.raises(PathNotAllowed):
        append_memory(agent_for(ws), "daily", "escape", now=NOW)
    assert not (tmp_path / "nowhere").exists()


def test_a_memory_path_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "memory").write_text("a file where the folder should be\n")
    with pytest.raises(PathNotAllowed, match="not a folder"):
        append_memory(agent_for(ws), "daily", "x", now=NOW)


def test_crlf_is_normalised(workspace: Path) -> None:
    append_memory(agent_for(workspace), "daily", "a\r\nb\rc", now=NOW)
    assert (workspace / "memory" / "2026-11-29.md").read_text().endswith("a\nb\nc\n")


# ---------------------------------------------------------------- concurrency

WRITER = r"""
import sys
from datetime import datetime
from pathlib import Path
from memoryd.config import resolve_agent, validate_config
from memoryd.lifecycle.writes import append_memory

ws, who, n, target = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
agent = resolve_agent(validate_config({}), "main", workspace=ws)
pad = "." * 3000  # long lines make a torn write visible
for i in range(n):
    text = f"{who}-{i}-a {pad}\n{who}-{i}-b {pad}\n{who}-{i}-c"
    append_memory(agent, target, text, now=datetime(2026, 11, 29, 9, 0))
"""


def check_appends(text: str, writers: list[str], n: int) -> None:
    lines = text.splitlines()
    assert lines[0].startswith("# ") and lines[1] == "", "heading missing"
    body = lines[2:]
    # a racing writer that misreads the file's last byte adds a stray blank line
    assert "" not in body, "stray blank line between appends"
    expected = {f"{w}-{i}-{part}" for w in writers for i in range(n) for part in "abc"}
    keys = [ln.split(" ", 1)[0] for ln in body]
    assert len(keys) == len(expected), "lost or duplicated lines"
    assert set(keys) == expected
    pad = "." * 3000
    for ln in body:
        key = ln.split(" ", 1)[0]
        if key.endswith(("-a", "-b")):
            assert ln == f"{key} {pad}", f"torn line {ln[:60]!r}"
    # each append's three lines stay together and in order
    for idx, key in enumerate(keys):
        if key.endswith("-a"):
            stem = key[:-2]
            assert keys[idx + 1 : idx + 3] == [f"{stem}-b", f"{stem}-c"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("target", ["daily", "long-term"])
def test_concurrent_writer_processes_never_lose_or_interleave_lines(
    workspace: Path, target: str
) -> None:
    writers = [f"w{k}" for k in range(3)]
    n = 30
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(workspace), w, str(n), target],
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in writers
    ]
    for p in procs:
        _, err = p.communicate(timeout=100)
        assert p.returncode == 0, err
    path = workspace / ("memory/2026-11-29.md" if target == "daily" else "MEMORY.md")
    text = path.read_text()
    heading = "# 2026-11-29" if target == "daily" else "# Memory"
    assert text.startswith(heading + "\n\n")
    assert text.count("\n# ") == 0, "heading written twice"
    check_appends(text, writers, n)


@pytest.mark.timeout(60)
def test_concurrent_threads_in_one_process_never_interleave(workspace: Path) -> None:
    agent = agent_for(workspace)
    pad = "." * 3000
    n = 25
    errors: list[BaseException] = []

    def run(who: str) -> None:
        try:
            for i in range(n):
                text = f"{who}-{i}-a {pad}\n{who}-{i}-b {pad}\n{who}-{i}-c"
                append_memory(agent, "daily", text, now=NOW)
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(f"t{k}",)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
    assert not errors
    check_appends(
        (workspace / "memory" / "2026-11-29.md").read_text(), [f"t{k}" for k in range(3)], n
    )
