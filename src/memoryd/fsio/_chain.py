"""Memory files read, appended and rewritten through a chain of descriptors opened one folder at
a time, and the rules that chain checks."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import Final, Literal, NamedTuple, TypeVar

from ..core.layout import MAX_DEPTH, SKIP_DIRS, MemoryRoot
from ..errors import MemoryReadFailed, MemoryWriteFailed, PathNotAllowed

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
#: How long a writer waits for another writer of the same memory file.
_LOCK_TIMEOUT_S: Final = 30.0
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


def _child_dir(
    parent: int, name: str, *, create: bool, mode: int = NEW_MEMORY_DIR_MODE, durable: bool = True
) -> int:
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
        # a concurrent writer may have made it: it is opened and checked like any other folder
        with contextlib.suppress(FileExistsError):
            # never group/world-writable, whatever the umask: a writable memory folder would let
            # another user plant notes (or links) the agent then reads as its own
            os.mkdir(name, mode, dir_fd=parent)
            if durable:
                _fsync_fd(parent)
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
    try:
        return PurePosixPath(path).relative_to(base).parts
    except ValueError:
        return None


def _open_root(root_path: str, anchor: str | os.PathLike[str] | None, *, create: bool) -> int:
    """A descriptor on the root folder, opened by the anchor rule (see the module docstring)."""
    root = os.path.normpath(root_path)
    base = None if anchor is None else os.path.normpath(os.fspath(anchor))
    below = None if base is None else _components_below(root, base)
    if base is not None and below is not None:
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


class _Target(NamedTuple):
    """A memory file about to be opened: its folder's descriptor, its name, the memory root's
    device, and the path its errors show."""

    parent: int
    name: str
    root_dev: int
    shown: str


@contextlib.contextmanager
def _file_at(
    root: MemoryRoot,
    rel: PurePosixPath | str,
    anchor: str | os.PathLike[str] | None,
    *,
    create: bool,
    doing: str,
    missing: str | None,
) -> Iterator[_Target]:
    """The checked folder of `rel`, failures as one line: `PathNotAllowed` when a rule refuses,
    else `cannot {doing} <path>: …`; a missing file or folder is `missing` (None: `_Missing`)."""
    parts = _checked_rel(root, rel)
    shown = _shown(root, parts)
    try:
        fd = _open_root(root.path, anchor, create=create)
        try:
            root_dev = os.fstat(fd).st_dev
        except BaseException:
            _close(fd)
            raise
        fd = _descend(fd, parts[:-1], create=create, below_root=True)
        try:
            yield _Target(fd, parts[-1], root_dev, shown)
        finally:
            _close(fd)
    except _Missing:
        if missing is None:
            raise
        raise MemoryWriteFailed(f"cannot {doing} {shown}: {missing}") from None
    except _Refused as refusal:
        raise PathNotAllowed(f"{shown} {refusal.detail}") from None
    except OSError as err:
        why = f"cannot {doing} {shown}: {_strerror(err)}"
        gist = _REFUSING_ERRNOS.get(err.errno or 0)
        if gist is not None:
            raise PathNotAllowed(f"{shown} {gist}") from None
        if doing == "read":
            raise MemoryReadFailed(why, reason=_strerror(err)) from None
        raise MemoryWriteFailed(why) from None


def _check_kind(parent: int, name: str) -> None:
    """A link, folder, FIFO or device at `name` is refused before anything opens it."""
    try:
        before = _lstat_at(parent, name)
    except FileNotFoundError:
        raise _Missing() from None
    problem = _kind_problem(before)
    if problem is not None:
        raise problem


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


@contextlib.contextmanager
def temp_file(dir_fd: int, name: str, data: bytes, mode: int) -> Iterator[str]:
    """A new fsynced file next to `name` (not named `*.md`) holding `data` with `mode` whatever
    the umask, removed if still there afterwards; the folder is fsynced once the body succeeds."""
    import secrets  # only when a file is written

    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
    fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            _close(fd)
        yield tmp
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
    _fsync_fd(dir_fd)


def _strerror(err: OSError) -> str:
    return err.strerror or str(err)


_READ_CHUNK: Final = 1 << 20
_T = TypeVar("_T")


class FileRead(NamedTuple):
    """A memory file's bytes and its `fstat` from before the read (so growth meanwhile is re-read)."""

    data: bytes
    size: int
    mtime_ns: int
    truncated: bool

    @property
    def text(self) -> str:
        """`data` as UTF-8, undecodable bytes replaced."""
        return self.data.decode("utf-8", errors="replace")


