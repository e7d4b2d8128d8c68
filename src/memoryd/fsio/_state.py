"""memoryd's private state: folders 0700 and files 0600 that only their owner can change, and
emptying them (`memoryd reset`)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import BinaryIO, Final

from .. import paths
from ..errors import StateError, StateReadOnly
from ._chain import (
    _CLOEXEC,
    _READ_FLAGS,
    _child_dir,
    _close,
    _components_below,
    _lstat_at,
    _Missing,
    _Refused,
    _strerror,
    temp_file,
)

PRIVATE_DIR_MODE: Final = 0o700
PRIVATE_FILE_MODE: Final = 0o600


def _state_error(path: Path | str, err: OSError) -> StateError:
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StateReadOnly(f"cannot write memoryd state at {path}: {_strerror(err)}")
    return StateError(f"cannot use memoryd state at {path}: {_strerror(err)}")


def _trusted_folder(fd: int, shown: str) -> None:
    """`fd` is a state folder only this user can change (then made 0700), else `StateError`."""
    st = os.fstat(fd)
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISDIR(st.st_mode):
        raise _not_a_folder(shown)
    if st.st_uid != os.geteuid():
        raise StateError(
            f"memoryd state folder {shown} belongs to uid {st.st_uid}, not to you "
            f"(uid {os.geteuid()}): remove it or point MEMORYD_STATE_DIR at a folder of your own"
        )
    if mode & 0o022:
        raise StateError(
            f"memoryd state folder {shown} is writable by other users (mode {mode:o}), so "
            f"anyone could plant files in it: check what it holds, then run: chmod 700 {shown}"
        )
    if mode != PRIVATE_DIR_MODE:
        os.fchmod(fd, PRIVATE_DIR_MODE)


def _not_a_folder(shown: str) -> StateError:
    return StateError(f"{shown} should be memoryd's state folder but is not a folder")


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
    """Folder `name` in state folder `parent`, opened as a memory folder is, then checked."""
    try:
        # not fsynced: state can be rebuilt, and a one-off command may make the whole tree
        fd = _child_dir(parent, name, create=create, mode=PRIVATE_DIR_MODE, durable=False)
    except _Missing:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), shown) from None
    except _Refused as refusal:
        if refusal.reason == "symlink":
            raise _symlink_in_state(shown) from None
        if refusal.reason == "not_a_folder":
            raise _not_a_folder(shown) from None
        raise StateError(f"{shown} kept appearing and disappearing while being opened") from None
    try:
        _trusted_folder(fd, shown)  # also sets 0700, which the umask may have cut
    except BaseException:
        _close(fd)
        raise
    return fd


@contextlib.contextmanager
def _state_folder(path: str | os.PathLike[str], *, create: bool) -> Iterator[int]:
    """A descriptor on the folder `path`, reached the state tree's way (see `private_dir`)."""
    folder = os.path.normpath(os.path.abspath(os.fspath(path)))
    root = os.path.normpath(os.fspath(paths.state_dir()))
    below = _components_below(folder, root)
    # A folder outside the state tree (`store.path`) is trusted as configured; the state root
    # itself may be a link (people move state with one), but nothing below it may be.
    top = folder if below is None else root
    if create:
        _make_missing(top)
    try:
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    except NotADirectoryError:
        raise _not_a_folder(top) from None
    try:
        if below is None and create:
            _make_private(Path(folder), os.fstat(fd), PRIVATE_DIR_MODE, fd)
        elif below is not None:
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


@contextlib.contextmanager
def _state_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """OS errors on the way to `path` as `StateError` (`StateReadOnly` where it cannot write)."""
    try:
        yield
    except OSError as err:
        raise _state_error(Path(path), err) from None


@contextlib.contextmanager
def _entry(path: str | os.PathLike[str], *, create: bool = False) -> Iterator[tuple[int, str]]:
    """(its folder, reached the state tree's way; its name) for `path`; OS errors as StateError."""
    full = os.path.normpath(os.path.abspath(os.fspath(path)))
    with _state_errors(path), _state_folder(os.path.dirname(full), create=create) as dir_fd:
        yield dir_fd, os.path.basename(full)


