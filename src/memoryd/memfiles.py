"""Memory files on disk for both engines: discovery and `memory_get` reads by `core.layout`'s rule."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from .core.layout import MemoryRoot, check_line_range, display_path, locate, page_blocks
from .core.results import FileText
from .fsio import read_file_with, unchanged, walk


class MemoryFile(NamedTuple):
    """One memory file discovery found: where it is and how to read it again safely."""

    #: workspace-relative posix path, or absolute for extra paths outside the workspace
    rel_path: str
    root: MemoryRoot
    rel: PurePosixPath
    size: int
    mtime_ns: int
    ctime_ns: int

    @property
    def abs_path(self) -> Path:
        return Path(self.root.path, *self.rel.parts)


class Discovery(NamedTuple):
    """Every memory file of the roots, what was left out (by reason: symlink, too_deep, …), and
    the stamp for `unchanged_since` (JSON; None when the walks could not vouch for them)."""

    files: list[MemoryFile]
    skipped: dict[str, int]
    stamp: str | None


def discover(roots: Sequence[MemoryRoot], workspace: Path) -> Discovery:
    """Walk every `memory` root (never following a symlink below the workspace); each file once."""
    ws = str(workspace)
    files: list[MemoryFile] = []
    skipped: dict[str, int] = {}
    seen: set[tuple[int, int]] = set()
    stamps: list[tuple[str, str, str | None, object]] = []
    for root in roots:
        if root.source != "memory":
            continue
        found = walk(root, anchor=workspace)
        stamps.append((root.path, root.pattern, root.name, found.stamp))
        for s in found.skipped:
            skipped[s.reason] = skipped.get(s.reason, 0) + 1
        for f in found.files:
            if (f.dev, f.ino) not in seen:
                seen.add((f.dev, f.ino))
                shown = display_path(root, f.rel, workspace=ws)
                files.append(MemoryFile(shown, root, f.rel, f.size, f.mtime_ns, f.ctime_ns))
    stamp = None
    if all(s[3] is not None for s in stamps):
        stamp = json.dumps({"workspace": ws, "roots": stamps, "files": len(files)})
    return Discovery(files, skipped, stamp)


def unchanged_since(stamp: str | None, roots: Sequence[MemoryRoot], workspace: Path) -> int | None:
    """How many memory files `discover` found when it made `stamp`, if it would find just
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
