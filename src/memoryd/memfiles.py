"""Memory files on disk for both engines: discovery and `memory_get` reads by `core.layout`'s rule."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .core.layout import MemoryRoot, check_line_range, display_path, locate, page_blocks
from .core.results import FileText
from .fsio import FileRead, read_file, read_file_with, unchanged, walk


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
    #: for `unchanged_since` (JSON), or None when the walks could not vouch for what they found
    stamp: str | None = None


def discover_all(roots: Sequence[MemoryRoot], workspace: Path) -> Discovery:
    """Walk every `memory` root (never following a symlink below the workspace); each file once."""
    ws = str(workspace)
    out = Discovery()
    seen: set[tuple[int, int]] = set()
    stamps: list[tuple[str, str, str | None, object]] = []
    for root in roots:
        if root.source != "memory":
            continue
        found = walk(root, anchor=workspace)
        stamps.append((root.path, root.pattern, root.name, found.stamp))
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
    if all(s[3] is not None for s in stamps):
        out.stamp = json.dumps({"workspace": ws, "roots": stamps, "files": len(out.files)})
    return out


def unchanged_since(stamp: str | None, roots: Sequence[MemoryRoot], workspace: Path) -> int | None:
    """How many memory files `discover_all` found when it made `stamp`, if it would find just
    the same now (a stat per file, no name judged again); else None."""
    if stamp is None:
        return None
    try:
        was = json.loads(stamp)
        memory = [r for r in roots if r.source == "memory"]
        if was["workspace"] != str(workspace) or len(was["roots"]) != len(memory):
            return None
        for root, (path, pattern, name, walked) in zip(memory, was["roots"], strict=True):
            if (path, pattern, name) != (root.path, root.pattern, root.name):
                return None
            if not unchanged(root, walked, anchor=workspace):
                return None
        return int(was["files"])
    except (ValueError, TypeError, KeyError):
        return None


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
        root, rel, lambda blocks: page_blocks(shown, blocks, from_line, lines), anchor=workspace
    )
    return FileText(shown, "", missing=True) if page is None else page


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
