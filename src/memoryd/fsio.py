"""Every read and write of memory by file descriptor, and memoryd's private state files.

`memoryd.core.layout` decides lexically which paths are memory; this module is the file-system
half and applies exactly that rule without ever trusting a path string twice. A memory file is
reached by opening its root and then one component at a time relative to the descriptor already
held (`openat` with `O_NOFOLLOW`), and what is served or written is whatever the final descriptor
refers to after `fstat` says it is acceptable. A symlink or a folder swapped in between a check
and an open therefore cannot redirect a read or an append outside the memory folders.

The rules (docs/security.md explains each one):

- no symlink is followed at any level below the *anchor* (the workspace): file, folder, or the
  root itself (`memory/` as a symlink is refused). A root outside the anchor (a configured extra
  folder) is trusted down to its parent; only its last component must not be a symlink;
- only regular files with exactly one hard link, on the root's device, are served or written;
  FIFOs, sockets and devices are refused, and discovery never opens them;
- discovery never enters a mount point below a root: another file system, or a bind mount of
  the same one (seen in the mount table);
- `SKIP_DIRS` folders and virtualenvs (a folder holding `pyvenv.cfg`) are never walked or read;
- discovery is iterative and bounded by `MAX_DEPTH`; deeper folders are reported, not walked;
- an append is all-or-nothing: a short write or an error is cut back and fsynced before
  `MemoryWriteFailed` is raised.

Private state (`private_dir`, `private_file`, `private_database`, `write_private_atomic`) is
created 0700/0600 whatever the umask, so other local users cannot read indexes or transcripts.

Errors: refusals are `PathNotAllowed`; failed reads `MemoryReadFailed`; failed appends
`MemoryWriteFailed`; state files `StateError`/`StateReadOnly`. No raw `OSError` escapes.
POSIX only (Linux, macOS).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Final, Literal, TypeVar

from . import paths
from .core.layout import MAX_DEPTH, SKIP_DIRS, MemoryRoot
from .errors import (
    MemorydError,
    MemoryReadFailed,
    MemoryWriteFailed,
    PathNotAllowed,
    StateError,
    StateReadOnly,
)

__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "AppendOutcome",
    "FileRead",
    "Found",
    "MemoryReadFailed",
    "Reason",
    "Skipped",
    "Walk",
    "append_file",
    "check_state_path",
    "check_state_tree",
    "create_private_once",
    "fsync_dir",
    "open_private",
    "private_database",
    "private_dir",
    "private_file",
    "read_file",
    "read_private",
    "walk",
    "write_private_atomic",
]


PRIVATE_DIR_MODE: Final = 0o700
PRIVATE_FILE_MODE: Final = 0o600
#: Mode of a memory file `append_file` creates (the umask still applies, as for any editor).
NEW_MEMORY_FILE_MODE: Final = 0o644
#: Mode of a folder `append_file` creates in the workspace (the umask may take more bits off).
NEW_MEMORY_DIR_MODE: Final = 0o755

_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
# O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOCTTY: a tty never becomes ours.
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC
# O_RDWR, not O_WRONLY: the last byte is read through the same descriptor (the new-line rule).
_APPEND_FLAGS: Final = (
    os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC
)
_OPEN_ATTEMPTS: Final = 3
_READ_CHUNK: Final = 1 << 20
_T = TypeVar("_T")
_VENV_MARKER: Final = "pyvenv.cfg"

#: Why an entry was refused (walk's `Skipped.reason`, and the gist of a `PathNotAllowed`).
Reason = Literal[
    "symlink",
    "hard_link",
    "special_file",
    "folder",
    "not_a_folder",
    "other_device",
    "mount_point",
    "too_deep",
    "skipped_folder",
    "changed",
    "unreadable",
]

# errno values that mean "this path is not one memoryd serves", not "the disk failed".
_REFUSING_ERRNOS: Final = {
    errno.ELOOP: "is a symlink",
    errno.ENOTDIR: "goes through something that is not a folder",
    errno.EISDIR: "is a folder, not a file",
    errno.ENAMETOOLONG: "has a name longer than the file system allows",
    errno.EINVAL: "is not a valid name on this file system",
    errno.EILSEQ: "has a name this file system cannot store",
    errno.ENXIO: "is not a regular file (a socket or a device)",
}


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class Found:
    """A memory file discovery saw (from `lstat`; `read_file` re-checks everything it opens)."""

    rel: PurePosixPath
    dev: int
    ino: int
    size: int
    mtime_ns: int
    #: changes with the content and with the mode or owner (a file made readable again)
    ctime_ns: int = 0


@dataclass(frozen=True, slots=True)
class Skipped:
    """Something under a root that would have been memory but was refused (`rel` "." = the root)."""

    rel: PurePosixPath
    reason: Reason
    detail: str


@dataclass(frozen=True, slots=True)
class Walk:
    """What `walk` found under one root: the memory files and what it refused (both sorted by
    their posix path string).

    Skipped folders by design (`SKIP_DIRS`, virtualenvs) and files the root's pattern does not
    select are not reported; refusals (symlinks, hard links, special files, other devices,
    mount points, folders deeper than `MAX_DEPTH`, unreadable folders) are.
    """

    files: tuple[Found, ...]
    skipped: tuple[Skipped, ...] = ()

    def __iter__(self) -> Iterator[Found]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)

    def counts(self) -> dict[Reason, int]:
        """How many entries were refused, by reason."""
        out: dict[Reason, int] = {}
        for s in self.skipped:
            out[s.reason] = out.get(s.reason, 0) + 1
        return out


@dataclass(frozen=True, slots=True)
class FileRead:
    """The bytes of a memory file read through a checked descriptor, and that descriptor's `fstat`.

    `size` and `mtime_ns` are from before the read: if the file grew meanwhile, `data` may be
    longer than `size`, and a later sync sees the new size and reads it again.
    """

    data: bytes
    size: int
    mtime_ns: int
    dev: int
    ino: int
    truncated: bool = False

    @property
    def text(self) -> str:
        """`data` as UTF-8, undecodable bytes replaced (memory files are Markdown)."""
        return self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """What `append_file` wrote: all of it, durably (`offset` is where the record starts)."""

    created: bool
    bytes_written: int
    offset: int
    size: int
    dev: int
    ino: int


# --------------------------------------------------------------------------- internal signals


class _Refused(Exception):
    """An entry on the way breaks a rule; becomes `PathNotAllowed` or a walk's `Skipped`."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason: Reason = reason
        self.detail = detail


