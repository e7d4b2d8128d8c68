"""SQLite plumbing: the binding, error codes, sqlite-vec, and the file's mode, damage and scratch."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import importlib.util
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from ..errors import IndexCorrupt, StateReadOnly
from ..fsio import PRIVATE_FILE_MODE, SQLITE_SIDE_FILES, check_state_path, private_dir, private_file
from ._common import Recovery

log = logging.getLogger("memoryd.builtin_index")

#: Readers wait this long for a lock (WAL readers only meet one during recovery or a checkpoint).
BUSY_TIMEOUT_MS = 5000
#: A write waits this long for another process's write transaction (a first build, a publish).
WRITE_WAIT_MS = 60_000
#: After a checkpoint the WAL is cut back to this size (a publish writes the whole index once).
JOURNAL_SIZE_LIMIT = 16 * 1024 * 1024
#: A new index's page size: 4 KiB pages hold only two ~1.6 KB chunks each, leaving a fifth of
#: the `chunks` table empty; an existing index keeps the size it has.
PAGE_SIZE = 8192

SCRATCH_INFIX: Final = ".reindex-"
CORRUPT_INFIX: Final = ".corrupt-"
_STAMP: Final = "%Y%m%dT%H%M%SZ"

#: Scratch files this process is filling: a sweep in this process must not open them.
ACTIVE_SCRATCH: set[str] = set()
ACTIVE_LOCK = threading.Lock()


class Damaged(Exception):
    """The file at the index path is not a usable database (internal: triggers a move aside)."""


class ReadOnly(Exception):
    """The index can be read but not written here (internal: triggers a read-only open)."""


def _binding() -> tuple[ModuleType, str]:
    try:
        import sqlean

        return sqlean, "sqlean"
    except ImportError:
        return sqlite3, "sqlite3"


def db_errors() -> tuple[type[BaseException], ...]:
    module, _ = _binding()
    return (sqlite3.Error, module.Error)


def code(err: BaseException) -> int:
    """The primary result code (`sqlite3.SQLITE_*`): the low byte of an extended one."""
    return int(getattr(err, "sqlite_errorcode", 0) or 0) & 0xFF


def identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def strerror(err: OSError) -> str:
    return err.strerror or str(err)


def state_refusal(err: OSError) -> bool:
    return err.errno in (errno.EACCES, errno.EPERM, errno.EROFS)


def migrate(conn: Any, migrations: Sequence[tuple[str, Callable[[Any], None]]]) -> None:
    """Apply pending migrations in order, each in its own transaction (SQLite errors unchanged)."""
    conn.execute(
        "create table if not exists migrations (id text primary key, applied_at real not null)"
    )
    done = {row[0] for row in conn.execute("select id from migrations")}
    for mig_id, func in migrations:
        if mig_id in done:
            continue
        conn.execute("begin immediate")
        try:
            # another process may have applied it while we waited for the write lock
            if not conn.execute("select 1 from migrations where id = ?", (mig_id,)).fetchone():
                func(conn)
                conn.execute(
                    "insert into migrations(id, applied_at) values (?, ?)", (mig_id, time.time())
                )
            conn.execute("commit")
        except BaseException:
            rollback(conn)
            raise


def rollback(conn: Any) -> None:
    # SQLite may have rolled back on its own (a full disk), or a recovery closed the connection:
    # a second rollback would raise
    with contextlib.suppress(Exception):
        if conn.in_transaction:
            conn.execute("rollback")


@functools.cache
def _bundled_vec_path() -> str:
    """sqlite-vec's `vec0` library, found without importing the package (which loads numpy)."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("sqlite-vec is not installed (pip install sqlite-vec)")
    return os.path.normpath(os.path.join(next(iter(spec.submodule_search_locations)), "vec0"))


def load_vec(conn: Any, extension_path: str | None) -> str | None:
    """Load sqlite-vec into conn; returns an error message, or None on success."""
    if not hasattr(conn, "enable_load_extension"):
        return "this Python's sqlite3 cannot load extensions (install sqlean.py)"
    try:
        conn.enable_load_extension(True)
        conn.load_extension(extension_path or _bundled_vec_path())
        conn.enable_load_extension(False)
        conn.execute("select vec_version()").fetchone()
    except Exception as err:  # the binding raises its own OperationalError/AttributeError types
        return f"sqlite-vec failed to load: {err}"
    return None


