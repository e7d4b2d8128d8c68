"""Memory files on disk for both engines: discovery and `memory_get` reads by `core.layout`'s rule."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .core.layout import MemoryRoot, check_line_range, display_path, locate, page_blocks
from .core.results import FileText
from .fsio import FileRead, read_file, read_file_with, walk


@dataclass(frozen=True, slots=True)
class MemoryFile:
    """One memory file discovery found: where it is and how to read it again safely."""

    abs_path: Path
    #: workspace-relative posix path, or absolute for extra paths outside the workspace
    rel_path: str
    root: MemoryRoot
    rel: PurePosixPath
    size: int = 0
    mtime_ns: int = 0
    source: str = "memory"
    ctime_ns: int = 0


@dataclass
class Discovery:
    """Every memory file of the roots, and what was left out (by reason: symlink, too_deep, …)."""

    files: list[MemoryFile] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)


def discover_all(roots: Sequence[MemoryRoot], workspace: Path) -> Discovery:
    """Walk every `memory` root (never following a symlink below the workspace); each file once."""
    ws = str(workspace)
    out = Discovery()
    seen: set[tuple[int, int]] = set()
    for root in roots:
        if root.source != "memory":
            continue
        found = walk(root, anchor=workspace)
        for reason, n in found.counts().items():
            out.skipped[reason] = out.skipped.get(reason, 0) + n
        for f in found:
            if (f.dev, f.ino) in seen:
                continue
            seen.add((f.dev, f.ino))
            out.files.append(
                MemoryFile(
                    Path(root.path, *f.rel.parts),
                    display_path(root, f.rel, workspace=ws),
                    root,
                    f.rel,
                    f.size,
                    f.mtime_ns,
                    ctime_ns=f.ctime_ns,
                )
            )
    return out


def discover(roots: Sequence[MemoryRoot], workspace: Path) -> list[MemoryFile]:
    """The memory files of `discover_all`, without the refusal counts."""
    return discover_all(roots, workspace).files


def read_memory(
    mf: MemoryFile, workspace: Path, *, max_bytes: int | None = None
) -> FileRead | None:
    """Read a discovered file again, by descriptor (None if it vanished meanwhile)."""
    return read_file(mf.root, mf.rel, anchor=workspace, max_bytes=max_bytes)


def read_memory_file(
    roots: Sequence[MemoryRoot],
    workspace: Path,
    path: str,
    from_line: int | None = None,
    lines: int | None = None,
) -> FileText:
    """`memory_get`: a page of the file (see `core.layout.page_blocks`); a missing file gives ""
    (a daily note not written yet). Refusals raise `PathNotAllowed`, read failures
    `MemoryReadFailed`, a `from`/`lines` below 1 `InvalidInput` (before the path is looked at)."""
    check_line_range(from_line, lines)
    ws = str(workspace)
    root, rel = locate(path, roots, workspace=ws)
    shown = display_path(root, rel, workspace=ws)
    # read only as far as the page reaches: a 50 MB note costs a scan, not 50 MB of memory
    page = read_file_with(
        root, rel, lambda blocks: page_blocks(blocks, from_line, lines), anchor=workspace
    )
    if page is None:
        return FileText(shown, "", missing=True)
    return FileText(shown, page.text, page.truncated, page.next_from, past_end=page.past_end)


def transcript_display_path(path: Path) -> str:
    """How a transcript is named in search results: `sessions/<file>.jsonl` (as OpenClaw does)."""
    return f"sessions/{path.name}"


def list_transcripts(folder: Path | None) -> list[Path]:
    """The `*.jsonl` transcripts in `folder` (regular files, not symlinks), sorted by name."""
    if folder is None:
        return []
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(
        Path(e.path)
        for e in entries
        if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False)
    )
