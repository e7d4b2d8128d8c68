"""Rewriting one memory file through a checked descriptor, under the appenders' lock."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import PurePosixPath

from ..core.layout import MemoryRoot
from ..errors import MemoryWriteFailed
from ._chain import (
    _APPEND_FLAGS,
    _OPEN_ATTEMPTS,
    _checked_rel,
    _close,
    _fsync_fd,
    _kind_problem,
    _lstat_at,
    _Missing,
    _parent_of,
    _Refused,
    _shown,
    _strerror,
    write_new,
)
from ._memory import _lock_checked, _read_fd, _write_errors


def rewrite_file(
    root: MemoryRoot,
    rel: PurePosixPath | str,
    edit: Callable[[bytes], bytes],
    *,
    anchor: str | os.PathLike[str] | None = None,
    lock_timeout: float = 30.0,
) -> None:
    """Replace the memory file `rel` with `edit(its bytes)` via an fsynced temp file renamed over
    it, all or nothing, under the appenders' `flock` so no append is lost (`edit` may raise)."""
    parts = _checked_rel(root, rel)
    shown = _shown(root, parts)
    with (
        _write_errors(shown, "rewrite", "it does not exist"),
        _parent_of(root, parts, anchor, create=False) as (parent, root_dev),
    ):
        _rewrite_in(parent, parts[-1], root_dev, edit, lock_timeout, shown)


def _rewrite_in(
    parent: int,
    name: str,
    root_dev: int,
    edit: Callable[[bytes], bytes],
    lock_timeout: float,
    shown: str,
) -> None:
    for attempt in range(_OPEN_ATTEMPTS):
        try:
            before = _lstat_at(parent, name)
        except FileNotFoundError:
            raise _Missing() from None
        problem = _kind_problem(before)
        if problem is not None:
            raise problem
        fd = os.open(name, _APPEND_FLAGS, dir_fd=parent)
        try:
            last = attempt + 1 == _OPEN_ATTEMPTS
            if _lock_checked(parent, name, fd, root_dev, lock_timeout, shown, True, last) is None:
                continue
            held = os.fstat(fd)
            os.lseek(fd, 0, os.SEEK_SET)
            new = edit(_read_fd(fd, held.st_size, None)[0])
            _replace(parent, name, new, stat.S_IMODE(held.st_mode), shown)
            return
        finally:
            _close(fd)  # after the rename: a waiting appender then finds the new file
    raise _Refused("changed", "was replaced while being opened")  # pragma: no cover


def _replace(parent: int, name: str, data: bytes, mode: int, shown: str) -> None:
    import secrets  # only when a file is rewritten

    tmp = f".{name}.memoryd-{secrets.token_hex(4)}.tmp"
    try:
        write_new(parent, tmp, data, mode)
        os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=parent)
        if isinstance(err, OSError):
            raise MemoryWriteFailed(
                f"cannot rewrite {shown}: {_strerror(err)}; the file is unchanged"
            ) from None
        raise
    _fsync_fd(parent)
