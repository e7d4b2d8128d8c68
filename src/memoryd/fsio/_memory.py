"""Reading and appending one memory file through a checked descriptor."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final, TypeVar

from ..core.layout import MemoryRoot
from ..errors import MemorydError, MemoryReadFailed, MemoryWriteFailed, PathNotAllowed
from ._chain import (
    _APPEND_FLAGS,
    _OPEN_ATTEMPTS,
    _READ_FLAGS,
    _REFUSING_ERRNOS,
    NEW_MEMORY_FILE_MODE,
    _Changed,
    _checked_rel,
    _close,
    _file_problem,
    _fsync_fd,
    _kind_problem,
    _lstat_at,
    _Missing,
    _parent_of,
    _Refused,
    _same_entry,
    _settled,
    _shown,
    _strerror,
)

_READ_CHUNK: Final = 1 << 20
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class FileRead:
    """A memory file's bytes and its `fstat` from before the read (so growth meanwhile is re-read)."""

    data: bytes
    size: int
    mtime_ns: int
    dev: int
    ino: int
    truncated: bool = False

    @property
    def text(self) -> str:
        """`data` as UTF-8, undecodable bytes replaced."""
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


def read_file(
    root: MemoryRoot,
    rel: PurePosixPath | str,
    *,
    anchor: str | os.PathLike[str] | None = None,
    max_bytes: int | None = None,
) -> FileRead | None:
    """`rel` under `root` through a checked descriptor, None if missing; raises `PathNotAllowed`
    when a rule refuses it, else `MemoryReadFailed`."""
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
    """`consume(blocks of rel)` as `read_file` checks it, reading only as far as it pulls; it must
    be pure, since a file that changed meanwhile is read again."""
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
        failure = MemoryReadFailed(f"cannot read {shown}: {_strerror(err)}", reason=_strerror(err))
        raise _refusal_or(shown, err, failure) from None


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


def _refusal_or(shown: str, err: OSError, failure: MemorydError) -> MemorydError:
    """`PathNotAllowed` when `err` means the path is not one memoryd serves, else `failure`."""
    refusal = _REFUSING_ERRNOS.get(err.errno or 0)
    return failure if refusal is None else PathNotAllowed(f"{shown} {refusal}")


@contextlib.contextmanager
def _write_errors(shown: str, doing: str, missing: str) -> Iterator[None]:
    """A write's failures as one-line errors: `cannot {doing} {shown}: …`, or `PathNotAllowed`."""
    try:
        yield
    except _Missing:
        raise MemoryWriteFailed(f"cannot {doing} {shown}: {missing}") from None
    except _Refused as refusal:
        raise PathNotAllowed(f"{shown} {refusal.detail}") from None
    except OSError as err:
        failure = MemoryWriteFailed(f"cannot {doing} {shown}: {_strerror(err)}")
        raise _refusal_or(shown, err, failure) from None


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
    """Append `payload` on a new line (after `new_file_prefix` in a new file) under an exclusive
    `flock`, durably or not at all: a failed write is cut back (`MemoryWriteFailed`)."""
    parts = _checked_rel(root, rel)
    shown = _shown(root, parts)
    with (
        _write_errors(shown, "append to", "its folder does not exist"),
        _parent_of(root, parts, anchor, create=create_dirs) as (parent, root_dev),
    ):
        return _append_in(
            parent, parts[-1], root_dev, payload, new_file_prefix, lock_timeout, shown
        )


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
            last = attempt + 1 == _OPEN_ATTEMPTS
            st = _lock_checked(parent, name, fd, root_dev, lock_timeout, shown, not created, last)
            if st is None:
                continue
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


def _lock_checked(
    parent: int,
    name: str,
    fd: int,
    root_dev: int,
    lock_timeout: float,
    shown: str,
    settle: bool,
    last: bool,
) -> os.stat_result | None:
    """`fd` checked, then held under the writers' lock; None when the name no longer holds it (a
    writer we waited for replaced the file): open again, unless this was the `last` attempt."""
    st = os.fstat(fd)
    problem = _file_problem(st, root_dev)
    if problem is not None:
        raise problem
    _lock(fd, lock_timeout, shown)
    try:
        _same_entry(parent, name, st)
        if settle:
            _settled(parent, name, fd, os.fstat(fd))
    except (_Refused, _Missing):
        if not last:
            return None
        raise _Refused("changed", "was replaced while being opened") from None
    return st


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
    """Write and fsync `data` at the end of `fd` and return its offset; a failure cuts back to it."""
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
