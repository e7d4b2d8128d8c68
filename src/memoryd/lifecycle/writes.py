"""`memory_append`: durable, append-only writes to the agent's memory files."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

from ..config import ResolvedAgent
from ..core.layout import LONG_TERM_NAMES, MEMORY_DIR, MemoryRoot, daily_note_rel
from ..errors import InvalidMemoryWrite, WorkspaceReadOnly
from ..fsio import append_file

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


def append_memory(
    agent: ResolvedAgent, target: AppendTarget | str, text: str, *, now: datetime
) -> AppendResult:
    """Append `text` to today's daily note or to long-term memory, atomically and durably."""
    if agent.workspace_access != "rw":
        raise WorkspaceReadOnly(
            f"agent {agent.agent_id!r} has workspaceAccess {agent.workspace_access!r}; memory writes need 'rw'"
        )
    path = append_target_path(agent, target, now=now)
    if not isinstance(text, str) or not text.strip():
        raise InvalidMemoryWrite("text must not be empty")
    if "\x00" in text:
        raise InvalidMemoryWrite("text contains NUL bytes")
    body = text.replace("\r\n", "\n").replace("\r", "\n").rstrip() + "\n"
    encoded = body.encode("utf-8", errors="replace")
    if len(encoded) > MAX_APPEND_BYTES:
        raise InvalidMemoryWrite(
            f"text is {len(encoded)} bytes; one append may be at most {MAX_APPEND_BYTES} bytes "
            "(split it, or keep detail in separate memory/*.md files)"
        )
    ws = agent.workspace
    rel = path.relative_to(ws)
    if rel.parts[0] == MEMORY_DIR:
        root, inside = MemoryRoot(str(ws / MEMORY_DIR)), PurePosixPath(*rel.parts[1:])
    else:
        root, inside = MemoryRoot(str(ws), rel.name), PurePosixPath(rel.name)
    outcome = append_file(
        root,
        inside,
        encoded,
        anchor=ws,
        new_file_prefix=_heading(target, now).encode("utf-8"),
        lock_timeout=LOCK_TIMEOUT_S,
    )
    return AppendResult(
        path=path,
        relative_path=rel.as_posix(),
        bytes_written=outcome.bytes_written,
        created=outcome.created,
    )
