"""`memory_append`: durable, append-only writes to the agent's memory files.

For agents that reach memoryd over MCP without file tools. Two targets:

- `daily`: `memory/YYYY-MM-DD.md` for the date of `now` (created with a `# YYYY-MM-DD` heading);
- `long-term`: `MEMORY.md`, or `memory.md` when only the lowercase file exists (the same
  fallback the session context uses); created with a `# Memory` heading when neither exists.

Every append holds an exclusive file lock (shared by all memoryd processes using the same state
dir), starts on a new line, goes out in a single `write` on an `O_APPEND` descriptor and is
fsynced before the lock is released; a new file's directory entry is fsynced too. Concurrent
writers therefore never lose or interleave lines. Writes are refused unless the agent's
`workspaceAccess` is `rw`. The index notices the change through its file watcher.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

import filelock

from .. import paths
from .._util import fsync_dir
from ..config import ResolvedAgent
from ..core.layout import LONG_TERM_NAMES, daily_note_rel
from ..errors import InvalidMemoryWrite, MemoryWriteFailed, PathNotAllowed, WorkspaceReadOnly

__all__ = [
    "MAX_APPEND_BYTES",
    "AppendResult",
    "AppendTarget",
    "InvalidMemoryWrite",
    "MemoryWriteFailed",
    "WorkspaceReadOnly",
    "append_memory",
    "append_target_path",
]

AppendTarget = Literal["daily", "long-term"]
MAX_APPEND_BYTES: Final = 64 * 1024
LOCK_TIMEOUT_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where the text went (absolute and workspace-relative), bytes appended, and whether the file is new."""

    path: Path
    relative_path: str
    bytes_written: int
    created: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.relative_path,
            "bytesWritten": self.bytes_written,
            "created": self.created,
        }


def append_target_path(agent: ResolvedAgent, target: str, *, now: datetime) -> Path:
    """The file an append to `target` would write (it may not exist yet)."""
    ws = agent.workspace
    if target == "daily":
        return ws / daily_note_rel(now.date())
    if target == "long-term":
        upper, lower = ws / LONG_TERM_NAMES[0], ws / LONG_TERM_NAMES[1]
        if not _exists(upper) and _exists(lower) and not _same_file(upper, lower):
            return lower
        return upper
    raise InvalidMemoryWrite(f"unknown target {target!r} (use 'daily' or 'long-term')")


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _same_file(a: Path, b: Path) -> bool:
    # On a case-insensitive file system MEMORY.md and memory.md are one file.
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _heading(target: str, now: datetime) -> str:
    return f"# {now.date().isoformat()}\n\n" if target == "daily" else "# Memory\n\n"


def _lock_for(path: Path) -> filelock.FileLock:
    digest = hashlib.sha256(str(path).encode("utf-8")).hexdigest()[:32]
    folder = paths.locks_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return filelock.FileLock(str(folder / f"append-{digest}.lock"), timeout=LOCK_TIMEOUT_S)


def _check_inside(workspace: Path, path: Path) -> None:
    # memory/ or MEMORY.md may be symlinks; never follow one out of the workspace.
    real = path.resolve()
    root = workspace.resolve()
    if real != root and root not in real.parents:
        raise PathNotAllowed(f"{path} resolves outside the workspace ({real})")
    if real.suffix.lower() != ".md":
        raise PathNotAllowed(f"{path} resolves to a non-Markdown file ({real})")


def append_memory(
    agent: ResolvedAgent, target: AppendTarget | str, text: str, *, now: datetime
) -> AppendResult:
    """Append `text` to today's daily note or to long-term memory, atomically and durably.

    `now` picks the daily file (its local date). The text is written as given, minus trailing
    whitespace, followed by one newline; a newline is put first when the file does not end with
    one. Raises `WorkspaceReadOnly`, `InvalidMemoryWrite`, `PathNotAllowed` or
    `MemoryWriteFailed`.
    """
    if agent.workspace_access != "rw":
        raise WorkspaceReadOnly(
            f"agent {agent.agent_id!r} has workspaceAccess {agent.workspace_access!r}; memory writes need 'rw'"
        )
    path = append_target_path(agent, target, now=now)
    if not text or not text.strip():
        raise InvalidMemoryWrite("text is empty")
    if "\x00" in text:
        raise InvalidMemoryWrite("text contains NUL bytes")
    body = text.replace("\r\n", "\n").replace("\r", "\n").rstrip() + "\n"
    encoded = body.encode("utf-8")
    if len(encoded) > MAX_APPEND_BYTES:
        raise InvalidMemoryWrite(
            f"text is {len(encoded)} bytes; one append may be at most {MAX_APPEND_BYTES} bytes "
            "(split it, or keep detail in separate memory/*.md files)"
        )

    _check_inside(agent.workspace, path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _check_inside(agent.workspace, path)  # again: the folder may have been swapped meanwhile
        with _lock_for(path.resolve()):
            return _append_locked(agent.workspace, path, target, encoded, now)
    except filelock.Timeout:
        raise MemoryWriteFailed(f"timed out waiting to append to {path}") from None
    except OSError as err:
        raise MemoryWriteFailed(f"cannot append to {path}: {err.strerror or err}") from None


def _append_locked(
    workspace: Path, path: Path, target: str, encoded: bytes, now: datetime
) -> AppendResult:
    created = not os.path.exists(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            payload = _heading(target, now).encode("utf-8") + encoded
        else:
            payload = encoded if _ends_with_newline(path, size) else b"\n" + encoded
        view = memoryview(payload)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)
    rel = path.relative_to(workspace).as_posix() if path.is_relative_to(workspace) else str(path)
    return AppendResult(path=path, relative_path=rel, bytes_written=len(payload), created=created)


def _ends_with_newline(path: Path, size: int) -> bool:
    with open(path, "rb") as fh:
        fh.seek(size - 1)
        return fh.read(1) == b"\n"