class _Missing(Exception):
    """A component does not exist (a missing note is not an error for a reader)."""


# --------------------------------------------------------------------------- descriptor walking


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _lstat_at(parent: int, name: str) -> os.stat_result:
    return os.stat(name, dir_fd=parent, follow_symlinks=False)


def _kind_problem(st: os.stat_result) -> _Refused | None:
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return _Refused("symlink", "is a symlink")
    if stat.S_ISDIR(mode):
        return _Refused("folder", "is a folder, not a file")
    return _Refused("special_file", "is not a regular file (FIFO, socket or device)")


def _file_problem(st: os.stat_result, root_dev: int) -> _Refused | None:
    """The rule for a file memoryd may serve or write: regular, one link, on the root's device."""
    kind = _kind_problem(st)
    if kind is not None:
        return kind
    if st.st_nlink > 1:
        return _Refused(
            "hard_link",
            f"has {st.st_nlink} hard links (memoryd serves only files with a single name)",
        )
    if st.st_dev != root_dev:
        return _Refused("other_device", "lies on another file system than its memory folder")
    return None


def _folder_problem(parent: int, name: str) -> _Refused | _Missing:
    """Why `name` could not be opened as a folder with O_NOFOLLOW|O_DIRECTORY (ENOTDIR/ELOOP)."""
    try:
        st = _lstat_at(parent, name)
    except FileNotFoundError:
        return _Missing()
    if stat.S_ISLNK(st.st_mode):
        return _Refused("symlink", f"goes through a symlink ({name})")
    if not stat.S_ISDIR(st.st_mode):
        return _Refused("not_a_folder", f"goes through {name}, which is not a folder")
    return _Refused("changed", f"{name} changed while being opened")


def _has_venv_marker(fd: int) -> bool:
    try:
        _lstat_at(fd, _VENV_MARKER)
    except OSError:
        return False
    return True


def _fsync_fd(fd: int) -> None:
    with contextlib.suppress(OSError):  # not every file system can fsync a directory
        os.fsync(fd)


def _child_dir(parent: int, name: str, *, create: bool) -> int:
    """Open folder `name` inside `parent` without following a symlink (creating it if asked)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise _Missing() from None
    except OSError as err:
        if err.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _folder_problem(parent, name) from None
        raise
    try:
        # never group/world-writable, whatever the umask: a writable memory folder would let
        # another user plant notes (or links) the agent then reads as its own
        os.mkdir(name, NEW_MEMORY_DIR_MODE, dir_fd=parent)
        _fsync_fd(parent)
    except FileExistsError:
        pass  # a concurrent writer made it; it is opened and checked like any other folder
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        raise _Refused("changed", f"{name} disappeared while being created") from None
    except OSError as err:
        if err.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _folder_problem(parent, name) from None
        raise


def _descend(fd: int, names: tuple[str, ...], *, create: bool, below_root: bool) -> int:
    """Walk `names` down from `fd` (consumed) one openat at a time; returns the last folder's fd."""
    try:
        for name in names:
            if below_root and name in SKIP_DIRS:
                raise _Refused("skipped_folder", f"goes through {name}, which memoryd never reads")
            child = _child_dir(fd, name, create=create)
            old, fd = fd, child
            os.close(old)
            if below_root and _has_venv_marker(fd):
                raise _Refused("skipped_folder", f"goes through {name}, a Python virtualenv")
    except BaseException:
        _close(fd)
        raise
    return fd


def _components_below(path: str, base: str) -> tuple[str, ...] | None:
    """The components of `path` below `base` (both normalized absolute), or None if outside."""
    if path == base:
        return ()
    prefix = base if base.endswith(os.sep) else base + os.sep
    if not path.startswith(prefix):
        return None
    return tuple(p for p in path[len(prefix) :].split(os.sep) if p)


def _open_root(root_path: str, anchor: str | os.PathLike[str] | None, *, create: bool) -> int:
    """A descriptor on the root folder, opened by the anchor rule (see the module docstring)."""
    root = os.path.normpath(root_path)
    below = None
    if anchor is not None:
        base = os.path.normpath(os.fspath(anchor))
        below = _components_below(root, base)
    if anchor is not None and below is not None:
        try:
            # The anchor itself is configuration, trusted as given (it may sit under a symlink
            # such as macOS's /var → /private/var); nothing below it is.
            fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        except FileNotFoundError:
            raise _Missing() from None
        except NotADirectoryError:
            raise _Refused("not_a_folder", f"the workspace {base} is not a folder") from None
        return _descend(fd, below, create=create, below_root=False)
    try:
        return os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        raise _Missing() from None
    except OSError as err:
        if err.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        raise _Missing() from None
    if stat.S_ISLNK(st.st_mode):
        raise _Refused("symlink", f"its memory folder {root} is a symlink")
    raise _Refused("not_a_folder", f"its memory folder {root} is not a folder")


