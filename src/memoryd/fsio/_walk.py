"""Discovery: every memory file under a root, found without following a link or opening a file;
and `unchanged`, which tells by a stat per file whether a walk would find the same again."""

from __future__ import annotations

import errno
import hashlib
import marshal
import operator
import os
import re
from fnmatch import fnmatchcase
from itertools import compress
from pathlib import PurePosixPath
from typing import Any, Final, NamedTuple

from ..core.layout import MAX_DEPTH, SKIP_DIRS, MemoryRoot
from ._chain import (
    _DIR_FLAGS,
    Reason,
    _close,
    _file_problem,
    _folder_problem,
    _has_venv_marker,
    _Missing,
    _open_root,
    _Refused,
    _strerror,
)


class Found(NamedTuple):
    """A memory file discovery saw (from `lstat`; `read_file` re-checks everything it opens)."""

    rel: PurePosixPath
    dev: int
    ino: int
    size: int
    mtime_ns: int
    #: changes with the content and with the mode or owner (a file made readable again)
    ctime_ns: int


class Skipped(NamedTuple):
    """Something under a root that would have been memory but was refused (`rel` "." = the root)."""

    rel: PurePosixPath
    reason: Reason
    detail: str


class Walk(NamedTuple):
    """What `walk` found under one root: the memory files and what it refused, both sorted."""

    files: tuple[Found, ...]
    skipped: tuple[Skipped, ...] = ()
    #: what `unchanged` compares (JSON-ready); None when a race or an unreadable entry means a
    #: later walk may differ on the same files
    stamp: Any = None


_States = frozenset[int]


def _closure(pats: tuple[str, ...], states: set[int]) -> _States:
    # `**` matches zero segments too: a state on `**` also stands on the segment after it
    todo = list(states)
    while todo:
        i = todo.pop()
        if i < len(pats) and pats[i] == "**" and i + 1 not in states:
            states.add(i + 1)
            todo.append(i + 1)
    return frozenset(states)


def _advance(pats: tuple[str, ...], states: _States, name: str) -> _States:
    """Pattern positions still possible after one more folder segment (a glob as an NFA)."""
    nxt: set[int] = set()
    for i in states:
        if i >= len(pats):
            continue
        if pats[i] == "**":
            nxt.add(i)
        elif fnmatchcase(name, pats[i]):
            nxt.add(i + 1)
    return _closure(pats, nxt)


def _may_hold_matches(pats: tuple[str, ...], states: _States) -> bool:
    # only prunes folders no file below could match; `root.accepts` stays the rule for files
    return any(i < len(pats) for i in states)


_MOUNTINFO: Final = "/proc/self/mountinfo"
_MOUNTED_HERE: Final = "something is mounted here (a bind mount or another file system)"
_MOUNT_ESCAPE: Final = rb"\\([0-7]{3})"


def _mount_points_below(folder_fd: int) -> frozenset[str]:
    """The mount points strictly below the folder `folder_fd` holds, relative to it: a bind mount
    keeps its `st_dev`, so only the mount table (Linux) tells it apart."""
    try:
        base = os.readlink(f"/proc/self/fd/{folder_fd}")
        with open(_MOUNTINFO, "rb") as fh:
            table = fh.read()
    except OSError:
        return frozenset()
    prefix = base.rstrip("/") + "/"
    found = set()
    for line in table.splitlines():
        fields = line.split(b" ")
        if len(fields) < 5:
            continue
        # the mount point, with space, tab, newline and backslash written as octal escapes
        point = os.fsdecode(re.sub(_MOUNT_ESCAPE, lambda m: bytes([int(m[1], 8)]), fields[4]))
        if point.startswith(prefix):
            found.add(point[len(prefix) :])
    return frozenset(found)


def walk(root: MemoryRoot, *, anchor: str | os.PathLike[str] | None = None) -> Walk:
    """Every memory file under `root` that memoryd may serve, by the rules of this package."""
    here = PurePosixPath(".")
    try:
        root_fd = _open_root(root.path, anchor, create=False)
    except _Missing:
        return Walk((), stamp="missing")
    except _Refused as refusal:
        refused = ["refused", refusal.reason, refusal.detail]
        return Walk((), (Skipped(here, refusal.reason, refusal.detail),), refused)
    except OSError as err:
        return Walk((), (Skipped(here, "unreadable", _strerror(err)),))
    walker = _Walker(root)
    try:
        walker.run(root_fd)
    except OSError as err:
        walker.skip(here, "unreadable", _strerror(err))
    found = sorted(walker.found, key=lambda f: f.rel.as_posix())
    skipped = sorted(walker.skipped, key=lambda s: s.rel.as_posix())
    stamp = {"dirs": walker.dirs, "mounts": sorted(walker.mounts)} if walker.exact else None
    return Walk(tuple(found), tuple(skipped), stamp)


