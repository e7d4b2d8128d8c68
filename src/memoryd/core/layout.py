"""Which files are memory (`MemoryRoot`s: a folder and a qmd-style glob), lexically: the one rule
every part shares; `memoryd.fsio` applies it on the file system."""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from fnmatch import fnmatchcase
from pathlib import PurePosixPath
from typing import Final

from ..errors import InvalidInput, PathNotAllowed
from .results import FileText, Source

#: Long-term memory file names at the workspace root, in order of preference.
LONG_TERM_NAMES: Final = ("MEMORY.md", "memory.md")
#: OpenClaw's user model at the workspace root: stable preferences, indexed as long-term memory.
USER_NAME: Final = "USER.md"
#: The curated root files: long-term memory that never decays and may carry annotations.
CURATED_ROOT_NAMES: Final = (*LONG_TERM_NAMES, USER_NAME)
MEMORY_DIR: Final = "memory"
MARKDOWN_SUFFIX: Final = ".md"
#: Folders never walked into nor read from (version control, dependencies, caches, virtualenvs).
SKIP_DIRS: Final = frozenset(
    ".git .hg .svn node_modules __pycache__ .venv venv .tox .mypy_cache .pytest_cache"
    " .ruff_cache".split()
)
#: Deepest folder level below a root that discovery walks (and `memory_get` accepts).
MAX_DEPTH: Final = 64


def is_markdown(name: str) -> bool:
    """`.md` in any letter case (`Notes.MD` counts)."""
    return name.lower().endswith(MARKDOWN_SUFFIX)


def glob_match(path: PurePosixPath, pattern: str) -> bool:
    """qmd-style mask match: `*`/`?`/`[…]` within a segment, `**` across any number of segments."""
    return _match(path.parts, tuple(p for p in pattern.split("/") if p))


def _match(parts: tuple[str, ...], pats: tuple[str, ...]) -> bool:
    if not pats:
        return not parts
    head, rest = pats[0], pats[1:]
    if head == "**":
        return any(_match(parts[i:], rest) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], head) and _match(parts[1:], rest)


@dataclass(frozen=True, slots=True)
class MemoryRoot:
    """An absolute folder, the glob selecting its memory files, and the qmd collection serving it;
    `source = "sessions"` transcripts are searchable, never served by `memory_get`."""

    path: str
    pattern: str = "**/*.md"
    source: Source = "memory"
    name: str | None = None

    def accepts(self, rel: PurePosixPath) -> bool:
        """Whether the file `rel` (relative to `path`) is memory under this root."""
        parts = rel.parts  # never "" nor "." (PurePosixPath drops them)
        if rel.is_absolute() or not 0 < len(parts) <= MAX_DEPTH + 1 or ".." in parts:
            return False
        if not SKIP_DIRS.isdisjoint(parts[:-1]) or not is_markdown(parts[-1]):
            return False
        if "*" in self.pattern and not parts[-1].endswith(MARKDOWN_SUFFIX):
            # `Notes.MD` is Markdown too: wildcard masks match it as `Notes.md`
            rel = rel.with_name(parts[-1][: -len(MARKDOWN_SUFFIX)] + MARKDOWN_SUFFIX)
        return glob_match(rel, self.pattern)


def default_roots(workspace: str) -> list[MemoryRoot]:
    """`MEMORY.md`, `memory.md`, `USER.md` and `memory/**/*.md` of the workspace (an absolute path)."""
    ws = os.path.normpath(workspace)
    return [
        *(MemoryRoot(ws, name) for name in CURATED_ROOT_NAMES),
        MemoryRoot(os.path.join(ws, MEMORY_DIR), "**/*.md"),
    ]


def extra_root(path: str, pattern: str | None = None, *, name: str | None = None) -> MemoryRoot:
    """One `extraPaths` entry (absolute): a `.md` file, a folder (`**/*.md`), or `{path, pattern}`."""
    p = os.path.normpath(path)
    if pattern is not None:
        return MemoryRoot(p, pattern, name=name)
    if is_markdown(p):
        head, tail = os.path.split(p)
        return MemoryRoot(head, re.sub(r"([*?\[])", r"[\1]", tail), name=name)  # the name as a glob
    return MemoryRoot(p, "**/*.md", name=name)