def inspect(path: Path) -> str | None:
    """Why `path` cannot be an index file, or None; never opened (a close drops SQLite's locks)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"cannot inspect it: {strerror(err)}"
    kinds = {stat.S_ISDIR: "a folder", stat.S_ISLNK: "a symlink", stat.S_ISFIFO: "a FIFO"}
    for test, kind in kinds.items():
        if test(st.st_mode):
            return f"{kind} is in its place"
    if not stat.S_ISREG(st.st_mode):
        return "a special file is in its place"
    if not os.access(path, os.R_OK):
        return "the file cannot be read: Permission denied"
    return None


def make_private(path: Path, *, own_folder: bool = True) -> None:
    """The file and side files owner-only (by path), and the folder 0700 if memoryd's own."""
    if own_folder or not os.path.lexists(path.parent):
        private_dir(path.parent)
    names = (path, *(Path(f"{path}{s}") for s in SQLITE_SIDE_FILES))
    if own_folder:
        # SQLite opens these by name: in memoryd's folder no link may stand in for them
        for name in names:
            check_state_path(name)
    if not os.path.lexists(path):
        private_file(path)
    for name in names:
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            continue
        mine = stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
        if mine and stat.S_IMODE(st.st_mode) != PRIVATE_FILE_MODE:
            os.chmod(name, PRIVATE_FILE_MODE)


def move_aside(path: Path, reason: str) -> Path | None:
    """Rename a damaged file and its side files to `<name>.corrupt-<UTC time>`; None if gone."""
    if not os.path.lexists(path):
        return None
    stamp = time.strftime(_STAMP, time.gmtime())
    dest = base = path.with_name(f"{path.name}{CORRUPT_INFIX}{stamp}")
    n = 1
    while os.path.lexists(dest):
        dest = base.with_name(f"{base.name}-{n}")
        n += 1
    try:
        os.rename(path, dest)
    except FileNotFoundError:
        return None
    except OSError as err:
        cls = StateReadOnly if state_refusal(err) else IndexCorrupt
        raise cls(
            f"index {path} is damaged ({reason}) and cannot be moved aside: {strerror(err)}"
        ) from None
    for suffix in SQLITE_SIDE_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.rename(f"{path}{suffix}", f"{dest}{suffix}")
    log.warning(
        "index %s was damaged (%s): moved to %s; rebuilding from the Markdown files",
        path,
        reason,
        dest,
    )
    return dest


def moved_aside(path: Path, recorded: dict[str, Any]) -> list[Recovery]:
    """The damaged files moved aside beside `path`, with the reasons `recorded` for them."""
    prefix = f"{path.name}{CORRUPT_INFIX}"
    try:
        names = sorted(os.listdir(path.parent))
    except OSError:
        return []
    out = []
    for name in names:
        if not name.startswith(prefix) or name.endswith(SQLITE_SIDE_FILES):
            continue
        info = recorded.get(name) or {}
        at = info.get("at")
        if at is None:
            import calendar  # only for a damaged file moved aside

            with contextlib.suppress(ValueError):
                stamp = name[len(prefix) :].split("-")[0]
                at = float(calendar.timegm(time.strptime(stamp, _STAMP)))
        out.append(Recovery(path.parent / name, info.get("reason"), at))
    return out


def sweep_scratch(path: Path) -> None:
    """Delete the scratch files of `path`'s rebuilds that died (nobody holds their lock)."""
    folder = path.parent
    prefix = f"{path.name}{SCRATCH_INFIX}"
    try:
        names = os.listdir(folder)
    except OSError:
        return
    ours = [n for n in names if n.startswith(prefix)]
    bases = {n for n in ours if n.endswith(".tmp")}
    with ACTIVE_LOCK:
        mine = {Path(p).name for p in ACTIVE_SCRATCH if Path(p).parent == folder}
    for base in bases - mine:  # opening this process's own would drop its locks
        scratch = folder / base
        try:
            fd = os.open(scratch, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a rebuild in progress
            remove_db_files(scratch)
            log.warning("removed %s, left by a rebuild that did not finish", scratch)
        finally:
            os.close(fd)
    for name in ours:
        side = next((s for s in SQLITE_SIDE_FILES if name.endswith(".tmp" + s)), None)
        if side is not None and name[: -len(side)] not in bases | mine:
            with contextlib.suppress(OSError):
                os.unlink(folder / name)


def remove_db_files(path: Path) -> list[str]:
    """Delete a database and its side files; the ones that were there."""
    removed = []
    for suffix in ("", *SQLITE_SIDE_FILES):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
            removed.append(f"{path}{suffix}")
    return removed
