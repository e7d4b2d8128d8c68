"""Which files are memory: discovery for indexing and the path policy for `memory_get`.

Symlinks are refused at every level (root, intermediate folder, file) so a workspace cannot be
made to index or serve files from elsewhere; noise folders (.git, node_modules, venvs) are skipped.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .._util import slice_lines
from ..errors import InvalidInput, PathNotAllowed

SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache"}
)
ROOT_FILES = ("MEMORY.md", "memory.md")


@dataclass(frozen=True, slots=True)
class MemoryFile:
    abs_path: Path
    rel_path: (
        str  # workspace-relative posix path, or absolute for extra paths outside the workspace
    )
    source: str = "memory"


def _is_symlink(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_venv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file()


def _walk_md(root: Path) -> list[Path]:
    """Every regular `.md` file under root, never following or listing symlinks."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in SKIP_DIRS and not _is_symlink(here / d) and not _is_venv(here / d)
        )
        for name in sorted(filenames):
            if not name.lower().endswith(".md"):
                continue
            full = here / name
            if _is_symlink(full):
                continue
            found.append(full)
    return found


def has_symlink_component(path: Path, root: Path) -> bool:
    """True if `path`, or any folder between `root` and it, is a symlink (root itself included)."""
    if _is_symlink(root):
        return True
    try:
        rel = path.relative_to(root)
    except ValueError:
        return True
    current = root
    for part in rel.parts:
        current = current / part
        if _is_symlink(current):
            return True
    return False


def display_path(abs_path: Path, workspace: Path) -> str:
    try:
        return abs_path.relative_to(workspace).as_posix()
    except ValueError:
        return abs_path.as_posix()


def resolve_extra_paths(workspace: Path, extra_paths: list[str]) -> list[Path]:
    out = []
    for raw in extra_paths:
        p = Path(os.path.expanduser(raw))
        if not p.is_absolute():
            p = workspace / p
        out.append(Path(os.path.normpath(p)))
    return out


def discover(workspace: Path, extra_paths: list[str] | None = None) -> list[MemoryFile]:
    """MEMORY.md, memory.md, memory/**/*.md and extra paths; each real file once."""
    candidates: list[Path] = []
    for name in ROOT_FILES:
        p = workspace / name
        # case-insensitive filesystems: only take the entry whose on-disk name matches exactly
        if p.is_file() and not _is_symlink(p) and name in os.listdir(workspace):
            candidates.append(p)
    memory_dir = workspace / "memory"
    if memory_dir.is_dir() and not _is_symlink(memory_dir):
        candidates.extend(_walk_md(memory_dir))
    for extra in resolve_extra_paths(workspace, extra_paths or []):
        if _is_symlink(extra) or not extra.exists():
            continue
        # an intermediate symlinked folder (inside the workspace) is refused too
        if extra.is_relative_to(workspace) and has_symlink_component(extra, workspace):
            continue
        if extra.is_dir():
            candidates.extend(_walk_md(extra))
        elif extra.is_file() and extra.name.lower().endswith(".md"):
            candidates.append(extra)

    seen: set[tuple[int, int]] = set()
    files: list[MemoryFile] = []
    for path in candidates:
        try:
            st = path.stat()
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            continue
        seen.add(key)
        files.append(MemoryFile(path, display_path(path, workspace)))
    return files


def resolve_get_path(workspace: Path, extra_paths: list[str], requested: str) -> tuple[Path, str]:
    """Check a `memory_get` path against the policy; returns (absolute path, display path).

    Raises PathNotAllowed for traversal, symlinks anywhere, directories, non-.md files and
    anything outside MEMORY.md / memory.md / memory/** / extraPaths. A missing file is allowed
    (the caller returns empty text).
    """
    raw = (requested or "").strip()
    if not raw or "\x00" in raw:
        raise PathNotAllowed("path is empty or invalid")
    posix = raw.replace("\\", "/")
    if ".." in PurePosixPath(posix).parts:
        raise PathNotAllowed(f"path {raw!r} escapes the workspace ('..' is not allowed)")
    if not posix.lower().endswith(".md"):
        raise PathNotAllowed(f"path {raw!r} is not a Markdown memory file (.md)")
    candidate = Path(posix) if os.path.isabs(posix) else workspace / posix
    candidate = Path(os.path.normpath(candidate))

    roots: list[Path] = []
    try:
        rel = candidate.relative_to(workspace).as_posix()
    except ValueError:
        rel = None
    if rel is not None and (rel in ROOT_FILES or rel.startswith("memory/")):
        roots.append(workspace)
    for extra in resolve_extra_paths(workspace, extra_paths):
        if candidate == extra or candidate.is_relative_to(extra):
            roots.append(extra.parent if candidate == extra else extra)
    if not roots:
        raise PathNotAllowed(
            f"path {raw!r} is not a memory file (allowed: MEMORY.md, memory.md, memory/**, extraPaths)"
        )
    for root in roots:
        if has_symlink_component(candidate, root if root != workspace else workspace):
            raise PathNotAllowed(f"path {raw!r} goes through a symlink")
        if (
            root != workspace
            and candidate.is_relative_to(workspace)
            and has_symlink_component(candidate, workspace)
        ):
            raise PathNotAllowed(f"path {raw!r} goes through a symlink")
    if candidate.is_dir():
        raise PathNotAllowed(f"path {raw!r} is a directory")
    if candidate.exists() and not candidate.is_file():
        raise PathNotAllowed(f"path {raw!r} is not a regular file")
    return candidate, display_path(candidate, workspace)


def read_memory_file(
    workspace: Path,
    extra_paths: list[str],
    path: str,
    from_line: int | None = None,
    lines: int | None = None,
) -> tuple[str, str]:
    """`memory_get` without an index: (display path, sliced text); missing files give ""."""
    if from_line is not None and from_line < 1:
        raise InvalidInput("from must be ≥ 1")
    if lines is not None and lines < 0:
        raise InvalidInput("lines must be ≥ 0")
    abs_path, shown = resolve_get_path(workspace, extra_paths, path)
    try:
        text = abs_path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return shown, ""
    return shown, slice_lines(text, from_line, lines)
