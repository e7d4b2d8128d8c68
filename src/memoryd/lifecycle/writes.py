"""`memory_append`: durable, append-only writes to the agent's memory files."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

from ..config import ResolvedAgent
from ..core.layout import LONG_TERM_NAMES, daily_note_rel
from ..errors import InvalidMemoryWrite, WorkspaceReadOnly
from ..fsio import append_file
from .context import root_of

AppendTarget = Literal["daily", "long-term"]
MAX_APPEND_BYTES: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where the text went (absolute and workspace-relative), its size, and whether the file is new."""

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


def _target_rel(workspace: Path, target: str, now: datetime) -> str:
    """The workspace-relative file an append to `target` writes (it may not exist yet)."""
    if target == "daily":
        return daily_note_rel(now.date())
    if target == "long-term":
        upper, lower = LONG_TERM_NAMES
        if os.path.lexists(workspace / upper) or not os.path.lexists(workspace / lower):
            return upper
        # on a case-insensitive file system MEMORY.md and memory.md are one file
        with contextlib.suppress(OSError):
            if os.path.samefile(workspace / upper, workspace / lower):
                return upper
        return lower
    raise InvalidMemoryWrite(f"unknown target {target!r} (use 'daily' or 'long-term')")


def check_writable(agent: ResolvedAgent, what: str) -> None:
    """`WorkspaceReadOnly` unless the agent may write its workspace."""
    if agent.workspace_access != "rw":
        raise WorkspaceReadOnly(
            f"agent {agent.agent_id!r} has workspaceAccess {agent.workspace_access!r}; "
            f"{what} needs 'rw'"
        )


def append_memory(
    agent: ResolvedAgent, target: AppendTarget | str, text: str, *, now: datetime
) -> AppendResult:
    """Append `text` to today's daily note or to long-term memory, atomically and durably."""
    check_writable(agent, "a memory write")
    rel = _target_rel(agent.workspace, target, now)
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
    root, inside = root_of(agent.workspace, rel)
    heading = f"# {now.date().isoformat()}\n\n" if target == "daily" else "# Memory\n\n"
    outcome = append_file(
        root,
        inside,
        encoded,
        anchor=agent.workspace,
        new_file_prefix=heading.encode("utf-8"),
    )
    return AppendResult(agent.workspace / rel, rel, outcome.bytes_written, outcome.created)