#: What decides a checked file's fate (kind, links, device) and its text (inode, size, times).
_STAT_KEY: Final = operator.attrgetter(
    "st_mode", "st_nlink", "st_dev", "st_ino", "st_size", "st_mtime_ns", "st_ctime_ns"
)


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _folder_record(kinds: dict[str, str], checked: dict[str, os.stat_result]) -> list[str]:
    """What `unchanged` compares of a folder: the digest of its entries' kinds and names, which
    of them (a mask over the sorted names) were files checked, and the digest of their stats."""
    names = sorted(kinds)
    listing = "\0".join([kinds[n] + n for n in names]).encode("utf-8", "surrogateescape")
    mask = "".join("1" if n in checked else "0" for n in names)
    # marshal version 2 writes no back-references: the same ints give the same bytes in any process
    stats = marshal.dumps([_STAT_KEY(checked[n]) for n in names if n in checked], 2)
    return [_digest(listing), mask, _digest(stats)]


def unchanged(
    root: MemoryRoot, stamp: Any, *, anchor: str | os.PathLike[str] | None = None
) -> bool:
    """Whether `walk(root)` would find what it found when it made `stamp`: the same folders with
    the same entries, the files it checked with the same stats, the same mounts below."""
    try:
        root_fd = _open_root(root.path, anchor, create=False)
    except _Missing:
        return bool(stamp == "missing")
    except _Refused as refusal:
        return bool(stamp == ["refused", refusal.reason, refusal.detail])
    except OSError:
        return False
    stack: list[tuple[tuple[str, ...], int]] = [((), root_fd)]
    try:
        if not isinstance(stamp, dict) or sorted(_mount_points_below(root_fd)) != stamp["mounts"]:
            return False
        for i, (parts, dev, ino, *seen) in enumerate(stamp["dirs"]):
            parts = tuple(parts)
            if (i == 0) == bool(parts):  # the root first, then each folder after its parent
                return False
            if parts:
                while len(stack) > 1 and stack[-1][0] != parts[:-1]:
                    _close(stack.pop()[1])
                if stack[-1][0] != parts[:-1]:
                    return False
                stack.append((parts, os.open(parts[-1], _DIR_FLAGS, dir_fd=stack[-1][1])))
            fd = stack[-1][1]
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (dev, ino):
                return False
            if seen == ["venv"]:
                if not _has_venv_marker(fd):
                    return False
            elif seen != ["other_device"] and not _same_entries(fd, seen):
                return False
        return bool(stamp["dirs"])
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        return False
    finally:
        for _, fd in stack:
            _close(fd)


def _same_entries(fd: int, record: list[str]) -> bool:
    """The folder holds the same entries, and the files checked among them the same stats."""
    with os.scandir(fd) as entries:
        kinds = {
            e.name: "d" if e.is_dir(follow_symlinks=False) else "l" if e.is_symlink() else "f"
            for e in entries
        }
    names = sorted(kinds)
    if len(record[1]) != len(names):
        return False
    checked = compress(names, map(int, record[1]))
    stats = {n: os.stat(n, dir_fd=fd, follow_symlinks=False) for n in checked}
    return _folder_record(kinds, stats) == record


