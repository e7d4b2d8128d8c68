"""Pure path policy for `memory_get` on qmd-backed memory: shape checks and glob matching.

Symlink resolution needs the file system and lives in the manager; everything here is lexical.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import PurePosixPath

from .._util import slice_lines  # re-exported for the manager
from ..errors import PathNotAllowed

__all__ = ["checked_relative_md_path", "glob_match", "slice_lines"]


def checked_relative_md_path(rel: str, *, shown_as: str) -> PurePosixPath:
    """A relative, `..`-free path to a `.md` file, or `PathNotAllowed` naming what is wrong."""
    if not rel or "\x00" in rel:
        raise PathNotAllowed(f"{shown_as!r}: empty or invalid path")
    path = PurePosixPath(rel.replace("\\", "/"))
    if path.is_absolute():
        raise PathNotAllowed(f"{shown_as!r}: absolute paths are not allowed")
    if any(part == ".." for part in path.parts):
        raise PathNotAllowed(f"{shown_as!r}: '..' is not allowed")
    if path.suffix.lower() != ".md":
        raise PathNotAllowed(f"{shown_as!r}: only Markdown (.md) memory files can be read")
    return path


def glob_match(path: PurePosixPath, pattern: str) -> bool:
    """qmd-style mask match: `*`/`?` within a segment, `**` across any number of segments."""
    return _match(path.parts, tuple(p for p in pattern.split("/") if p))


def _match(parts: tuple[str, ...], pats: tuple[str, ...]) -> bool:
    if not pats:
        return not parts
    head, rest = pats[0], pats[1:]
    if head == "**":
        return any(_match(parts[i:], rest) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], head) and _match(parts[1:], rest)
