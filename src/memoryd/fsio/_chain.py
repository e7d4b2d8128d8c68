"""The descriptor chain every memory read and write goes through, and the rules it checks."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Final, Literal

from ..core.layout import MAX_DEPTH, SKIP_DIRS, MemoryRoot
from ..errors import PathNotAllowed

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


class _Refused(Exception):
    """An entry on the way breaks a rule; becomes `PathNotAllowed` or a walk's `Skipped`."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason: Reason = reason
        self.detail = detail


class _Missing(Exception):
    """A component does not exist (a missing note is not an error for a reader)."""


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
        return _hard_link(st)
    if st.st_dev != root_dev:
        return _Refused("other_device", "lies on another file system than its memory folder")
    return None


def _hard_link(st: os.stat_result) -> _Refused:
    return _Refused(
        "hard_link", f"has {st.st_nlink} hard links (memoryd serves only files with a single name)"
    )


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
    for made in (False, True):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if made:
                raise _Refused("changed", f"{name} disappeared while being created") from None
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
    raise AssertionError("unreachable: the second open returns or raises")


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
    """The name still refers to the inode we hold, with one link (catches a link-and-unlink swap)."""
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
    """The name is this file's only one once link/unlink in flight finished: an `unlink` leaves a
    window where a dying name still resolves, so wait out a ctime tick and check twice."""
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
            raise _hard_link(now)
        _same_entry(parent, name, now)


def _barrier(parent: int) -> None:
    """Wait for every link, unlink and rename in flight in the folder (readdir takes its lock)."""
    with os.scandir(parent) as entries:
        next(entries, None)


def write_new(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """A new file `name` in `dir_fd` holding `data` with `mode` whatever the umask, fsynced (or
    removed again)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
    fd = os.open(name, flags, mode, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)
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


def _strerror(err: OSError) -> str:
    return err.strerror or str(err)