def private_dir(path: str | os.PathLike[str]) -> Path:
    """`path` as a folder only its owner can use, missing folders created 0700 whatever the umask."""
    with _state_errors(path), _state_folder(path, create=True):
        pass
    return Path(path)


def check_state_tree(path: str | os.PathLike[str]) -> None:
    """The existing folders down to `path` pass `private_dir`'s checks (nothing is created)."""
    # a folder not made yet is no error: what exists was checked on the way down
    with (
        _state_errors(path),
        contextlib.suppress(FileNotFoundError),
        _state_folder(path, create=False),
    ):
        pass


def check_state_path(path: str | os.PathLike[str]) -> Path:
    """`path`, about to be opened by name (SQLite, qmd), in checked folders and not a symlink."""
    file = Path(path)
    with _entry(file, create=True) as (fd, name):
        try:
            st = _lstat_at(fd, name)
        except FileNotFoundError:
            return file
        if stat.S_ISLNK(st.st_mode):
            raise _symlink_in_state(str(file))
    return file


def private_file(path: str | os.PathLike[str]) -> Path:
    """`path` as a regular 0600 file (created empty if missing); a symlink raises `StateError`."""
    file = Path(path)
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC
    with _entry(file) as (dir_fd, name):
        try:
            fd = os.open(name, flags, PRIVATE_FILE_MODE, dir_fd=dir_fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise _symlink_in_state(str(file)) from None
            raise
        try:
            _make_private(file, _regular(fd, file), PRIVATE_FILE_MODE, fd)
        finally:
            _close(fd)
    return file


def _regular(fd: int, file: Path) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise StateError(f"{file} should be a memoryd state file but is not a regular file")
    return st


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
    """The state file `path` open for reading (binary), reached like `private_file`."""
    file = Path(path)
    full = os.path.normpath(os.path.abspath(file))
    with _state_folder(os.path.dirname(full), create=False) as dir_fd:
        fd = os.open(os.path.basename(full), _READ_FLAGS, dir_fd=dir_fd)
    try:
        _regular(fd, file)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        _close(fd)
        raise


def read_private(path: str | os.PathLike[str]) -> bytes | None:
    """The bytes of the state file `path` (see `open_private`), or None when it does not exist."""
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
    """Write `data` to `path` whole (a temp file linked into place) unless it exists: True if it did."""
    with _entry(path) as (dir_fd, name), temp_file(dir_fd, name, data, PRIVATE_FILE_MODE) as tmp:
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            return False
    return True


def write_private_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace `path` with `data` via a fsynced 0600 temp file (not named `*.md`) renamed over it."""
    with _entry(path) as (dir_fd, name):
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISLNK(_lstat_at(dir_fd, name).st_mode):
                raise _symlink_in_state(str(Path(path)))
        with temp_file(dir_fd, name, data, PRIVATE_FILE_MODE) as tmp:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


#: Files SQLite puts next to a database; each is created with the database file's mode.
SQLITE_SIDE_FILES: Final = ("-wal", "-shm", "-journal")


def wipe_folder(folder: Path, keep: Collection[Path] = ()) -> list[Path]:
    """Delete everything in `folder` except the paths in `keep` and the folders holding them;
    what was deleted. Symlinks are removed, never followed. Raises `StateError`."""
    try:
        found = sorted(folder.iterdir())
    except FileNotFoundError:
        return []
    except OSError as err:
        raise StateError(f"cannot empty {folder}: {err.strerror or err}") from None
    gone: list[Path] = []
    for entry in found:
        if entry in keep:
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                if any(k.is_relative_to(entry) for k in keep):
                    gone += wipe_folder(entry, keep)
                    continue
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)
        except OSError as err:
            raise StateError(f"cannot remove {entry}: {err.strerror or err}") from None
        gone.append(entry)
    return gone
