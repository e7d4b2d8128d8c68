"""The file-system side of "which files are memory": discovery and `memory_get` reads, for both engines.

The rule itself is `core.layout` (roots + globs + skipped folders); this module walks the roots
and opens files. Symlinks are refused at every level below the workspace, special files (FIFOs,
sockets, devices) and hard-linked files are skipped, and discovery is iterative with a depth bound.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .core.layout import MAX_DEPTH, SKIP_DIRS, MemoryRoot, display_path, locate, slice_lines
from .errors import MemorydError, PathNotAllowed

__all__ = ["MemoryFile", "discover", "read_memory_file"]


@dataclass(frozen=True, slots=True)
class MemoryFile:
    abs_path: Path
    #: workspace-relative posix path, or absolute for extra paths outside the workspace
    rel_path: str
    source: str = "memory"


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _root_usable(root: str, workspace: str) -> bool:
    """The root is a real folder and, inside the workspace, reached through no symlink."""
    st = _lstat(root)
    if st is None or not stat.S_ISDIR(st.st_mode):
        return False
    ws = workspace.rstrip(os.sep) + os.sep
    if root.startswith(ws):
        current = workspace
        for part in root[len(ws) :].split(os.sep):
            current = os.path.join(current, part)
            st = _lstat(current)
            if st is None or not stat.S_ISDIR(st.st_mode):
                return False
    return True


def _walk(root: MemoryRoot) -> list[tuple[str, PurePosixPath]]:
    """(absolute path, root-relative path) of every accepted regular file, iteratively."""
    found: list[tuple[str, PurePosixPath]] = []
    stack: list[tuple[str, tuple[str, ...]]] = [(root.path, ())]
    while stack:
        folder, rel_parts = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            parts = (*rel_parts, entry.name)
            if stat.S_ISDIR(st.st_mode):
                if (
                    entry.name in SKIP_DIRS
                    or len(parts) > MAX_DEPTH
                    or os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))
                ):
                    continue
                stack.append((entry.path, parts))
            elif stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                rel = PurePosixPath(*parts)
                if root.accepts(rel):
                    found.append((entry.path, rel))
    found.sort(key=lambda item: item[1].as_posix())
    return found


def discover(roots: Sequence[MemoryRoot], workspace: Path) -> list[MemoryFile]:
    """Every memory file of the roots (sources `memory` only), each real file once."""
    ws = str(workspace)
    files: list[MemoryFile] = []
    seen: set[tuple[int, int]] = set()
    for root in roots:
        if root.source != "memory" or not _root_usable(root.path, ws):
            continue
        for abs_path, rel in _walk(root):
            st = _lstat(abs_path)
            if st is None or (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            files.append(MemoryFile(Path(abs_path), display_path(root, rel, workspace=ws)))
    return files


def read_memory_file(
    roots: Sequence[MemoryRoot],
    workspace: Path,
    path: str,
    from_line: int | None = None,
    lines: int | None = None,
) -> tuple[str, str]:
    """`memory_get` for the built-in index: (display path, sliced text); a missing file gives ""."""
    ws = str(workspace)
    root, rel = locate(path, roots, workspace=ws)
    shown = display_path(root, rel, workspace=ws)
    if not _root_usable(root.path, ws):
        if _lstat(root.path) is None:
            return shown, ""
        raise PathNotAllowed(f"path {path!r} goes through a symlink or a non-folder")
    current = root.path
    for part in rel.parts[:-1]:
        current = os.path.join(current, part)
        st = _lstat(current)
        if st is None:
            return shown, ""
        if not stat.S_ISDIR(st.st_mode):
            raise PathNotAllowed(f"path {path!r} goes through a symlink or a non-folder")
    target = os.path.join(current, rel.parts[-1])
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return shown, ""
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise PathNotAllowed(
                f"path {path!r} is a symlink; memoryd never follows those"
            ) from None
        raise PathNotAllowed(f"path {path!r} cannot be read: {err.strerror or err}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PathNotAllowed(f"path {path!r} is not a regular file")
        if st.st_nlink != 1:
            raise PathNotAllowed(f"path {path!r} has other hard links; memoryd refuses those")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read()
    except OSError as err:
        raise MemorydError(f"cannot read {path!r}: {err.strerror or err}") from None
    finally:
        os.close(fd)
    return shown, slice_lines(data.decode("utf-8", errors="replace"), from_line, lines)