@contextlib.contextmanager
def _parent_of(
    root: MemoryRoot,
    parts: tuple[str, ...],
    anchor: str | os.PathLike[str] | None,
    *,
    create: bool,
) -> Iterator[tuple[int, int]]:
    """(descriptor on the file's folder, the root's device) for the root-relative `parts`."""
    fd = _open_root(root.path, anchor, create=create)
    try:
        root_dev = os.fstat(fd).st_dev
    except BaseException:
        _close(fd)
        raise
    fd = _descend(fd, parts[:-1], create=create, below_root=True)
    try:
        yield fd, root_dev
    finally:
        _close(fd)


def _checked_rel(root: MemoryRoot, rel: PurePosixPath | str) -> tuple[str, ...]:
    text = str(rel)
    path = PurePosixPath(rel)
    if "\x00" in text or not path.parts or path.is_absolute():
        raise PathNotAllowed(f"{text!r} is not a path relative to its memory folder")
    if not root.accepts(path):
        raise PathNotAllowed(
            f"{_shown(root, path.parts)} is not a memory file (pattern {root.pattern!r}, "
            "outside .git/node_modules, at most "
            f"{MAX_DEPTH} folders deep)"
        )
    return path.parts


def _shown(root: MemoryRoot, parts: tuple[str, ...]) -> str:
    return os.path.join(root.path, *parts)


def _same_entry(parent: int, name: str, st: os.stat_result) -> None:
    """After fstat: the name still refers to the inode we hold, and it still has one link.

    Closes the hard-link window: link an outside file in, let memoryd open it, unlink the memory
    name before the fstat (the count is 1 again). The name check catches that.
    """
    try:
        now = _lstat_at(parent, name)
    except FileNotFoundError:
        raise _Missing() from None
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or now.st_nlink != 1:
        raise _Refused("changed", "was replaced while being opened")


class _Changed(_Refused):
    """The file's status changed while it was being checked: worth one more try."""

    def __init__(self) -> None:
        super().__init__("changed", "kept changing while being read")


def _coarse_tick_ns() -> int:
    """How coarse the kernel's file timestamps can be (one tick of the coarse clock)."""
    try:
        res = time.clock_getres(getattr(time, "CLOCK_REALTIME_COARSE", 5))
    except (OSError, ValueError):  # not Linux: assume the coarsest common tick
        res = 0.01
    return max(int(res * 1e9), 1_000_000)


#: A file whose ctime is younger than this waits before the final check: any link or unlink
#: after that moment is bound to give the file another ctime (two coarse ticks).
_SETTLE_NS: Final = 2 * _coarse_tick_ns()


def _settled(parent: int, name: str, fd: int, st: os.stat_result) -> None:
    """The name is, after every namespace operation in flight has finished, this file's only one.

    `_same_entry` alone leaves a window the kernel opens on every `unlink`: the link count has
    dropped to 1 while the dying name still resolves, so an outside file hard-linked into memory
    and unlinked again in a loop passes both checks now and then (measured: 11 in 34k reads).
    Two facts close it. Listing the folder takes its lock, so it waits for any link or unlink
    of a name in it to complete (a barrier); and POSIX makes every link and unlink update the
    file's ctime. So: wait until the ctime's clock tick has passed (at most two ticks, and only
    for a file changed that recently), pass the barrier, and require the same ctime, one link and
    the same name, twice over. A file renamed or relinked in a loop is therefore refused while
    the loop runs (`_Changed` after the caller's retries), never served from outside.
    Raises `_Changed` (the caller retries), `_Refused` or `_Missing`.
    """
    age = time.time_ns() - st.st_ctime_ns
    if age < _SETTLE_NS:
        time.sleep((_SETTLE_NS - max(age, 0)) / 1e9)
    for _ in range(2):
        _barrier(parent)
        now = os.fstat(fd)
        if now.st_nlink == 0:
            raise _Missing()
        if now.st_ctime_ns != st.st_ctime_ns:
            raise _Changed()
        if now.st_nlink != 1:
            raise _Refused(
                "hard_link",
                f"has {now.st_nlink} hard links (memoryd serves only files with a single name)",
            )
        _same_entry(parent, name, now)


def _barrier(parent: int) -> None:
    """Wait for every link, unlink and rename in flight in the folder (readdir takes its lock)."""
    with os.scandir(parent) as entries:
        next(entries, None)


# --------------------------------------------------------------------------- walk


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


@dataclass(slots=True)
class _Frame:
    fd: int
    parts: tuple[str, ...]
    pending: Iterator[tuple[str, _States]]


_MOUNTINFO: Final = "/proc/self/mountinfo"
_MOUNTED_HERE: Final = "something is mounted here (a bind mount or another file system)"
_MOUNT_ESCAPE: Final = re.compile(rb"\\([0-7]{3})")


def _mount_points_below(folder_fd: int) -> frozenset[str]:
    """The mount points strictly below the folder `folder_fd` holds, relative to it.

    A bind mount of a folder of the same file system keeps its `st_dev`, so only the mount
    table tells it apart (Linux: /proc/self/mountinfo; elsewhere nothing is found this way and
    the device check still refuses other file systems).
    """
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
        point = os.fsdecode(_MOUNT_ESCAPE.sub(lambda m: bytes([int(m[1], 8)]), fields[4]))
        if point.startswith(prefix):
            found.add(point[len(prefix) :])
    return frozenset(found)