class AppendOutcome(NamedTuple):
    """What `append_file` wrote: all of it, durably."""

    created: bool
    bytes_written: int


def read_file(
    root: MemoryRoot,
    rel: PurePosixPath | str,
    *,
    anchor: str | os.PathLike[str] | None = None,
    max_bytes: int | None = None,
) -> FileRead | None:
    """`rel` under `root` through a checked descriptor, None if missing; raises `PathNotAllowed`
    when a rule refuses it, else `MemoryReadFailed`."""
    # one byte past the limit tells whether the file held more than was asked for
    want = -1 if max_bytes is None else max_bytes + 1
    got = _read_checked(root, rel, anchor, lambda fd: _read_fd(fd, want))
    if got is None:
        return None
    data, st = got
    cut = max_bytes is not None and len(data) > max_bytes
    return FileRead(data[:max_bytes], st.st_size, st.st_mtime_ns, cut)


def read_file_with(
    root: MemoryRoot,
    rel: PurePosixPath | str,
    consume: Callable[[Iterator[bytes]], _T],
    *,
    anchor: str | os.PathLike[str] | None = None,
) -> _T | None:
    """`consume(blocks of rel)` as `read_file` checks it, reading only as far as it pulls; it must
    be pure, since a file that changed meanwhile is read again."""
    got = _read_checked(root, rel, anchor, lambda fd: consume(_blocks(fd)))
    return None if got is None else got[0]


def _read_fd(fd: int, size: int = -1) -> bytes:
    """`size` bytes of `fd` from where it stands (all of it if -1), however many reads it takes."""
    with open(fd, "rb", closefd=False) as fh:
        return fh.read(size)


def _blocks(fd: int) -> Iterator[bytes]:
    while block := os.read(fd, _READ_CHUNK):
        yield block


def _read_checked(
    root: MemoryRoot,
    rel: PurePosixPath | str,
    anchor: str | os.PathLike[str] | None,
    read: Callable[[int], _T],
) -> tuple[_T, os.stat_result] | None:
    """`read(fd)` on the checked descriptor of `rel`, and its `fstat`; None when missing."""
    try:
        with _file_at(root, rel, anchor, create=False, doing="read", missing=None) as t:
            _check_kind(t.parent, t.name)
            for attempt in range(_OPEN_ATTEMPTS):
                try:
                    fd = os.open(t.name, _READ_FLAGS, dir_fd=t.parent)
                except FileNotFoundError:
                    raise _Missing() from None
                try:
                    st = os.fstat(fd)
                    if st.st_nlink == 0:
                        raise _Missing()  # deleted between the open and the fstat
                    problem = _file_problem(st, t.root_dev)
                    if problem is not None:
                        raise problem
                    _same_entry(t.parent, t.name, st)
                    value = read(fd)
                    try:
                        _settled(t.parent, t.name, fd, st)
                    except _Changed:
                        if attempt + 1 < _OPEN_ATTEMPTS:
                            continue  # written meanwhile: read it again
                        raise
                finally:
                    _close(fd)
                return value, st
            raise _Changed()  # pragma: no cover - the loop returns or raises
    except _Missing:
        return None