def normalize_request(raw: str) -> PurePosixPath:
    """A requested path, lexically checked: non-empty, no NUL, `/` separators, no `..`, a `.md` file."""
    text = (raw or "").strip()
    if not text or "\x00" in text:
        raise PathNotAllowed("path is empty or invalid")
    if len(text) > 4096:
        raise PathNotAllowed("path is too long (at most 4096 characters)")
    posix = text.replace("\\", "/")
    path = PurePosixPath(posix)
    if ".." in path.parts:
        raise PathNotAllowed(f"path {raw!r} escapes the workspace ('..' is not allowed)")
    if not is_markdown(path.name):
        raise PathNotAllowed(f"path {raw!r} is not a Markdown memory file (.md)")
    return path


def _under(path: str, root: str) -> PurePosixPath | None:
    """`path` relative to `root` when it lies strictly inside it (both absolute, normalized)."""
    root = root.rstrip(os.sep) or os.sep
    prefix = root if root.endswith(os.sep) else root + os.sep
    if not path.startswith(prefix):
        return None
    return PurePosixPath(*path[len(prefix) :].split(os.sep))


def locate(
    raw: str, roots: Sequence[MemoryRoot], *, workspace: str
) -> tuple[MemoryRoot, PurePosixPath]:
    """The root and relative path a workspace-relative, absolute or `qmd/<collection>/<rel>`
    `memory_get` request names, or `PathNotAllowed` (the file need not exist)."""
    path = normalize_request(raw)
    parts = path.parts
    if not path.is_absolute() and len(parts) >= 3 and parts[0] == "qmd":
        named = {r.name: r for r in roots if r.name}
        root = named.get(parts[1])
        if root is None:
            raise PathNotAllowed(f"{raw!r}: unknown qmd collection {parts[1]!r}")
        if root.source != "memory":
            raise PathNotAllowed(f"{raw!r}: session transcripts cannot be read with memory_get")
        rel = PurePosixPath(*parts[2:])
        if not root.accepts(rel):
            raise PathNotAllowed(f"{raw!r}: not one of this agent's memory files")
        return root, rel
    ws = os.path.normpath(workspace)
    absolute = os.path.normpath(str(path) if path.is_absolute() else os.path.join(ws, *parts))
    for candidate in (r for r in roots if r.source == "memory"):
        inside = _under(absolute, os.path.normpath(candidate.path))
        if inside is not None and candidate.accepts(inside):
            return candidate, inside
    for other in roots:
        if other.source != "memory" and _under(absolute, os.path.normpath(other.path)) is not None:
            raise PathNotAllowed(f"{raw!r}: session transcripts cannot be read with memory_get")
    raise PathNotAllowed(
        f"path {raw!r} is not a memory file (allowed: MEMORY.md, memory.md, USER.md, memory/**/*.md, "
        "extraPaths and qmd collections, outside .git/node_modules)"
    )


def display_path(root: MemoryRoot, rel: PurePosixPath, *, workspace: str) -> str:
    """Workspace-relative inside the workspace; else `qmd/<collection>/<rel>` or the absolute path."""
    absolute = os.path.normpath(os.path.join(root.path, *rel.parts))
    inside = _under(absolute, os.path.normpath(workspace))
    if inside is not None:
        return inside.as_posix()
    if root.name:
        return f"qmd/{root.name}/{rel.as_posix()}"
    return PurePosixPath(*absolute.split(os.sep)).as_posix() if os.sep != "/" else absolute


def check_line_range(from_line: int | None, lines: int | None) -> None:
    """`from` and `lines` are 1-based counts: both ≥ 1 when given."""
    if from_line is not None and (isinstance(from_line, bool) or from_line < 1):
        raise InvalidInput("from must be ≥ 1 (lines are numbered from 1)")
    if lines is not None and (isinstance(lines, bool) or lines < 1):
        raise InvalidInput("lines must be ≥ 1")