def walk(root: MemoryRoot, *, anchor: str | os.PathLike[str] | None = None) -> Walk:
    """Every memory file under `root` that memoryd may serve, by the rules of this module.

    Iterative (no recursion limit) and depth-bounded: folders deeper than `MAX_DEPTH` are
    skipped and reported. Never follows a symlink below `anchor`; never opens a file (FIFOs,
    sockets and devices are recognised from `lstat`). A missing root gives an empty walk; a
    refused or unreadable root gives an empty walk that says why. Never raises for a file-system
    problem.
    """
    pats = tuple(p for p in root.pattern.split("/") if p)
    found: list[Found] = []
    skipped: list[Skipped] = []
    here = PurePosixPath(".")
    try:
        root_fd = _open_root(root.path, anchor, create=False)
    except _Missing:
        return Walk(())
    except _Refused as refusal:
        return Walk((), (Skipped(here, refusal.reason, refusal.detail),))
    except OSError as err:
        return Walk((), (Skipped(here, "unreadable", _strerror(err)),))

    frames = [_Frame(root_fd, (), iter(()))]
    try:
        root_dev = os.fstat(root_fd).st_dev
        mounts = _mount_points_below(root_fd)
        start = _closure(pats, {0})
        frames[0].pending = iter(
            _scan(root, frames[0], start, pats, root_dev, mounts, found, skipped)
        )
        while frames:
            top = frames[-1]
            nxt = next(top.pending, None)
            if nxt is None:
                frames.pop()
                _close(top.fd)
                continue
            name, states = nxt
            parts = (*top.parts, name)
            rel = PurePosixPath(*parts)
            if len(parts) > MAX_DEPTH:
                skipped.append(
                    Skipped(rel, "too_deep", f"deeper than {MAX_DEPTH} folders below the root")
                )
                continue
            if rel.as_posix() in mounts:
                skipped.append(Skipped(rel, "mount_point", _MOUNTED_HERE))
                continue
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=top.fd)
            except FileNotFoundError:
                continue
            except OSError as err:
                problem = (
                    _folder_problem(top.fd, name)
                    if err.errno in (errno.ENOTDIR, errno.ELOOP)
                    else _Refused("unreadable", _strerror(err))
                )
                if isinstance(problem, _Refused):
                    skipped.append(Skipped(rel, problem.reason, problem.detail))
                continue
            frame = _Frame(fd, parts, iter(()))
            frames.append(frame)
            try:
                if os.fstat(fd).st_dev != root_dev:
                    skipped.append(
                        Skipped(rel, "other_device", "another file system is mounted here")
                    )
                    continue  # the frame's empty iterator closes it on the next turn
                if _has_venv_marker(fd):
                    continue
                frame.pending = iter(
                    _scan(root, frame, states, pats, root_dev, mounts, found, skipped)
                )
            except OSError as err:
                skipped.append(Skipped(rel, "unreadable", _strerror(err)))
    except OSError as err:
        skipped.append(Skipped(here, "unreadable", _strerror(err)))
    finally:
        for frame in frames:
            _close(frame.fd)
    found.sort(key=lambda f: f.rel.as_posix())
    skipped.sort(key=lambda s: s.rel.as_posix())
    return Walk(tuple(found), tuple(skipped))