def append_file(
    root: MemoryRoot,
    rel: PurePosixPath | str,
    payload: bytes,
    *,
    anchor: str | os.PathLike[str] | None = None,
    new_file_prefix: bytes = b"",
) -> AppendOutcome:
    """Append `payload` on a new line (after `new_file_prefix` in a new file) under an exclusive
    `flock`, durably or not at all: a failed write is cut back (`MemoryWriteFailed`)."""
    missing = "its folder does not exist"
    with _file_at(root, rel, anchor, create=True, doing="append to", missing=missing) as t:
        fd, created = _open_locked(t, create=True)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                data = new_file_prefix + payload
            elif os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + payload
            else:
                data = payload
            _write_all_or_nothing(fd, data, t.shown)
        finally:
            _close(fd)  # also releases the flock
        if created:
            _fsync_fd(t.parent)
        return AppendOutcome(created, len(data))


def _open_locked(t: _Target, *, create: bool) -> tuple[int, bool]:
    """(descriptor, created) on `t`, checked, then held under the writers' lock; opened again
    when a writer we waited for replaced the file meanwhile."""
    for attempt in range(_OPEN_ATTEMPTS):
        fd, created = _open_for_write(t, create=create)
        try:
            st = os.fstat(fd)
            problem = _file_problem(st, t.root_dev)
            if problem is not None:
                raise problem
            _lock(fd, t.shown)
            try:
                _same_entry(t.parent, t.name, st)
                if not created:
                    _settled(t.parent, t.name, fd, os.fstat(fd))
                return fd, created
            except (_Refused, _Missing):
                if attempt + 1 == _OPEN_ATTEMPTS:
                    raise _Refused("changed", "was replaced while being opened") from None
        except BaseException:
            _close(fd)
            raise
        _close(fd)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _open_for_write(t: _Target, *, create: bool) -> tuple[int, bool]:
    """(descriptor, created): O_EXCL tells a new file from an existing empty one."""
    for _ in range(_OPEN_ATTEMPTS):
        with contextlib.suppress(FileNotFoundError, FileExistsError):  # it came or went meanwhile
            try:
                _check_kind(t.parent, t.name)
            except _Missing:
                if not create:
                    raise
                flags = _APPEND_FLAGS | os.O_CREAT | os.O_EXCL
                return os.open(t.name, flags, NEW_MEMORY_FILE_MODE, dir_fd=t.parent), True
            return os.open(t.name, _APPEND_FLAGS, dir_fd=t.parent), False
    raise _Refused("changed", "kept appearing and disappearing while being opened")


def _lock(fd: int, shown: str) -> None:
    deadline = time.monotonic() + _LOCK_TIMEOUT_S
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


def _write_all_or_nothing(fd: int, data: bytes, shown: str) -> None:
    """Write and fsync `data` at the end of `fd`; a failure cuts the file back to where it ended."""
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
        tail = "nothing was left behind"
        if start is not None:
            try:
                os.ftruncate(fd, start)
                os.fsync(fd)
            except OSError:
                tail = "it could not be cut back and may end with a partial record"
        if not isinstance(err, OSError):
            raise
        raise MemoryWriteFailed(f"cannot append to {shown}: {_strerror(err)}; {tail}") from None


def rewrite_file(
    root: MemoryRoot,
    rel: PurePosixPath | str,
    edit: Callable[[bytes], bytes],
    *,
    anchor: str | os.PathLike[str] | None = None,
) -> None:
    """Replace the memory file `rel` with `edit(its bytes)` via an fsynced temp file renamed over
    it, all or nothing, under the appenders' `flock` so no append is lost (`edit` may raise)."""
    with _file_at(
        root, rel, anchor, create=False, doing="rewrite", missing="it does not exist"
    ) as t:
        fd, _ = _open_locked(t, create=False)
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            data = edit(_read_fd(fd))
            try:
                with temp_file(t.parent, t.name, data, mode) as tmp:
                    os.rename(tmp, t.name, src_dir_fd=t.parent, dst_dir_fd=t.parent)
            except OSError as err:
                raise MemoryWriteFailed(
                    f"cannot rewrite {t.shown}: {_strerror(err)}; the file is unchanged"
                ) from None
        finally:
            _close(fd)  # after the rename: a waiting appender then finds the new file
