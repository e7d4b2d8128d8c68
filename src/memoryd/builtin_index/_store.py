"""The SQLite side of the built-in index: connections, migrations, FTS5, vectors, embedding cache,
and keeping the file usable: atomic publishing, corruption recovery, read-only use.

Connections come from `sqlean` (a DB-API sqlite3 twin that bundles a modern SQLite able to load
extensions) so sqlite-vec's `vec0` works in the default install; the stdlib `sqlite3` is used
when it can load extensions, and a numpy brute-force search stands in when no vec0 can load.

A live index has two connections in WAL mode. The writer runs every change inside one
`BEGIN IMMEDIATE` transaction (`Store.transaction`; a sync's whole text phase is one), so a full
disk or a kill leaves the last committed index, never half of one. The reader serves searches:
inside `Store.snapshot()` a thread pins one WAL snapshot, so all the reads a search makes see
the same index whatever another process commits meanwhile. Other reads (the sync phases') go
through the writer, which sees their own transaction.

A rebuild fills a scratch database beside the index (`<name>.reindex-<pid>-<hex>.tmp`, `flock`ed
while in use, swept once its owner is gone) and `publish` copies it into the live file with
SQLite's backup API: one write transaction, so readers in every process switch from the complete
old index to the complete new one. The live file is never unlinked or renamed under them.

A damaged file (not a database, malformed pages, a folder or another kind of file in its place, an
unreadable file) is moved aside as `<name>.corrupt-<UTC time>` with its -wal/-shm, never deleted,
and a fresh index takes its place; the owner (`MemoryIndex`) rebuilds it from the Markdown files.
A state folder that cannot be written opens the index read-only (`mode=ro`, or `immutable=1` when
not even the -shm can be created): searches work and every write raises `StateReadOnly`.
"""

from __future__ import annotations

import calendar
import contextlib
import errno
import fcntl
import functools
import importlib.util
import json
import logging
import os
import secrets
import sqlite3
import stat
import threading
import time
import urllib.parse
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # numpy is imported where used: a keyword-only search never loads it
    import numpy as np

from ..core.text import segment_for_fts
from ..errors import IndexCorrupt, IndexError_, MemorydError, StateError, StateReadOnly
from ..fsio import (
    PRIVATE_FILE_MODE,
    SQLITE_SIDE_FILES,
    check_state_path,
    private_dir,
    private_file,
)
from ._postings import Postings, or_phrases, vocab_tables_sql

log = logging.getLogger("memoryd.builtin_index")

#: The keyword index's tokenizer (`chunks_fts`; `_postings` tokenizes query terms with it too).
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
#: Readers wait this long for a lock (WAL readers only meet one during recovery or a checkpoint).
BUSY_TIMEOUT_MS = 5000
#: A write waits this long for another process's write transaction (a first build, a publish).
WRITE_WAIT_MS = 60_000
#: After a checkpoint the WAL is cut back to this size (a publish writes the whole index once).
JOURNAL_SIZE_LIMIT = 16 * 1024 * 1024
#: Up to this many vectors, KNN runs over an in-memory numpy matrix (~1.5 KB per 384-d vector).
IN_MEMORY_MAX_VECTORS = 50_000

SCRATCH_INFIX: Final = ".reindex-"
CORRUPT_INFIX: Final = ".corrupt-"
_STAMP: Final = "%Y%m%dT%H%M%SZ"

# SQLite primary result codes (the low byte of an extended code)
_ERROR, _BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = (
    1,
    5,
    6,
    8,
    10,
    11,
    13,
    14,
    26,
)
#: Scratch files this process is filling: a sweep in this process must not open them.
_ACTIVE_SCRATCH: set[str] = set()
_ACTIVE_LOCK = threading.Lock()
_FTS_QUERY_ERRORS = (
    "fts5:",
    "syntax error",
    "no such column",
    "unterminated string",
    "special query",
)


@dataclass
class VectorEngine:
    engine: str  # "sqlite-vec" | "numpy" | "disabled"
    available: bool
    load_error: str | None = None
    binding: str = "sqlite3"


@dataclass(frozen=True, slots=True)
class Recovery:
    """A damaged index file moved aside (`moved_to` is None when another process already had)."""

    moved_to: Path | None
    reason: str | None
    at: float | None


class _Damaged(Exception):
    """The file at the index path is not a usable database (internal: triggers a move aside)."""


class _ReadOnly(Exception):
    """The index can be read but not written here (internal: triggers a read-only open)."""


def _binding() -> tuple[ModuleType, str]:
    try:
        import sqlean

        return sqlean, "sqlean"
    except ImportError:
        return sqlite3, "sqlite3"


def _db_errors() -> tuple[type[BaseException], ...]:
    module, _ = _binding()
    return (sqlite3.Error, module.Error)


def _code(err: BaseException) -> int:
    return int(getattr(err, "sqlite_errorcode", 0) or 0) & 0xFF


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _strerror(err: OSError) -> str:
    return err.strerror or str(err)


def _state_refusal(err: OSError) -> bool:
    return err.errno in (errno.EACCES, errno.EPERM, errno.EROFS)


@functools.cache
def _bundled_vec_path() -> str:
    """The `vec0` extension inside the sqlite-vec wheel, found without importing the package.

    `import sqlite_vec` imports `numpy.typing` (for helpers memoryd does not use): 250 ms of a
    cold keyword-only search. The wheel's own `loadable_path()` is this same path.
    """
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("sqlite-vec is not installed (pip install sqlite-vec)")
    return os.path.normpath(os.path.join(next(iter(spec.submodule_search_locations)), "vec0"))


def _load_vec(conn: Any, extension_path: str | None) -> str | None:
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