#: The most `memory_get` returns in one answer; past it the answer says `truncated`/`nextFrom`.
MAX_GET_CHARS: Final = 20_000
MAX_GET_LINES: Final = 2_000


def page_blocks(
    path: str,
    blocks: Iterable[bytes],
    from_line: int | None,
    lines: int | None,
    *,
    max_chars: int = MAX_GET_CHARS,
    max_lines: int = MAX_GET_LINES,
) -> FileText:
    """`path`'s whole lines `from_line`… (at most `lines`) of UTF-8 blocks within the caps, one
    longer line cut, holding no more than a block plus the page."""
    start = max(1, from_line or 1)
    cap = max_chars + 1  # one character past the cap tells an over-long line
    rest = _capped_lines(codecs.iterdecode(blocks, "utf-8", "replace"), cap, skip=start - 1)
    return _page(path, rest, start, lines, max_chars, max_lines)


def _page(
    path: str, rest: Iterator[str], start: int, lines: int | None, max_chars: int, max_lines: int
) -> FileText:
    """The page from `rest`: whole lines within the caps, one over-long first line cut; it is
    `truncated` when a line past them was wanted."""
    room = max_lines if lines is None else min(lines, max_lines)
    taken: list[str] = []
    used = 0
    for line in rest:
        if len(taken) == room or used + len(line) > max_chars:
            if len(taken) == lines:  # every line asked for
                break
            taken = taken or [line[:max_chars]]
            return FileText(path, "".join(taken), True, start + len(taken))
        taken.append(line)
        used += len(line)
    # a non-empty file has a line 1: nothing from `start` on means past the end
    return FileText(path, "".join(taken), past_end=not taken and start > 1)


def _capped_lines(pieces: Iterable[str], cap: int, *, skip: int = 0) -> Iterator[str]:
    """`splitlines(keepends=True)` of the joined `pieces` after `skip`, each cut to `cap` characters."""
    pending = ""  # the start of a line still open at the end of a piece (≤ cap characters)
    carry = ""  # a piece's final "\r", which may pair with the next piece's "\n"
    for piece in pieces:
        piece = carry + piece
        carry = ""
        if piece.endswith("\r"):
            carry, piece = "\r", piece[:-1]
        parts = piece.splitlines(keepends=True)
        for i, part in enumerate(parts):
            # the last part is a line still open unless it ends with a line break
            if i == len(parts) - 1 and len(part.splitlines()[0]) == len(part):
                pending = (pending + part[:cap])[:cap]
                break
            line = (pending + part[:cap])[:cap]
            pending = ""
            if skip:
                skip -= 1
            else:
                yield line
    if (carry or pending) and not skip:
        yield (pending + carry)[:cap]


def daily_note_name(day: date) -> str:
    """`2026-11-29.md`."""
    return f"{day.isoformat()}.md"


def daily_note_rel(day: date) -> str:
    """`memory/2026-11-29.md`: where appends to the daily note go."""
    return f"{MEMORY_DIR}/{daily_note_name(day)}"


_DATED: Final = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})(?:[-_.][^/]*)?\.md$")


def note_date(path: str) -> date | None:
    """The date in a daily-note file name (`memory/2026-01-15.md`, `…-slug.md`), else None."""
    match = _DATED.search(path)
    if not match:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None


def is_daily_note_of(name: str, day: date) -> bool:
    """`2026-11-29.md` or a slugged sibling `2026-11-29-<slug>.md` (a file name, not a path)."""
    stem = day.isoformat()
    slugged = name.startswith(f"{stem}-") and name.endswith(".md") and len(name) > len(stem) + 4
    return slugged or name == f"{stem}.md"


def is_daily_note_path(rel_path: str) -> bool:
    """`memory/YYYY-MM-DD.md` or a slugged sibling directly in `memory/`; curated files are not."""
    head, sep, name = rel_path.partition("/")
    day = note_date(name) if head == MEMORY_DIR and sep and "/" not in name else None
    return day is not None and is_daily_note_of(name, day)