def _scan(
    root: MemoryRoot,
    frame: _Frame,
    states: _States,
    pats: tuple[str, ...],
    root_dev: int,
    mounts: frozenset[str],
    found: list[Found],
    skipped: list[Skipped],
) -> list[tuple[str, _States]]:
    """One folder: its memory files into `found`, its folders worth entering returned (sorted)."""
    folders: list[tuple[str, _States]] = []
    with os.scandir(frame.fd) as entries:
        for entry in entries:
            name = entry.name
            parts = (*frame.parts, name)
            try:
                if entry.is_dir(follow_symlinks=False):
                    if name in SKIP_DIRS:
                        continue
                    inner = _advance(pats, states, name)
                    if _may_hold_matches(pats, inner):
                        folders.append((name, inner))
                    continue
                rel = PurePosixPath(*parts)
                if entry.is_symlink():
                    # report only links that stand where memory would be (a file or a folder)
                    wanted = root.accepts(rel) or (
                        name not in SKIP_DIRS
                        and _may_hold_matches(pats, _advance(pats, states, name))
                    )
                    if wanted:
                        skipped.append(Skipped(rel, "symlink", "is a symlink"))
                    continue
                if not root.accepts(rel):
                    continue
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as err:
                skipped.append(Skipped(PurePosixPath(*parts), "unreadable", _strerror(err)))
                continue
            problem = _file_problem(st, root_dev)
            if problem is None and rel.as_posix() in mounts:
                problem = _Refused("mount_point", _MOUNTED_HERE)
            if problem is not None:
                skipped.append(Skipped(rel, problem.reason, problem.detail))
                continue
            found.append(
                Found(rel, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            )
    folders.sort()
    return folders


# --------------------------------------------------------------------------- read


def read_file(
    root: MemoryRoot,
    rel: PurePosixPath | str,
    *,
    anchor: str | os.PathLike[str] | None = None,
    max_bytes: int | None = None,
) -> FileRead | None:
    """The memory file `rel` under `root`, read through a descriptor that passed every rule.

    None when the file (or a folder on the way) does not exist. At most `max_bytes` bytes
    (`truncated` says whether the file held more). Raises `PathNotAllowed` when a rule refuses
    the path (symlink, hard link, special file, skipped folder, pattern, name too long, …) and
    `MemoryReadFailed` for any other file-system failure.
    """
    if max_bytes is not None and max_bytes < 0:
        raise ValueError("max_bytes must be ≥ 0")
    got = _read_checked(root, rel, anchor, lambda fd, size: _read_fd(fd, size, max_bytes))
    if got is None:
        return None
    (data, cut), st = got
    return FileRead(data, st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, cut)


def read_file_with(
    root: MemoryRoot,
    rel: PurePosixPath | str,
    consume: Callable[[Iterator[bytes]], _T],
    *,
    anchor: str | os.PathLike[str] | None = None,
) -> _T | None:
    """`consume` applied to the memory file `rel`'s bytes, pulled block by block from a
    descriptor checked exactly as `read_file` checks it; the file is read only as far as
    `consume` pulls. `consume` may run again when the file changed during the read, so it
    must be pure. None, `PathNotAllowed` and `MemoryReadFailed` as for `read_file`."""
    got = _read_checked(root, rel, anchor, lambda fd, _size: consume(_blocks(fd)))
    return None if got is None else got[0]


def _read_checked(
    root: MemoryRoot,
    rel: PurePosixPath | str,
    anchor: str | os.PathLike[str] | None,
    read: Callable[[int, int], _T],
) -> tuple[_T, os.stat_result] | None:
    """`read(fd, size)` on the checked descriptor of `rel` and its `fstat`; None when missing."""
    parts = _checked_rel(root, rel)
    shown = _shown(root, parts)
    try:
        with _parent_of(root, parts, anchor, create=False) as (parent, root_dev):
            return _read_in(parent, parts[-1], root_dev, read)
    except _Missing:
        return None
    except _Refused as refusal:
        raise PathNotAllowed(f"{shown} {refusal.detail}") from None
    except OSError as err:
        raise _read_error(shown, err) from None


def _blocks(fd: int) -> Iterator[bytes]:
    while block := os.read(fd, _READ_CHUNK):
        yield block


def _read_in(
    parent: int, name: str, root_dev: int, read: Callable[[int, int], _T]
) -> tuple[_T, os.stat_result]:
    try:
        before = _lstat_at(parent, name)
    except FileNotFoundError:
        raise _Missing() from None
    problem = _kind_problem(before)  # a FIFO or a device is refused before anything opens it
    if problem is not None:
        raise problem
    for attempt in range(_OPEN_ATTEMPTS):
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            raise _Missing() from None
        try:
            st = os.fstat(fd)
            if st.st_nlink == 0:
                raise _Missing()  # deleted between the open and the fstat
            problem = _file_problem(st, root_dev)
            if problem is not None:
                raise problem
            _same_entry(parent, name, st)
            value = read(fd, st.st_size)
            try:
                _settled(parent, name, fd, st)
            except _Changed:
                if attempt + 1 < _OPEN_ATTEMPTS:
                    continue  # written meanwhile: read it again
                raise
        finally:
            _close(fd)
        return value, st
    raise _Changed()  # pragma: no cover - the loop returns or raises


def _read_fd(fd: int, size: int, max_bytes: int | None) -> tuple[bytes, bool]:
    # one byte past the limit tells whether the file held more than was asked for
    limit = None if max_bytes is None else max_bytes + 1
    chunks: list[bytes] = []
    total = 0
    want = size + 1
    while limit is None or total < limit:
        if limit is not None:
            want = min(want, limit - total)
        chunk = os.read(fd, max(want, 1))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        want = _READ_CHUNK
    data = b"".join(chunks)
    if max_bytes is not None and len(data) > max_bytes:
        return data[:max_bytes], True
    return data, False


def _strerror(err: OSError) -> str:
    return err.strerror or str(err)


def _read_error(shown: str, err: OSError) -> MemorydError:
    refusal = _REFUSING_ERRNOS.get(err.errno or 0)
    if refusal is not None:
        return PathNotAllowed(f"{shown} {refusal}")
    return MemoryReadFailed(f"cannot read {shown}: {_strerror(err)}", reason=_strerror(err))


# --------------------------------------------------------------------------- append


def append_file(
    root: MemoryRoot,
    rel: PurePosixPath | str,
    payload: bytes,
    *,
    anchor: str | os.PathLike[str] | None = None,
    create_dirs: bool = True,
    new_file_prefix: bytes = b"",
    lock_timeout: float = 30.0,
) -> AppendOutcome:
    """Append `payload` to the memory file `rel` under `root`: all of it, durably, or nothing.

    Missing folders are created (below the anchor, never through a symlink) when `create_dirs`.
    The file is opened `O_APPEND|O_CREAT|O_NOFOLLOW` and checked like a read; the record starts
    on a new line when the file does not end with one, and `new_file_prefix` comes first when
    the file is new or empty. An exclusive `flock` on the file serialises memoryd writers, so
    concurrent calls from many processes never interleave (the caller's own lock is not needed
    for that). On a short write or any error the file is cut back to where the record started
    and fsynced, then `MemoryWriteFailed` is raised. Refusals raise `PathNotAllowed`.
    """
    parts = _checked_rel(root, rel)
    shown = _shown(root, parts)
    try:
        with _parent_of(root, parts, anchor, create=create_dirs) as (parent, root_dev):
            return _append_in(
                parent, parts[-1], root_dev, payload, new_file_prefix, lock_timeout, shown
            )
    except _Missing:
        raise MemoryWriteFailed(f"cannot append to {shown}: its folder does not exist") from None
    except _Refused as refusal:
        raise PathNotAllowed(f"{shown} {refusal.detail}") from None
    except OSError as err:
        refusal_text = _REFUSING_ERRNOS.get(err.errno or 0)
        if refusal_text is not None:
            raise PathNotAllowed(f"{shown} {refusal_text}") from None
        raise MemoryWriteFailed(f"cannot append to {shown}: {_strerror(err)}") from None


def _open_for_append(parent: int, name: str) -> tuple[int, bool]:
    """(descriptor, created): O_EXCL tells a new file from an existing empty one."""
    for _ in range(_OPEN_ATTEMPTS):
        try:
            before = _lstat_at(parent, name)
        except FileNotFoundError:
            try:
                fd = os.open(
                    name,
                    _APPEND_FLAGS | os.O_CREAT | os.O_EXCL,
                    NEW_MEMORY_FILE_MODE,
                    dir_fd=parent,
                )
            except FileExistsError:
                continue
            return fd, True
        problem = _kind_problem(before)
        if problem is not None:
            raise problem
        try:
            return os.open(name, _APPEND_FLAGS, dir_fd=parent), False
        except FileNotFoundError:
            continue
    raise _Refused("changed", "kept appearing and disappearing while being opened")


def _append_in(
    parent: int,
    name: str,
    root_dev: int,
    payload: bytes,
    prefix: bytes,
    lock_timeout: float,
    shown: str,
) -> AppendOutcome:
    for attempt in range(_OPEN_ATTEMPTS):
        fd, created = _open_for_append(parent, name)
        try:
            st = os.fstat(fd)
            problem = _file_problem(st, root_dev)
            if problem is not None:
                raise problem
            _lock(fd, lock_timeout, shown)
            try:
                # checked under the lock: a writer we waited for may have replaced the file
                _same_entry(parent, name, st)
                if not created:
                    _settled(parent, name, fd, os.fstat(fd))
            except (_Refused, _Missing):
                if attempt + 1 < _OPEN_ATTEMPTS:
                    continue
                raise _Refused("changed", "was replaced while being opened") from None
            size = os.fstat(fd).st_size
            if size == 0:
                data = prefix + payload
            elif os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + payload
            else:
                data = payload
            offset = _write_all_or_nothing(fd, data, shown)
            end = os.fstat(fd).st_size
        finally:
            _close(fd)  # also releases the flock
        if created:
            _fsync_fd(parent)
        return AppendOutcome(created, len(data), offset, end, st.st_dev, st.st_ino)
    raise _Refused("changed", "was replaced while being opened")  # pragma: no cover - loop exits


def _lock(fd: int, timeout: float, shown: str) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        except OSError as err:
            if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP):
                return  # no flock on this file system: the caller's state-dir lock still holds
            raise
        if time.monotonic() >= deadline:
            raise MemoryWriteFailed(f"timed out waiting for another writer of {shown}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _write_all_or_nothing(fd: int, data: bytes, shown: str) -> int:
    """Write and fsync all of `data` at the end of `fd`; returns where it starts.

    Anything else cuts the file back to where this record started (known from the first write,
    so bytes appended before ours by another writer are never cut) and fsyncs that.
    """
    start: int | None = None
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(errno.EIO, "the write made no progress")
            if start is None:
                # O_APPEND: the first write landed at the end of the file as it then was
                start = os.lseek(fd, 0, os.SEEK_CUR) - written
            view = view[written:]
        os.fsync(fd)
    except BaseException as err:
        cut_back = start is None or _cut_back(fd, start)
        if not isinstance(err, OSError):
            raise
        tail = (
            "nothing was left behind"
            if cut_back
            else "it could not be cut back and may end with a partial record"
        )
        raise MemoryWriteFailed(f"cannot append to {shown}: {_strerror(err)}; {tail}") from None
    if start is None:
        start = os.lseek(fd, 0, os.SEEK_END)
    return start


def _cut_back(fd: int, size: int) -> bool:
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    except OSError:
        return False
    return True


# --------------------------------------------------------------------------- private state


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or a new file in folder `path` durable (best effort where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    except OSError:
        return
    try:
        _fsync_fd(fd)
    finally:
        _close(fd)


def _state_error(path: Path | str, err: OSError) -> StateError:
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StateReadOnly(f"cannot write memoryd state at {path}: {_strerror(err)}")
    return StateError(f"cannot use memoryd state at {path}: {_strerror(err)}")


def _state_root() -> str:
    return os.path.normpath(os.fspath(paths.state_dir()))


def _unsafe_folder(shown: str, st: os.stat_result) -> StateError | None:
    """Why a folder of the state tree cannot be trusted (another owner, writable by others)."""
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid():
        return StateError(
            f"memoryd state folder {shown} belongs to uid {st.st_uid}, not to you "
            f"(uid {os.geteuid()}): remove it or point MEMORYD_STATE_DIR at a folder of your own"
        )
    if mode & 0o022:
        return StateError(
            f"memoryd state folder {shown} is writable by other users (mode {mode:o}), so "
            f"anyone could plant files in it: check what it holds, then run: chmod 700 {shown}"
        )
    return None


def _trusted_folder(fd: int, shown: str) -> None:
    """`fd` is a state folder only its owner (this user) can change; read bits for others are
    taken off (an older memoryd created 0755 folders). Never changes an untrusted folder."""
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise StateError(f"{shown} should be memoryd's state folder but is not a folder")
    problem = _unsafe_folder(shown, st)
    if problem is not None:
        raise problem
    if stat.S_IMODE(st.st_mode) != PRIVATE_DIR_MODE:
        os.fchmod(fd, PRIVATE_DIR_MODE)


def _symlink_in_state(shown: str) -> StateError:
    return StateError(
        f"{shown} is a symlink; memoryd's state holds no links (something planted it): "
        f"check it, remove it (rm {shown}) and run again"
    )


def _make_missing(folder: str) -> None:
    """Create `folder` and its missing parents 0700, whatever the umask."""
    missing: list[str] = []
    probe = folder
    while not os.path.lexists(probe) and probe != os.path.dirname(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    for new in reversed(missing):
        try:
            os.mkdir(new, PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # made concurrently; checked when it is opened
        os.chmod(new, PRIVATE_DIR_MODE)  # the umask may have taken owner bits off


def _state_child(parent: int, name: str, shown: str, *, create: bool) -> int:
    """Folder `name` in state folder `parent`, opened without following a link, checked."""
    for _ in range(_OPEN_ATTEMPTS):
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(name, PRIVATE_DIR_MODE, dir_fd=parent)
                # the umask may have taken owner bits off; `parent` is ours alone, so the
                # name is still the folder just made
                os.chmod(name, PRIVATE_DIR_MODE, dir_fd=parent)
            except FileExistsError:
                pass  # made concurrently; opened and checked like any other
            continue
        except OSError as err:
            if err.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            try:
                st = _lstat_at(parent, name)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                raise _symlink_in_state(shown) from None
            raise StateError(
                f"{shown} should be memoryd's state folder but is not a folder"
            ) from None
        try:
            _trusted_folder(fd, shown)
        except BaseException:
            _close(fd)
            raise
        return fd
    raise StateError(f"{shown} kept appearing and disappearing while being opened")


@contextlib.contextmanager
def _state_folder(path: str | os.PathLike[str], *, create: bool) -> Iterator[int]:
    """A descriptor on the folder `path`, reached the state tree's way (see `private_dir`).

    Raises FileNotFoundError when it (or a folder above it) is missing and `create` is false.
    """
    folder = os.path.normpath(os.path.abspath(os.fspath(path)))
    root = _state_root()
    below = _components_below(folder, root)
    if below is None:
        # a folder of the user's choosing (`store.path`): trusted as configured; `private_dir`
        # makes it private, a file's folder is used as it is
        if create:
            _make_missing(folder)
        fd = _open_configured_folder(folder)
        try:
            if create:
                st = os.fstat(fd)
                _make_private(Path(folder), st, PRIVATE_DIR_MODE, fd)
            yield fd
        finally:
            _close(fd)
        return
    if create:
        _make_missing(root)
    # The root itself may be a link (people move state with one); nothing below it may be.
    fd = _open_configured_folder(root)
    try:
        _trusted_folder(fd, root)
        shown = root
        for name in below:
            shown = os.path.join(shown, name)
            child = _state_child(fd, name, shown, create=create)
            _close(fd)
            fd = child
        yield fd
    finally:
        _close(fd)


def _open_configured_folder(folder: str) -> int:
    """A folder named by configuration (the state root, a `store.path` folder), links followed."""
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    except NotADirectoryError:
        raise StateError(f"{folder} should be memoryd's state folder but is not a folder") from None


def _split(path: str | os.PathLike[str]) -> tuple[str, str]:
    full = os.path.normpath(os.path.abspath(os.fspath(path)))
    return os.path.dirname(full), os.path.basename(full)


def private_dir(path: str | os.PathLike[str]) -> Path:
    """`path` as a folder only its owner can use, missing folders created 0700 whatever the umask.

    Below the state root (`paths.state_dir()`), every folder from the root down must belong to
    this user and not be writable by anyone else: otherwise `StateError` names the folder and the
    fix, and nothing is changed or written. Each folder is opened relative to the one above with
    `O_NOFOLLOW`, so a symlink anywhere below the root is refused (the root itself may be a link).
    Folders of ours that others may only read are set to 0700. A folder outside the state root (a
    `store.path` of the user's choosing) is trusted as configured: created 0700 when missing, set
    to 0700 when ours, refused when it belongs to another user and is open to others.
    Raises `StateError` (`StateReadOnly` for permissions or a read-only mount).
    """
    folder = Path(path)
    try:
        with _state_folder(folder, create=True):
            pass
    except OSError as err:
        raise _state_error(folder, err) from None
    return folder


def check_state_tree(path: str | os.PathLike[str]) -> None:
    """The folders from the state root down to `path` that exist pass `private_dir`'s checks
    (nothing is created): run at start, so an untrusted state tree is refused before anything
    is read from it or written into it. Raises `StateError`.
    """
    try:
        with _state_folder(path, create=False):
            pass
    except FileNotFoundError:
        pass  # not made yet: what exists was checked on the way down
    except OSError as err:
        raise _state_error(Path(path), err) from None


def check_state_path(path: str | os.PathLike[str]) -> Path:
    """`path` before something opens it by name (SQLite, qmd): its folders pass `private_dir`'s
    checks (created when missing) and `path` itself is not a symlink. Raises `StateError`.

    Nothing but this user can change the folders afterwards, so the name stays what was checked.
    """
    file = Path(path)
    parent, name = _split(file)
    try:
        with _state_folder(parent, create=True) as fd:
            try:
                st = _lstat_at(fd, name)
            except FileNotFoundError:
                return file
            if stat.S_ISLNK(st.st_mode):
                raise _symlink_in_state(str(file))
    except OSError as err:
        raise _state_error(file, err) from None
    return file


def private_file(path: str | os.PathLike[str]) -> Path:
    """`path` as a regular file only its owner can read: created empty 0600 when missing, an
    existing one of ours set to 0600. Its folder must exist and pass `private_dir`'s checks; a
    symlink is never followed. Raises `StateError`.
    """
    file = Path(path)
    parent, name = _split(file)
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC
    try:
        with _state_folder(parent, create=False) as dir_fd:
            try:
                fd = os.open(name, flags, PRIVATE_FILE_MODE, dir_fd=dir_fd)
            except OSError as err:
                if err.errno == errno.ELOOP:
                    raise _symlink_in_state(str(file)) from None
                raise
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise StateError(
                        f"{file} should be a memoryd state file but is not a regular file"
                    )
                _make_private(file, st, PRIVATE_FILE_MODE, fd)
            finally:
                _close(fd)
    except OSError as err:
        raise _state_error(file, err) from None
    return file


def _make_private(path: Path, st: os.stat_result, wanted: int, fd: int) -> None:
    mode = stat.S_IMODE(st.st_mode)
    if mode == wanted:
        return
    if st.st_uid != os.geteuid():
        if mode & 0o077:
            raise StateError(
                f"{path} belongs to uid {st.st_uid} and is open to other users "
                f"(mode {mode:o}); memoryd will not keep its state there"
            )
        return  # private already, just not ours to change
    os.fchmod(fd, wanted)


def open_private(path: str | os.PathLike[str]) -> BinaryIO:
    """The state file `path` open for reading (binary), reached like `private_file`: no link
    followed anywhere below the state root, every folder on the way checked.

    Raises `OSError` as `open` would (`ELOOP` for a link at `path`, `FileNotFoundError`), and
    `StateError` when a folder on the way cannot be trusted or `path` is not a regular file.
    """
    file = Path(path)
    parent, name = _split(file)
    with _state_folder(parent, create=False) as dir_fd:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StateError(f"{file} should be a memoryd state file but is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        _close(fd)
        raise


def read_private(path: str | os.PathLike[str]) -> bytes | None:
    """The bytes of the state file `path` (see `open_private`), or None when it or its folder
    does not exist. A link is refused. Raises `StateError`/`StateReadOnly`.
    """
    try:
        with open_private(path) as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _symlink_in_state(str(path)) from None
        raise _state_error(Path(path), err) from None


def create_private_once(path: str | os.PathLike[str], data: bytes) -> bool:
    """Write `data` to the state file `path` unless it exists: True when this call created it.

    The file appears whole or not at all (a temp file linked into place), so concurrent callers
    agree on one content. Its folder must exist. Raises `StateError`.
    """
    target = Path(path)
    parent, name = _split(target)
    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        with _state_folder(parent, create=False) as dir_fd:
            _write_temp(dir_fd, tmp, data)
            try:
                os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
                created = True
            except FileExistsError:
                created = False
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
            _fsync_fd(dir_fd)
            return created
    except OSError as err:
        raise _state_error(target, err) from None


def _write_temp(dir_fd: int, name: str, data: bytes) -> None:
    """A new 0600 file `name` in `dir_fd` holding `data`, fsynced (removed again on failure)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
    fd = os.open(name, flags, PRIVATE_FILE_MODE, dir_fd=dir_fd)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # the umask may have taken owner bits off
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        _close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise
    _close(fd)


#: Files SQLite puts next to a database; each is created with the database file's mode.
SQLITE_SIDE_FILES: Final = ("-wal", "-shm", "-journal")


def private_database(path: str | os.PathLike[str]) -> Path:
    """Prepare an SQLite database path *before any connection to it exists in this process*.

    Opening and closing a descriptor on a database SQLite has open drops every POSIX lock SQLite
    holds on it in this process (a WAL reader's lock included), so never call this on a live
    index: the built-in store checks access and fixes modes by path instead.

    Its folder 0700, the file 0600 (created empty if
    missing, which SQLite accepts as a new database) and any `-wal`/`-shm`/`-journal` left from
    an older run set to 0600. SQLite gives the side files it creates the database's mode.
    """
    db = Path(path)
    private_dir(db.parent)
    private_file(db)
    for suffix in SQLITE_SIDE_FILES:
        side = db.with_name(db.name + suffix)
        if os.path.lexists(side):
            private_file(side)
    return db


def write_private_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace `path` with `data` atomically: a 0600 temp file in the same folder, fsynced,
    renamed over `path`, then the folder fsynced. The temp name does not end in `.md`, so no
    indexer ever picks up a half-written export. The folder must exist and pass `private_dir`'s
    checks; all of it happens through a descriptor on that folder, so a link planted on the way
    or at `path` is refused. Raises `StateError`/`StateReadOnly`.
    """
    target = Path(path)
    parent, name = _split(target)
    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        with _state_folder(parent, create=False) as dir_fd:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISLNK(_lstat_at(dir_fd, name).st_mode):
                    raise _symlink_in_state(str(target))
            _write_temp(dir_fd, tmp, data)
            try:
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
                raise
            _fsync_fd(dir_fd)
    except OSError as err:
        raise _state_error(target, err) from None
