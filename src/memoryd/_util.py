"""Small helpers shared by both backends and the lifecycle code (no heavy imports here)."""

from __future__ import annotations

import os
from pathlib import Path


def slice_lines(text: str, from_line: int | None, lines: int | None) -> str:
    """Lines `from_line` (1-based) onwards, at most `lines` of them; past the end → ""."""
    if from_line is None and lines is None:
        return text
    all_lines = text.splitlines(keepends=True)
    start = max(1, from_line or 1) - 1
    end = len(all_lines) if lines is None else start + max(0, lines)
    return "".join(all_lines[start:end])


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable (best effort where unsupported)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # not every file system can fsync a directory
    finally:
        os.close(fd)