class _Walker:
    """One walk: the root, its glob as segments, its device and mount points, and the results."""

    def __init__(self, root: MemoryRoot) -> None:
        self.root = root
        self.pats = tuple(p for p in root.pattern.split("/") if p)
        self.root_dev = 0
        self.mounts: frozenset[str] = frozenset()
        self.found: list[Found] = []
        self.skipped: list[Skipped] = []
        #: each folder opened, in the order opened: parts, dev, ino, then `_folder_record` of a
        #: folder scanned, "venv" or "other_device"
        self.dirs: list[list[Any]] = []
        #: False after a race or a failure: a stamp of this walk could vouch for the wrong files
        self.exact = True

    def skip(self, rel: PurePosixPath, reason: Reason, detail: str) -> None:
        if reason == "unreadable":
            self.exact = False  # it may read tomorrow
        self.skipped.append(Skipped(rel, reason, detail))

    def run(self, root_fd: int) -> None:
        """Depth-first below the open root `root_fd` (consumed: closed at the end)."""
        try:
            st = os.fstat(root_fd)
            self.root_dev = st.st_dev
            self.mounts = _mount_points_below(root_fd)
            self.descend(root_fd, (), self.scan(root_fd, (), st, _closure(self.pats, {0})))
        finally:
            _close(root_fd)

    def descend(self, fd: int, parts: tuple[str, ...], folders: list[tuple[str, _States]]) -> None:
        """Each of `folders` of the open folder `fd`, in order, each walked before the next."""
        for name, states in folders:
            child = self.open_folder(fd, (*parts, name))
            if child is not None:
                try:
                    self.enter(child, (*parts, name), states)
                finally:
                    _close(child)

    def open_folder(self, parent: int, parts: tuple[str, ...]) -> int | None:
        """Folder `parts[-1]` in `parent`, opened without following a link; None when refused."""
        rel = PurePosixPath(*parts)
        if len(parts) > MAX_DEPTH:
            self.skip(rel, "too_deep", f"deeper than {MAX_DEPTH} folders below the root")
            return None
        if rel.as_posix() in self.mounts:
            self.skip(rel, "mount_point", _MOUNTED_HERE)
            return None
        try:
            return os.open(parts[-1], _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            self.exact = False
            return None
        except OSError as err:
            problem = (
                _folder_problem(parent, parts[-1])
                if err.errno in (errno.ENOTDIR, errno.ELOOP)
                else _Refused("unreadable", _strerror(err))
            )
            self.exact = False  # listed as a folder, yet it would not open as one
            if isinstance(problem, _Refused):
                self.skip(rel, problem.reason, problem.detail)
            return None

    def enter(self, fd: int, parts: tuple[str, ...], states: _States) -> None:
        """Walk the open folder `fd`, unless it is another device or a virtualenv."""
        rel = PurePosixPath(*parts)
        try:
            st = os.fstat(fd)
            if st.st_dev != self.root_dev:
                self.dirs.append([parts, st.st_dev, st.st_ino, "other_device"])
                self.skip(rel, "other_device", "another file system is mounted here")
                return
            if _has_venv_marker(fd):
                self.dirs.append([parts, st.st_dev, st.st_ino, "venv"])
                return
            folders = self.scan(fd, parts, st, states)
        except OSError as err:
            self.skip(rel, "unreadable", _strerror(err))
            return
        self.descend(fd, parts, folders)

    def scan(
        self, fd: int, folder: tuple[str, ...], here: os.stat_result, states: _States
    ) -> list[tuple[str, _States]]:
        """One folder: its memory files into `found`, its folders worth entering returned (sorted)."""
        pats, root = self.pats, self.root
        folders: list[tuple[str, _States]] = []
        kinds: dict[str, str] = {}
        checked: dict[str, os.stat_result] = {}
        with os.scandir(fd) as entries:
            for entry in entries:
                name = entry.name
                parts = (*folder, name)
                kinds[name] = "f"
                try:
                    if entry.is_dir(follow_symlinks=False):
                        kinds[name] = "d"
                        if name in SKIP_DIRS:
                            continue
                        inner = _advance(pats, states, name)
                        if _may_hold_matches(pats, inner):
                            folders.append((name, inner))
                        continue
                    rel = PurePosixPath(*parts)
                    if entry.is_symlink():
                        kinds[name] = "l"
                        # report only links that stand where memory would be (a file or a folder)
                        wanted = root.accepts(rel) or (
                            name not in SKIP_DIRS
                            and _may_hold_matches(pats, _advance(pats, states, name))
                        )
                        if wanted:
                            self.skip(rel, "symlink", "is a symlink")
                        continue
                    if not root.accepts(rel):
                        continue
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    self.exact = False
                    continue
                except OSError as err:
                    self.skip(PurePosixPath(*parts), "unreadable", _strerror(err))
                    continue
                checked[name] = st
                problem = _file_problem(st, self.root_dev)
                if problem is None and rel.as_posix() in self.mounts:
                    problem = _Refused("mount_point", _MOUNTED_HERE)
                if problem is not None:
                    self.skip(rel, problem.reason, problem.detail)
                    continue
                self.found.append(
                    Found(rel, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                )
        record = _folder_record(kinds, checked)
        self.dirs.append([folder, here.st_dev, here.st_ino, *record])
        folders.sort()
        return folders