def _inspect(path: Path) -> str | None:
    """Why the thing at `path` cannot be an index file (None: absent, or a readable file).

    Never opens it: closing any descriptor on a database file drops every POSIX lock SQLite
    holds on it in this process, and another connection here may be using it.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"cannot inspect it: {_strerror(err)}"
    kinds = {stat.S_ISDIR: "a folder", stat.S_ISLNK: "a symlink", stat.S_ISFIFO: "a FIFO"}
    for test, kind in kinds.items():
        if test(st.st_mode):
            return f"{kind} is in its place"
    if not stat.S_ISREG(st.st_mode):
        return "a special file is in its place"
    if not os.access(path, os.R_OK):
        return "the file cannot be read: Permission denied"
    return None


def _make_private(path: Path, *, own_folder: bool = True) -> None:
    """The index file and its -wal/-shm/-journal only for their owner (SQLite gives the side
    files the database's mode), created empty when missing.

    Existing files are changed by path, never opened (see `_inspect`): a new file cannot be in
    use yet, so only that one goes through `private_file`. The folder is set to 0700 when it is
    memoryd's (`own_folder`); a folder the user chose with `store.path` (their home, /tmp) is
    only created private when missing, never changed.
    """
    if own_folder or not os.path.lexists(path.parent):
        private_dir(path.parent)
    if own_folder:
        # SQLite opens these by name: in memoryd's folder no link may stand in for them
        for name in (path, *(Path(f"{path}{s}") for s in SQLITE_SIDE_FILES)):
            check_state_path(name)
    if not os.path.lexists(path):
        private_file(path)
    for name in (path, *(Path(f"{path}{s}") for s in SQLITE_SIDE_FILES)):
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            continue
        mine = stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
        if mine and stat.S_IMODE(st.st_mode) != PRIVATE_FILE_MODE:
            os.chmod(name, PRIVATE_FILE_MODE)


# ----------------------------------------------------------------------------- migrations


def _run_script(conn: Any, script: str) -> None:
    # executescript() would commit the migration's transaction; run statements one by one
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def _m001_base(conn: Any) -> None:
    _run_script(
        conn,
        """
        create table meta (key text primary key, value text not null);
        create table files (
            path text primary key,
            abs_path text not null,
            source text not null,
            hash text not null,
            mtime real not null,
            size integer not null
        );
        create table chunks (
            id integer primary key,
            path text not null,
            source text not null,
            start_line integer not null,
            end_line integer not null,
            hash text not null,
            text text not null,
            tokens integer not null,
            has_vector integer not null default 0
        );
        create index chunks_by_path on chunks(path);
        create index chunks_pending on chunks(has_vector) where has_vector = 0;
        create table chunk_vectors (chunk_id integer primary key, vector blob not null);
        create table embedding_cache (
            provider text not null,
            model text not null,
            fingerprint text not null,
            hash text not null,
            dims integer not null,
            vector blob not null,
            used_at real not null,
            primary key (provider, model, fingerprint, hash)
        );
        create index embedding_cache_lru on embedding_cache(used_at);
        """,
    )


def _m002_fts(conn: Any) -> None:
    # Optional features: a SQLite without FTS5 still gets a working (vector-only) index.
    try:
        conn.execute(
            f"create virtual table chunks_fts using fts5(body, tokenize = '{FTS_TOKENIZER}')"
        )
    except Exception as err:
        conn.execute("insert or replace into meta(key, value) values ('fts_error', ?)", (str(err),))
        return
    try:
        conn.execute("create virtual table chunks_tri using fts5(body, tokenize = 'trigram')")
    except Exception as err:
        conn.execute(
            "insert or replace into meta(key, value) values ('trigram_error', ?)", (str(err),)
        )


def _m003_vector_ids(conn: Any) -> None:
    # The vectors' ids on their own: counting the vectors and picking the background sample
    # (every n-th id) read this instead of every 1.5 KB vector (50k vectors: 36 -> 6.5 ms).
    conn.execute("create index chunk_vectors_ids on chunk_vectors(chunk_id)")


MIGRATIONS: list[tuple[str, Callable[[Any], None]]] = [
    ("m001_base", _m001_base),
    ("m002_fts", _m002_fts),
    ("m003_vector_ids", _m003_vector_ids),
]
#: Migrations that only make reads faster: an index opened read-only without them (written by
#: an older memoryd) still answers, as it did before.
SPEED_ONLY_MIGRATIONS = frozenset({"m003_vector_ids"})


def migrate(conn: Any) -> list[str]:
    """Apply pending numbered migrations in order; each runs in its own transaction.

    SQLite errors pass through unchanged: the store tells a damaged file from a busy or
    read-only one by their codes.
    """
    conn.execute(
        "create table if not exists migrations (id text primary key, applied_at real not null)"
    )
    done = {row[0] for row in conn.execute("select id from migrations")}
    applied = []
    for mig_id, func in MIGRATIONS:
        if mig_id in done:
            continue
        conn.execute("begin immediate")
        try:
            # another process may have applied it while we waited for the write lock
            if conn.execute("select 1 from migrations where id = ?", (mig_id,)).fetchone():
                conn.execute("commit")
                continue
            func(conn)
            conn.execute(
                "insert into migrations(id, applied_at) values (?, ?)", (mig_id, time.time())
            )
            conn.execute("commit")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(Exception):
                    conn.execute("rollback")
            raise
        applied.append(mig_id)
    return applied


# ----------------------------------------------------------------------------- the store


def _blob(vec: np.ndarray) -> bytes:
    import numpy as np

    return np.asarray(vec, dtype=np.float32).tobytes()


@dataclass(frozen=True, slots=True)
class ChunkRow:
    id: int
    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    mtime: float | None


#: `on_recovered(recovery, refill_now)`: the store now holds a fresh (or another process's) file in
#: place of a damaged one. With `refill_now` the owner may rebuild the contents at once (it is not
#: inside `Store()` and no other process is doing it); it returns whether it did.
RecoveryHook = Callable[[Recovery, bool], bool]


class Store:
    """One SQLite index file (or, with `scratch_for`, a rebuild's private scratch copy).

    Thread-safe: the writer connection is used under `lock` (a transaction holds it throughout),
    the reader under its own lock, so a search in a `snapshot()` never waits for a sync's writes.
    """

    def __init__(
        self,
        path: Path,
        *,
        vector_enabled: bool = True,
        extension_path: str | None = None,
        on_recovered: RecoveryHook | None = None,
        scratch_for: Store | None = None,
        own_folder: bool = True,
    ) -> None:
        self.path = path
        self._own_folder = own_folder
        self._vector_enabled = vector_enabled
        self._extension_path = extension_path
        self.on_recovered = on_recovered
        self._scratch = scratch_for is not None
        self._cache_store = scratch_for
        self.lock = threading.RLock()  # the writer's
        self._r_lock = threading.RLock()
        self._w: Any = None
        self._r: Any = None
        self._flock_fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._w_owner: int | None = None
        self._pin: int | None = None  # the thread holding the reader's snapshot
        self._closed = False
        self.read_only: str | None = None
        self.vector = VectorEngine("disabled", False, None)
        self.fts_error: str | None = None
        self.trigram_error: str | None = None
        self.recovered: list[Recovery] = []  # this process's recoveries, oldest first
        self._local_version = 0
        self._matrix: tuple[tuple[int, int], np.ndarray, np.ndarray] | None = None
        self._count_cache: tuple[tuple[int, int], int] | None = None
        self._dims_cache: tuple[tuple[int, int], int | None] | None = None
        # hashes of the chunks handed out for embedding: a vector is only stored on the same text
        self._pending_hashes: dict[int, str] = {}
        #: The signature (provider, model, chunking) this process writes with: text and vectors
        #: are not written into an index another process rebuilt with other settings.
        self.guard_signature: dict[str, Any] | None = None
        #: Keyword search from postings held in memory, after the first search at a state.
        self._postings: Postings | None = None
        if scratch_for is not None:
            self._open_scratch(scratch_for)
        else:
            self._open()
            self._postings = Postings(FTS_TOKENIZER, self._private_memory_db)

    @property
    def conn(self) -> Any:
        """The writer connection (for tests and diagnostics; use the methods otherwise)."""
        return self._w

    @property
    def is_scratch(self) -> bool:
        return self._scratch

    # -- opening -------------------------------------------------------------------------------

    def _connect(self, *, uri: str | None = None) -> tuple[Any, VectorEngine]:
        module, name = _binding()
        target = uri or str(self.path)
        try:
            conn = module.connect(
                target,
                uri=uri is not None,
                timeout=BUSY_TIMEOUT_MS / 1000,
                check_same_thread=False,
                isolation_level=None,
            )
        except _db_errors() as err:
            raise self._classify_open(err) from None
        try:
            conn.execute(f"pragma busy_timeout = {BUSY_TIMEOUT_MS}")
        except _db_errors() as err:
            conn.close()
            raise self._classify_open(err) from None
        with contextlib.suppress(*_db_errors()):  # without FTS5, keyword search is off anyway
            for statement in vocab_tables_sql("chunks_fts"):
                conn.execute(statement)
        if not self._vector_enabled:
            return conn, VectorEngine("disabled", False, "store.vector.enabled = false", name)
        error = _load_vec(conn, self._extension_path)
        if error is None:
            return conn, VectorEngine("sqlite-vec", True, None, name)
        return conn, VectorEngine("numpy", True, error, name)

    def _classify_open(self, err: BaseException) -> Exception:
        code = _code(err)
        if code in (_CORRUPT, _NOTADB):
            return _Damaged(str(err))
        if code in (_READONLY, _CANTOPEN) and os.path.isfile(self.path):
            return _ReadOnly(str(err))
        if code in (_BUSY, _LOCKED):
            return IndexError_(f"cannot open index {self.path}: it is locked by another process")
        if code == _FULL:
            return IndexError_(f"cannot open index {self.path}: the disk is full")
        return IndexError_(f"cannot open index {self.path}: {err}")

    def _open(self) -> None:
        """Open (or create) the live index; a damaged file is moved aside and a fresh one made."""
        self._sweep_scratch()
        moved: Recovery | None = None
        for attempt in range(3):
            try:
                self._open_live()
                break
            except _Damaged as damage:
                if attempt == 2:
                    raise IndexCorrupt(
                        f"index {self.path} is still damaged after moving it aside: {damage}"
                    ) from None
                moved = Recovery(self._move_aside(str(damage)), str(damage), time.time())
        if moved is not None:
            self._after_recovery(moved, refill_now=False)

    def _open_live(self) -> None:
        if self._own_folder:
            # a link in place of the index is planted, not damage to heal: refuse it
            check_state_path(self.path)
        damage = _inspect(self.path)
        if damage is not None:
            raise _Damaged(damage)
        refusal = self._not_writable()
        if refusal is not None:
            self._open_read_only(refusal)
            return
        try:
            _make_private(self.path, own_folder=self._own_folder)
        except StateReadOnly as err:
            if not os.path.isfile(self.path):
                raise StateReadOnly(f"cannot create index {self.path}: {err}") from None
            self._open_read_only(str(err))
            return
        except StateError as err:
            raise StateError(f"cannot create index {self.path}: {err}") from None
        except OSError as err:
            if _state_refusal(err) and os.path.isfile(self.path):
                self._open_read_only(f"its mode cannot be changed: {_strerror(err)}")
                return
            raise IndexError_(f"cannot create index {self.path}: {_strerror(err)}") from None
        writer = reader = None
        try:
            writer, vec = self._connect()
            try:
                writer.execute("pragma journal_mode = wal")
                writer.execute("pragma synchronous = normal")
                writer.execute(f"pragma journal_size_limit = {JOURNAL_SIZE_LIMIT}")
                migrate(writer)
                meta = dict(writer.execute("select key, value from meta").fetchall())
                reader, _ = self._connect()
                reader.execute("pragma query_only = 1")
                reader.execute("select count(*) from migrations").fetchone()
            except _db_errors() as err:
                raise self._classify_open(err) from None
            writer.execute(f"pragma busy_timeout = {WRITE_WAIT_MS}")
        except _ReadOnly as err:
            for conn in (reader, writer):
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
            self._open_read_only(self._not_writable() or f"SQLite cannot write there: {err}")
            return
        except BaseException:
            for conn in (reader, writer):
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
            raise
        self._w, self._r, self.vector = writer, reader, vec
        self._ident = _identity(self.path)
        self.read_only = None
        self.fts_error = meta.get("fts_error")
        self.trigram_error = meta.get("trigram_error")

    def _not_writable(self) -> str | None:
        """Why the state folder or index file cannot be written (None: it looks writable)."""
        folder = self.path.parent
        if folder.is_dir() and not os.access(folder, os.W_OK):
            return "its folder is not writable"
        if os.path.isfile(self.path) and not os.access(self.path, os.W_OK):
            return "the file is not writable"
        return None

    def _open_read_only(self, reason: str) -> None:
        if not os.path.isfile(self.path):
            raise StateReadOnly(f"cannot create index {self.path}: {reason}")
        quoted = "file:" + urllib.parse.quote(str(self.path)) + "?mode=ro"
        last: BaseException | None = None
        for suffix, note in (("", ""), ("&immutable=1", "; opened immutable: no -shm can be made")):
            conns: list[Any] = []
            try:
                writer, vec = self._connect(uri=quoted + suffix)
                conns.append(writer)
                reader, _ = self._connect(uri=quoted + suffix)
                conns.append(reader)
                try:
                    done = {r[0] for r in writer.execute("select id from migrations")}
                    meta = dict(writer.execute("select key, value from meta").fetchall())
                except _db_errors() as err:
                    raise self._classify_open(err) from None
            except _Damaged as damage:
                for conn in conns:
                    conn.close()
                raise IndexCorrupt(
                    f"index {self.path} is damaged ({damage}) and cannot be replaced: {reason}"
                ) from None
            except (_ReadOnly, IndexError_) as err:
                for conn in conns:
                    conn.close()
                last = err
                continue
            missing = [m for m, _ in MIGRATIONS if m not in done and m not in SPEED_ONLY_MIGRATIONS]
            if missing:
                for conn in conns:
                    conn.close()
                raise StateReadOnly(
                    f"index {self.path} needs migrations {', '.join(missing)} but {reason}"
                )
            self._w, self._r, self.vector = writer, reader, vec
            self._ident = _identity(self.path)
            self.read_only = reason + note
            self.fts_error = meta.get("fts_error")
            self.trigram_error = meta.get("trigram_error")
            log.warning("index %s is read-only (%s): searches only", self.path, self.read_only)
            return
        raise StateReadOnly(f"cannot open index {self.path} read-only ({reason}): {last}")

    # -- damage --------------------------------------------------------------------------------

    def _aside_path(self) -> Path:
        stamp = time.strftime(_STAMP, time.gmtime())
        base = self.path.with_name(f"{self.path.name}{CORRUPT_INFIX}{stamp}")
        candidate, n = base, 1
        while os.path.lexists(candidate):
            candidate = base.with_name(f"{base.name}-{n}")
            n += 1
        return candidate

    def _move_aside(self, reason: str) -> Path | None:
        """Rename the damaged file (and its -wal/-shm/-journal) out of the way; never delete it."""
        self._close_connections()
        if not os.path.lexists(self.path):
            return None
        dest = self._aside_path()
        try:
            os.rename(self.path, dest)
        except FileNotFoundError:
            return None
        except OSError as err:
            cls = StateReadOnly if _state_refusal(err) else IndexCorrupt
            raise cls(
                f"index {self.path} is damaged ({reason}) and cannot be moved aside: "
                f"{_strerror(err)}"
            ) from None
        for suffix in SQLITE_SIDE_FILES:
            with contextlib.suppress(FileNotFoundError):
                os.rename(f"{self.path}{suffix}", f"{dest}{suffix}")
        log.warning(
            "index %s was damaged (%s): moved to %s; rebuilding from the Markdown files",
            self.path,
            reason,
            dest,
        )
        return dest

    def _after_recovery(self, rec: Recovery, *, refill_now: bool) -> bool:
        """Salvage the old embedding cache, record the move, let the owner refill the index."""
        self._reset_caches()
        if rec.moved_to is not None and not self.read_only:
            self._salvage_cache(rec.moved_to)
            with contextlib.suppress(MemorydError):
                recorded = self._recorded_recoveries()
                recorded[rec.moved_to.name] = {"reason": rec.reason, "at": rec.at}
                self.set_meta({"recoveries": json.dumps(recorded, sort_keys=True)})
        self.recovered.append(rec)
        return self.on_recovered(rec, refill_now) if self.on_recovered is not None else False

    def _salvage_cache(self, old: Path) -> None:
        # embeddings cost real money or minutes of CPU: keep every row that still reads
        if not os.path.isfile(old):
            return
        uri = "file:" + urllib.parse.quote(str(old)) + "?mode=ro"
        module, _ = _binding()
        kept = 0
        try:
            src = module.connect(uri, uri=True, timeout=1, isolation_level=None)
        except Exception:
            return
        try:
            rows = src.execute(
                "select provider, model, fingerprint, hash, dims, vector, used_at from embedding_cache"
            )
            with self.transaction(doing="keep the damaged index's embedding cache"):
                while True:
                    try:
                        row = rows.fetchone()
                    except Exception:
                        break
                    if row is None:
                        break
                    self._w.execute(
                        "insert or ignore into embedding_cache values (?,?,?,?,?,?,?)", row
                    )
                    kept += 1
        except Exception as err:
            log.info("nothing salvaged from %s's embedding cache: %s", old, err)
        finally:
            with contextlib.suppress(Exception):
                src.close()
        if kept:
            log.warning("kept %d cached embeddings from %s", kept, old)

    def recover(self, reason: str) -> tuple[Recovery, bool]:
        """Move the damaged live file aside, open a fresh one and let the owner refill it.

        Returns the recovery and whether the owner already rebuilt the contents. When another
        process had replaced the file already, nothing is moved: this store just follows it.
        """
        with self.lock:
            with self._r_lock:
                self._pin = None
            mine = self._ident is not None and _identity(self.path) == self._ident
            moved = self._move_aside(reason) if mine else None
            self._close_connections()
            self._open()
            rec = Recovery(moved, reason, time.time())
        return rec, self._after_recovery(rec, refill_now=mine)

    def verify(self, *, deep: bool = False) -> str | None:
        """What is wrong with the file (`PRAGMA quick_check`; `deep` adds the FTS5 integrity
        checks and a chunk count cross-check), or None when it is sound."""
        self._check_open()
        with self.lock:
            conn = self._w
            try:
                rows = [str(r[0]) for r in conn.execute("pragma quick_check").fetchall()]
                if rows != ["ok"]:
                    return "quick_check: " + "; ".join(rows[:3])
                if not deep:
                    return None
                chunks = int(conn.execute("select count(*) from chunks").fetchone()[0])
                for table, error in (
                    ("chunks_fts", self.fts_error),
                    ("chunks_tri", self.trigram_error),
                ):
                    if error is not None or self.fts_error is not None:
                        continue
                    if not self.read_only:
                        conn.execute(f"insert into {table}({table}) values ('integrity-check')")
                    rows_in = int(conn.execute(f"select count(*) from {table}").fetchone()[0])
                    if rows_in != chunks:
                        return f"{table} holds {rows_in} rows for {chunks} chunks"
            except _db_errors() as err:
                if _code(err) in (_CORRUPT, _NOTADB):
                    return str(err)
                if _code(err) in (_BUSY, _LOCKED):
                    raise IndexError_(
                        f"cannot check index {self.path}: it is locked by another process"
                    ) from None
                raise IndexError_(f"cannot check index {self.path}: {err}") from None
        return None

    def recoveries(self) -> list[Recovery]:
        """Damaged files moved aside beside this index (kept until the user deletes them)."""
        prefix = f"{self.path.name}{CORRUPT_INFIX}"
        try:
            names = sorted(os.listdir(self.path.parent))
        except OSError:
            return []
        recorded: dict[str, Any] = {}
        with contextlib.suppress(MemorydError, ValueError):
            recorded = self._recorded_recoveries()
        out = []
        for name in names:
            if not name.startswith(prefix) or name.endswith(SQLITE_SIDE_FILES):
                continue
            info = recorded.get(name) or {}
            at = info.get("at")
            if at is None:
                with contextlib.suppress(ValueError):
                    stamp = name[len(prefix) :].split("-")[0]
                    at = float(calendar.timegm(time.strptime(stamp, _STAMP)))
            out.append(Recovery(self.path.parent / name, info.get("reason"), at))
        return out

    def _recorded_recoveries(self) -> dict[str, Any]:
        raw = self.meta().get("recoveries")
        value = json.loads(raw) if raw else {}
        return value if isinstance(value, dict) else {}

    def _ensure_current(self) -> None:
        """Follow the index file if another process replaced it (a recovery moved it aside)."""
        if self._scratch or self._ident is None or _identity(self.path) == self._ident:
            return
        with self.lock:
            if _identity(self.path) == self._ident:
                return
            with self._r_lock:
                self._pin = None
            self._close_connections()
            self._open()
            rec = Recovery(None, "the index file was replaced by another process", time.time())
            self._reset_caches()
        log.info("index %s was replaced by another process: reopened it", self.path)
        if self.on_recovered is not None:
            self.on_recovered(rec, False)

    def _failed(self, err: BaseException, doing: str, *, writing: bool) -> MemorydError:
        """The one-line error for a failed SQLite call; a damaged file is recovered first."""
        code = _code(err)
        where = f"index {self.path}"
        unchanged = "; the index was left as it was" if writing else ""
        if code in (_BUSY, _LOCKED):
            return IndexError_(f"cannot {doing}: {where} is locked by another process")
        if code == _FULL:
            self._free_wal()
            return IndexError_(
                f"cannot {doing}: the disk holding {self.path.parent} is full{unchanged}"
            )
        if code == _READONLY:
            self.read_only = self.read_only or f"writes are refused: {err}"
            return StateReadOnly(f"cannot {doing}: {where} is read-only ({err})")
        if code == _IOERR:
            self._free_wal()
            return IndexError_(f"cannot {doing}: disk I/O error on {where}{unchanged}")
        if self._scratch or self._closed:
            return IndexError_(f"cannot {doing}: {err}")
        problem = str(err) if code in (_CORRUPT, _NOTADB) else self._problem_or_none()
        if problem is None:
            return IndexError_(f"cannot {doing}: {err}")
        rec, rebuilt = self.recover(problem)
        return IndexCorrupt(describe_recovery(self.path, rec, rebuilt=rebuilt))

    def _problem_or_none(self) -> str | None:
        try:
            return self.verify()
        except MemorydError:
            return None

    def _free_wal(self) -> None:
        # a failed transaction leaves its frames in the WAL: hand that space back to the disk
        if self._w is None or self._scratch or self.read_only:
            return
        with self.lock, contextlib.suppress(Exception):
            self._w.execute("pragma busy_timeout = 100")
            try:
                self._w.execute("pragma wal_checkpoint(truncate)")
            finally:
                self._w.execute(f"pragma busy_timeout = {WRITE_WAIT_MS}")

    # -- scratch databases for rebuilds ----------------------------------------------------------

    def open_scratch(self) -> Store:
        """A private scratch database beside this index; fill it, `publish` it, `discard` it."""
        self._check_writable("rebuild the index")
        return Store(
            self.path.with_name(
                f"{self.path.name}{SCRATCH_INFIX}{os.getpid()}-{secrets.token_hex(4)}.tmp"
            ),
            vector_enabled=self._vector_enabled,
            extension_path=self._extension_path,
            scratch_for=self,
            own_folder=self._own_folder,
        )

    def _open_scratch(self, live: Store) -> None:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as err:
            cls = StateReadOnly if _state_refusal(err) else IndexError_
            raise cls(f"cannot create the rebuild file {self.path}: {_strerror(err)}") from None
        # held until discard(): a sweeper that can take it knows the rebuild is gone
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._flock_fd = fd
        with _ACTIVE_LOCK:
            _ACTIVE_SCRATCH.add(str(self.path))
        try:
            conn, vec = self._connect()
            self._w = self._r = conn
            self.vector = vec
            with live.lock:
                page_size = int(live._w.execute("pragma page_size").fetchone()[0])
            # the backup into a WAL database needs equal page sizes; the scratch is disposable,
            # so no journal on disk and no fsync
            conn.execute(f"pragma page_size = {page_size}")
            conn.execute("pragma journal_mode = memory")
            conn.execute("pragma synchronous = off")
            migrate(conn)
            meta = dict(conn.execute("select key, value from meta").fetchall())
        except MemorydError:
            self.discard()
            raise
        except _db_errors() as err:
            self.discard()
            raise self._failed(err, "create the rebuild file", writing=True) from None
        except BaseException:
            self.discard()
            raise
        self.fts_error = meta.get("fts_error")
        self.trigram_error = meta.get("trigram_error")

    def discard(self) -> None:
        """Close and delete a scratch database."""
        self._close_connections()
        self._closed = True
        remove_db_files(self.path)
        if self._flock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._flock_fd)
            self._flock_fd = None
        with _ACTIVE_LOCK:
            _ACTIVE_SCRATCH.discard(str(self.path))

    def _sweep_scratch(self) -> None:
        """Delete scratch files of rebuilds that died (nobody holds their lock any more)."""
        folder = self.path.parent
        prefix = f"{self.path.name}{SCRATCH_INFIX}"
        try:
            names = os.listdir(folder)
        except OSError:
            return
        ours = [n for n in names if n.startswith(prefix)]
        bases = {n for n in ours if n.endswith(".tmp")}
        with _ACTIVE_LOCK:
            mine = {Path(p).name for p in _ACTIVE_SCRATCH if Path(p).parent == folder}
        for base in bases:
            if base in mine:
                continue  # this process's own rebuild (opening it here would drop its locks)
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

    def publish(self, scratch: Store) -> None:
        """Make the scratch database's contents this index's in one write transaction.

        SQLite's backup API copies every page into the live file through its WAL: readers in
        every process go on with the old index until the commit, then see the new one. The live
        embedding cache (which the rebuild filled as it went) and recovery records are carried
        into the scratch first.
        """
        self._check_writable("publish the rebuilt index")
        failure: BaseException | None = None
        with self.lock:
            self._ensure_current()
            scratch._adopt_live_state(self.path)
            try:
                scratch._w.backup(self._w)
            except _db_errors() as err:
                failure = err
            else:
                self._reset_caches()
        if failure is not None:
            raise self._failed(failure, "publish the rebuilt index", writing=True) from None
        # the publish wrote the whole index into the WAL: give that space back now unless a
        # reader still holds an older snapshot (then a later checkpoint does)
        self._free_wal()

    def _adopt_live_state(self, live: Path) -> None:
        conn = self._w
        try:
            conn.execute("attach database ? as live", (str(live),))
        except _db_errors() as err:
            log.warning("rebuild of %s starts without the old cache: %s", live, err)
            return
        try:
            conn.execute(
                "insert or replace into main.embedding_cache select * from live.embedding_cache"
            )
            conn.execute(
                "insert or replace into main.meta select key, value from live.meta "
                "where key = 'recoveries'"
            )
        except _db_errors() as err:  # a damaged old index: its cache is only an optimization
            log.warning("could not carry the embedding cache of %s: %s", live, err)
        finally:
            with contextlib.suppress(Exception):
                conn.execute("detach database live")

    # -- connections ---------------------------------------------------------------------------

    def _close_connections(self) -> None:
        with self._r_lock:
            self._pin = None
        for attr in ("_r", "_w"):
            conn = getattr(self, attr)
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            setattr(self, attr, None)

    def _reset_caches(self) -> None:
        self._local_version += 1
        if self._postings is not None:  # another file's content now: nothing held carries over
            self._postings = Postings(FTS_TOKENIZER, self._private_memory_db)
        self._matrix = None
        self._count_cache = None
        self._dims_cache = None
        self._pending_hashes.clear()

    def _check_open(self) -> None:
        if self._closed or self._w is None:
            raise IndexError_(f"index {self.path} is closed")

    def _check_writable(self, doing: str) -> None:
        self._check_open()
        if self.read_only:
            raise StateReadOnly(
                f"cannot {doing}: index {self.path} is read-only ({self.read_only})"
            )

    def close(self) -> None:
        if self._closed:
            return
        if self._scratch:
            self.discard()
            return
        with self.lock:
            self._closed = True
            if self._w is not None and not self.read_only:
                with contextlib.suppress(Exception):
                    # a short wait: a reader in another process must not hold up a shutdown
                    self._w.execute("pragma busy_timeout = 100")
                    self._w.execute("pragma wal_checkpoint(truncate)")
            self._close_connections()

    def _unpin(self) -> None:
        with self._r_lock:
            self._end_pin()

    def _end_pin(self) -> None:
        if self._pin is None:
            return
        self._pin = None
        with contextlib.suppress(Exception):
            if self._r is not None and self._r.in_transaction:
                self._r.execute("commit")

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Within: every read of this thread sees one index, whatever is committed meanwhile,
        so a search's ids and rows agree. Snapshots of other threads take turns with it; a
        write of this thread ends it (what a thread writes, it reads back)."""
        me = threading.get_ident()
        if self._scratch or self._w_owner == me or self._pin == me:
            yield
            return
        self._check_open()
        self._ensure_current()
        with self._r_lock:
            self._r.execute("begin")
            self._pin = me
            try:
                yield
            finally:
                self._end_pin()

    @contextlib.contextmanager
    def _read_conn(self) -> Iterator[Any]:
        self._check_open()
        me = threading.get_ident()
        if self._pin == me and self._w_owner != me:
            with self._r_lock:  # held by this thread already (its snapshot)
                yield self._r
                return
        with self.lock:
            conn = self._w
            if self._w_owner == me or conn.in_transaction:
                yield conn
                return
            self._ensure_current()
            conn = self._w
            conn.execute("begin")  # several statements, one snapshot
            try:
                yield conn
            finally:
                with contextlib.suppress(Exception):
                    conn.execute("commit")

    @contextlib.contextmanager
    def _reading(self, doing: str) -> Iterator[Any]:
        failure: BaseException | None = None
        try:
            with self._read_conn() as conn:
                yield conn
        except _db_errors() as err:
            if self._w_owner == threading.get_ident():
                raise  # inside this thread's transaction: it rolls back first, then handles it
            failure = err
        if failure is not None:
            raise self._failed(failure, doing, writing=False) from None

    @contextlib.contextmanager
    def transaction(
        self, *, wait_ms: int | None = None, doing: str = "update the index"
    ) -> Iterator[None]:
        """One write transaction (`BEGIN IMMEDIATE`); nested calls on the same thread join it.

        `wait_ms` bounds the wait for another process's write lock (default `WRITE_WAIT_MS`).
        SQLite failures become one-line `MemorydError`s; on any failure nothing is written.
        """
        me = threading.get_ident()
        if self._w_owner == me:
            yield
            return
        self._check_writable(doing)
        if self._pin == me:
            self._unpin()  # what this thread writes, it reads back
        failure: BaseException | None = None
        with self.lock:
            self._ensure_current()
            conn = self._w
            try:
                if wait_ms is not None:
                    conn.execute(f"pragma busy_timeout = {int(wait_ms)}")
                try:
                    conn.execute("begin immediate")
                finally:
                    if wait_ms is not None:
                        conn.execute(f"pragma busy_timeout = {WRITE_WAIT_MS}")
            except _db_errors() as err:
                failure = err
            else:
                self._w_owner = me
                try:
                    yield
                    conn.execute("commit")
                except _db_errors() as err:
                    failure = err
                    _rollback(conn)
                except BaseException:
                    _rollback(conn)
                    raise
                finally:
                    self._w_owner = None
                if failure is None:
                    self._local_version += 1
        if failure is not None:
            raise self._failed(failure, doing, writing=True) from None

    @property
    def version(self) -> tuple[int, int]:
        """Changes whenever this connection or any other (another process) commits a write."""
        with self._reading("read the index") as conn:
            other = int(conn.execute("pragma data_version").fetchone()[0])
        return self._local_version, other

    # -- housekeeping --------------------------------------------------------------------------

    @property
    def fts_available(self) -> bool:
        return self.fts_error is None

    def meta(self) -> dict[str, str]:
        with self._reading("read the index") as conn:
            return dict(conn.execute("select key, value from meta").fetchall())

    def set_meta(self, values: dict[str, str], *, wait_ms: int | None = None) -> None:
        with self.transaction(wait_ms=wait_ms, doing="save index metadata"):
            self._w.executemany(
                "insert or replace into meta(key, value) values (?, ?)", list(values.items())
            )

    def meta_value(self, key: str) -> str | None:
        with self._reading("read the index") as conn:
            row = conn.execute("select value from meta where key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def delete_meta(self, key: str) -> None:
        with self.transaction(doing="save index metadata"):
            self._w.execute("delete from meta where key = ?", (key,))

    @property
    def page_size(self) -> int:
        with self._reading("read the index") as conn:
            return int(conn.execute("pragma page_size").fetchone()[0])

    @property
    def vec_dims(self) -> int | None:
        """Dimensions of the stored vectors (None until the first vector is written)."""
        version = self.version
        if self._dims_cache is None or self._dims_cache[0] != version:
            with self._reading("read the index") as conn:
                row = conn.execute("select value from meta where key = 'vec_dims'").fetchone()
            self._dims_cache = (version, int(row[0]) if row else None)
        return self._dims_cache[1]

    def signature_matches(self) -> bool:
        """Whether the index was built with `guard_signature` (or records none yet)."""
        if self.guard_signature is None:
            return True
        with self._reading("read the index") as conn:
            row = conn.execute("select value from meta where key = 'signature'").fetchone()
        if row is None:
            return True
        try:
            return bool(json.loads(row[0]) == self.guard_signature)
        except ValueError:
            return False

    def _txn_vec_dims(self) -> int | None:
        row = self._w.execute("select value from meta where key = 'vec_dims'").fetchone()
        return int(row[0]) if row else None

    # -- files and chunks ------------------------------------------------------------------------

    def files(self) -> dict[str, tuple[str, float, int, str]]:
        with self._reading("read the index") as conn:
            rows = conn.execute("select path, hash, mtime, size, source from files").fetchall()
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}

    def replace_file(
        self,
        path: str,
        abs_path: str,
        source: str,
        file_hash: str,
        mtime: float,
        size: int,
        chunks: Sequence[tuple[int, int, str, str, int]],
    ) -> None:
        """Swap a file's chunks in one transaction. chunks = (start, end, hash, text, tokens)."""
        with self.transaction(doing=f"index {path}"):
            conn = self._w
            self._delete_chunks_of(path)
            for start, end, chash, text, tokens in chunks:
                cur = conn.execute(
                    "insert into chunks(path, source, start_line, end_line, hash, text, tokens) values (?,?,?,?,?,?,?)",
                    (path, source, start, end, chash, text, tokens),
                )
                rowid = cur.lastrowid
                if self.fts_available:
                    seg = segment_for_fts(text)
                    conn.execute("insert into chunks_fts(rowid, body) values (?, ?)", (rowid, seg))
                    if self.trigram_error is None:
                        conn.execute(
                            "insert into chunks_tri(rowid, body) values (?, ?)", (rowid, text)
                        )
            conn.execute(
                "insert or replace into files(path, abs_path, source, hash, mtime, size) values (?,?,?,?,?,?)",
                (path, abs_path, source, file_hash, mtime, size),
            )

    def touch_file(self, path: str, mtime: float, size: int) -> None:
        with self.transaction(doing=f"index {path}"):
            self._w.execute(
                "update files set mtime = ?, size = ? where path = ?", (mtime, size, path)
            )

    def remove_file(self, path: str) -> None:
        with self.transaction(doing=f"remove {path} from the index"):
            self._delete_chunks_of(path)
            self._w.execute("delete from files where path = ?", (path,))

    def _delete_chunks_of(self, path: str) -> None:
        conn = self._w
        ids = [r[0] for r in conn.execute("select id from chunks where path = ?", (path,))]
        if not ids:
            return
        vec_table = self.vector.engine == "sqlite-vec" and self._txn_vec_dims() is not None
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            if self.fts_available:
                conn.execute(f"delete from chunks_fts where rowid in ({marks})", part)
                if self.trigram_error is None:
                    conn.execute(f"delete from chunks_tri where rowid in ({marks})", part)
            if vec_table:
                conn.execute(f"delete from chunks_vec where rowid in ({marks})", part)
            conn.execute(f"delete from chunk_vectors where chunk_id in ({marks})", part)
            conn.execute(f"delete from chunks where id in ({marks})", part)

    def counts(self) -> dict[str, Any]:
        with self._reading("read the index") as conn:
            files = conn.execute("select count(*) from files").fetchone()[0]
            chunks = conn.execute("select count(*) from chunks").fetchone()[0]
            pending = conn.execute("select count(*) from chunks where has_vector = 0").fetchone()[0]
            by_source = dict(
                conn.execute("select source, count(*) from files group by source").fetchall()
            )
            cache = conn.execute("select count(*) from embedding_cache").fetchone()[0]
        return {
            "files": files,
            "chunks": chunks,
            "pending_vectors": pending,
            "source_counts": by_source,
            "cache_entries": cache,
        }

    def pending_count(self) -> int:
        with self._reading("read the index") as conn:
            return int(
                conn.execute("select count(*) from chunks where has_vector = 0").fetchone()[0]
            )

    def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        ids = list(ids)
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        with self._reading("read the index") as conn:
            rows = conn.execute(
                f"select c.id, c.path, c.source, c.start_line, c.end_line, c.text, f.mtime "
                f"from chunks c left join files f on f.path = c.path where c.id in ({marks})",
                ids,
            ).fetchall()
        return {r[0]: ChunkRow(*r) for r in rows}

    def chunk_ids_for_paths(self, paths: Sequence[str], limit_per_path: int) -> list[int]:
        out: list[int] = []
        with self._reading("read the index") as conn:
            for p in paths:
                out.extend(
                    r[0]
                    for r in conn.execute(
                        "select id from chunks where path = ? order by start_line limit ?",
                        (p, limit_per_path),
                    )
                )
        return out

    def abs_paths(self, source: str) -> list[str]:
        """Absolute paths of the indexed files of one source."""
        with self._reading("read the index") as conn:
            return [
                r[0] for r in conn.execute("select abs_path from files where source = ?", (source,))
            ]

    def paths(self) -> list[str]:
        with self._reading("read the index") as conn:
            return [r[0] for r in conn.execute("select path from files")]

    # -- keyword search --------------------------------------------------------------------------

    def count_matching(self, match: str) -> int:
        """How many chunks the FTS5 MATCH string matches (0 when FTS5 cannot parse it)."""
        with self._reading("read the keyword index") as conn:
            try:
                row = conn.execute(
                    "select count(*) from chunks_fts where chunks_fts match ?", (match,)
                ).fetchone()
            except Exception:  # a term FTS5 cannot parse matched nothing as a keyword either
                return 0
        return int(row[0])

    def vector_sample(self, limit: int) -> list[tuple[int, np.ndarray, str]]:
        """Up to `limit` stored vectors spread evenly over chunk ids: (chunk id, vector, text)."""
        return [(cid, vec, text) for cid, vec, text, _ in self.vector_sample_keyed(limit)]

    def vector_sample_keyed(self, limit: int) -> list[tuple[int, np.ndarray, str, str]]:
        """`vector_sample` with each chunk's content hash, read in the same snapshot."""
        import numpy as np

        rows = self._sample("v.vector, c.text, c.hash", limit)
        return [(int(r[0]), np.frombuffer(r[1], dtype=np.float32), r[2], str(r[3])) for r in rows]

    def sample_keys(self, limit: int) -> list[tuple[int, str]]:
        """`vector_sample`'s chunks as (chunk id, content hash): what their vectors are of."""
        return [(int(r[0]), str(r[1])) for r in self._sample("c.hash", limit)]

    def sample_cosines(self, limit: int, query: array[float]) -> list[tuple[int, str, float, str]]:
        """`vector_sample`'s chunks with `query`'s cosine to each, computed in SQL
        (`cosine_sql`): (chunk id, content hash, cosine, text). A zero vector has cosine 0."""
        rows = self._sample(
            "c.hash, coalesce(1.0 - vec_distance_cosine(v.vector, ?), 0.0), c.text",
            limit,
            (query.tobytes(),),
        )
        return [(int(r[0]), str(r[1]), float(r[2]), r[3]) for r in rows]

    def _sample(self, columns: str, limit: int, params: tuple[Any, ...] = ()) -> list[Any]:
        # the one definition of the sample every background statistic is taken over
        with self._reading("read the vector index") as conn:
            n = int(conn.execute("select count(*) from chunk_vectors").fetchone()[0])
            step = max(1, -(-n // max(limit, 1)))
            rows: list[Any] = conn.execute(
                f"select v.chunk_id, {columns} from chunk_vectors v "
                "join chunks c on c.id = v.chunk_id "
                "where v.chunk_id % ? = 0 order by v.chunk_id limit ?",
                (*params, step, limit),
            ).fetchall()
        return rows

    def keyword_search(
        self, match: str, limit: int, *, trigram: bool = False
    ) -> list[tuple[int, float]]:
        """(chunk id, positive BM25 strength) best first."""
        if not self.fts_available or (trigram and self.trigram_error is not None):
            return []
        table = "chunks_tri" if trigram else "chunks_fts"
        with self._reading("search the keyword index") as conn:
            if not trigram:
                held = self._held_keyword_search(conn, match, limit)
                if held is not None:
                    return held
            try:
                rows = conn.execute(
                    f"select rowid, bm25({table}) as r from {table} where {table} match ? order by r limit ?",
                    (match, limit),
                ).fetchall()
            except _db_errors() as err:
                # a MATCH expression odd input made invalid: no keyword hits. Anything else
                # (a damaged index) goes to the checks in _reading.
                if _code(err) == _ERROR and any(s in str(err) for s in _FTS_QUERY_ERRORS):
                    return []
                raise
        return [(int(r[0]), -float(r[1])) for r in rows]

    def _held_keyword_search(
        self, conn: Any, match: str, limit: int
    ) -> list[tuple[int, float]] | None:
        """`_postings`' answer (the same rows and scores as FTS5's), or None for FTS5 to answer:
        a phrase among the terms, the first search at this state, or inside this thread's own
        write transaction (FTS5 may hold the transaction's terms in memory, unflushed)."""
        postings = self._postings
        if postings is None or self._w_owner == threading.get_ident():
            return None
        phrases = or_phrases(match)
        if phrases is None:
            return None
        try:
            return postings.top(conn, phrases, limit)
        except _db_errors() as err:
            # e.g. a connection without the vocab table: FTS5 answers from now on, and a
            # damaged index fails there, through the usual checks
            log.info("keyword search from held postings disabled: %s", err)
            self._postings = None
            return None

    def _private_memory_db(self) -> Any:
        """An in-memory database of the same SQLite (query terms are tokenized there)."""
        module, _ = _binding()
        return module.connect(":memory:", check_same_thread=False, isolation_level=None)

    # -- vectors -------------------------------------------------------------------------------

    def pending_chunks(self, limit: int) -> list[tuple[int, str, str]]:
        with self._reading("read the index") as conn:
            rows = [
                (int(r[0]), str(r[1]), str(r[2]))
                for r in conn.execute(
                    "select id, hash, text from chunks where has_vector = 0 order by id limit ?",
                    (limit,),
                )
            ]
        if len(self._pending_hashes) > 100_000:
            self._pending_hashes.clear()
        self._pending_hashes.update((cid, h) for cid, h, _ in rows)
        return rows

    def _ensure_vec_table(self, dims: int) -> None:
        stored = self._txn_vec_dims()
        if stored == dims:
            return
        if stored is not None:
            raise IndexError_(f"vector dims changed from {stored} to {dims}; a reindex is required")
        if self.vector.engine == "sqlite-vec":
            self._w.execute(
                f"create virtual table if not exists chunks_vec using vec0(embedding float[{dims}] distance_metric=cosine)"
            )
        self._w.execute(
            "insert or replace into meta(key, value) values ('vec_dims', ?)", (str(dims),)
        )

    def write_vectors(self, rows: Sequence[tuple[int, np.ndarray]]) -> None:
        import numpy as np

        if not rows:
            return
        dims = int(rows[0][1].shape[0])
        with self.transaction(doing="store embeddings"):
            conn = self._w
            if not self.signature_matches():
                return  # rebuilt meanwhile by a process with other settings: not our vectors
            self._ensure_vec_table(dims)
            for chunk_id, vec in rows:
                expected = self._pending_hashes.pop(chunk_id, None)
                # the chunk may have been deleted, or its id reused by a new build
                row = conn.execute("select hash from chunks where id = ?", (chunk_id,)).fetchone()
                if row is None or (expected is not None and row[0] != expected):
                    continue
                blob = _blob(vec)
                conn.execute(
                    "insert or replace into chunk_vectors(chunk_id, vector) values (?, ?)",
                    (chunk_id, blob),
                )
                if self.vector.engine == "sqlite-vec":
                    conn.execute("delete from chunks_vec where rowid = ?", (chunk_id,))
                    if np.any(vec):
                        conn.execute(
                            "insert into chunks_vec(rowid, embedding) values (?, ?)",
                            (chunk_id, blob),
                        )
                conn.execute("update chunks set has_vector = 1 where id = ?", (chunk_id,))

    @property
    def cosine_sql(self) -> bool:
        """Whether this store's connections compute cosines in SQL (sqlite-vec loaded): then a
        query vector given as a float32 `array` is searched without numpy."""
        return self.vector.available and self.vector.engine == "sqlite-vec"

    def vector_search(self, query: np.ndarray | array[float], k: int) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) best first.

        A numpy vector is searched in memory (up to IN_MEMORY_MAX_VECTORS) or by vec0; a
        float32 `array` (a one-off search, `cosine_sql`) by an exact scan in SQL or by vec0,
        so that the process needs no numpy: same candidates, cosines within float32 rounding.
        """
        dims = self.vec_dims
        if dims is None or len(query) != dims or not self.vector.available:
            return []
        if self.vector.engine == "sqlite-vec" and self._vector_count() > IN_MEMORY_MAX_VECTORS:
            blob = query.tobytes() if isinstance(query, array) else _blob(query)
            with self._reading("search the vector index") as conn:
                rows = conn.execute(
                    "select rowid, distance from chunks_vec where embedding match ? and k = ?",
                    (blob, k),
                ).fetchall()
            return [(int(r[0]), 1.0 - float(r[1])) for r in rows]
        if isinstance(query, array):
            return self._scan_search(query, k)
        # an exact product over a matrix held in memory beats vec0's scan; vec0 takes over for
        # indexes too big to hold
        return self._numpy_search(query, k)

    def _vector_count(self) -> int:
        version = self.version
        if self._count_cache is None or self._count_cache[0] != version:
            with self._reading("read the index") as conn:
                n = int(conn.execute("select count(*) from chunk_vectors").fetchone()[0])
            self._count_cache = (version, n)
        return self._count_cache[1]

    @property
    def search_engine(self) -> str:
        """Which engine answers KNN queries now (see vector_search)."""
        if not self.vector.available:
            return "none"
        if self.vector.engine == "sqlite-vec" and self._vector_count() > IN_MEMORY_MAX_VECTORS:
            return "sqlite-vec"
        return "numpy"

    def _scan_search(self, query: array[float], k: int) -> list[tuple[int, float]]:
        # ties by chunk id and a zero vector at cosine 0, as `_numpy_search` ranks them
        if not self.cosine_sql:
            raise IndexError_("a vector search in SQL needs sqlite-vec")
        with self._reading("search the vector index") as conn:
            rows = conn.execute(
                "select chunk_id, coalesce(1.0 - vec_distance_cosine(vector, ?), 0.0) as s "
                "from chunk_vectors order by s desc, chunk_id limit ?",
                (query.tobytes(), k),
            ).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def _numpy_search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        import numpy as np

        version = self.version
        if self._matrix is None or self._matrix[0] != version:
            with self._reading("search the vector index") as conn:
                rows = conn.execute("select chunk_id, vector from chunk_vectors").fetchall()
            if rows:
                ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
                matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(
                    len(rows), -1
                )
            else:
                ids, matrix = np.zeros(0, np.int64), np.zeros((0, query.shape[0]), np.float32)
            self._matrix = (version, ids, matrix)
        _, ids, matrix = self._matrix
        if not len(ids) or matrix.shape[1] != query.shape[0]:
            return []
        sims = matrix @ query.astype(np.float32)
        top = top_rows(sims, k)
        return list(zip(ids[top].tolist(), sims[top].tolist(), strict=True))

    # -- embedding cache -----------------------------------------------------------------------

    def cache_get(self, key: tuple[str, str, str], hashes: Sequence[str]) -> dict[str, np.ndarray]:
        import numpy as np

        if self._cache_store is not None:
            # a rebuild reads and fills the live index's cache: a killed rebuild loses nothing
            return self._cache_store.cache_get(key, hashes)
        if not hashes:
            return {}
        out: dict[str, np.ndarray] = {}
        with self._reading("read the embedding cache") as conn:
            for start in range(0, len(hashes), 500):
                part = list(hashes[start : start + 500])
                marks = ",".join("?" * len(part))
                rows = conn.execute(
                    f"select hash, vector from embedding_cache where provider = ? and model = ? and fingerprint = ? "
                    f"and hash in ({marks})",
                    (*key, *part),
                ).fetchall()
                for h, blob in rows:
                    out[h] = np.frombuffer(blob, dtype=np.float32).copy()
        if out and not self.read_only:
            hits = list(out)
            with self.transaction(doing="update the embedding cache"):
                for start in range(0, len(hits), 500):
                    part = hits[start : start + 500]
                    marks = ",".join("?" * len(part))
                    self._w.execute(
                        f"update embedding_cache set used_at = ? where provider = ? and model = ? and fingerprint = ? "
                        f"and hash in ({marks})",
                        (time.time(), *key, *part),
                    )
        return out

    def cache_put(
        self, key: tuple[str, str, str], items: Sequence[tuple[str, np.ndarray]], max_entries: int
    ) -> None:
        if self._cache_store is not None:
            self._cache_store.cache_put(key, items, max_entries)
            return
        if not items:
            return
        now = time.time()
        with self.transaction(doing="update the embedding cache"):
            conn = self._w
            conn.executemany(
                "insert or replace into embedding_cache(provider, model, fingerprint, hash, dims, vector, used_at) "
                "values (?,?,?,?,?,?,?)",
                [(*key, h, int(v.shape[0]), _blob(v), now) for h, v in items],
            )
            total = conn.execute("select count(*) from embedding_cache").fetchone()[0]
            if total > max_entries:
                conn.execute(
                    "delete from embedding_cache where rowid in "
                    "(select rowid from embedding_cache order by used_at asc limit ?)",
                    (total - max_entries,),
                )


def top_rows(sims: np.ndarray, k: int) -> np.ndarray:
    """The rows of the `k` highest scores, best first, equal scores by row and NaN last: which
    of several duplicate chunks makes the cut must not depend on the selection algorithm."""
    import numpy as np

    n = sims.shape[0]
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, dtype=np.intp)
    keys = np.where(np.isnan(sims), -np.inf, sims)
    kth = keys[np.argpartition(keys, n - k)[n - k :]].min()
    rows = np.flatnonzero(keys >= kth)
    best: np.ndarray = rows[np.lexsort((rows, -keys[rows]))][:k]
    return best


def _rollback(conn: Any) -> None:
    # SQLite may have rolled back on its own (a full disk), or a recovery closed the connection:
    # a second rollback would raise
    with contextlib.suppress(Exception):
        if conn.in_transaction:
            conn.execute("rollback")


def describe_recovery(path: Path, rec: Recovery, *, rebuilt: bool) -> str:
    """The one line that tells a user their index was damaged and what was done about it."""
    moved = f"moved to {rec.moved_to}" if rec.moved_to else "replaced by another process"
    then = (
        "rebuilt from the Markdown files (retry)"
        if rebuilt
        else "it is rebuilt from the Markdown files at the next sync"
    )
    return f"index {path} was damaged ({rec.reason}); {moved}; {then}"


def remove_db_files(path: Path) -> None:
    for suffix in ("", *SQLITE_SIDE_FILES):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
