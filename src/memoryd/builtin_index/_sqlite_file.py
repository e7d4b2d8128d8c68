"""One SQLite index file kept usable: opening (read-only when it must), `BEGIN IMMEDIATE`
transactions, WAL read snapshots, moving a damaged file aside (never deleting it), and rebuilds
into a locked scratch file that `publish` copies in with the backup API (never a rename)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

from ..errors import IndexCorrupt, IndexError_, MemorydError, StateError, StateReadOnly
from ..fsio import check_state_path
from . import _sqlite_util as u
from ._common import Recovery, RecoveryHook, StoreBase, VectorEngine
from ._postings import vocab_tables_sql
from ._sqlite_util import log


class SqliteFile(StoreBase):
    """One index file (or a rebuild's scratch copy); the writer and the reader each have a lock."""

    #: (id, apply(conn)) in order: the schema of the file's contents.
    MIGRATIONS: ClassVar[Sequence[tuple[str, Callable[[Any], None]]]]

    def __init__(
        self,
        path: Path,
        *,
        vector_enabled: bool = True,
        extension_path: str | None = None,
        on_recovered: RecoveryHook | None = None,
        scratch_for: Self | None = None,
        own_folder: bool = True,
    ) -> None:
        self.path = path
        self.location = str(path)
        self._own_folder = own_folder
        self._vector_enabled = vector_enabled
        self._extension_path = extension_path
        self.on_recovered = on_recovered
        self._live = scratch_for  # this is its rebuild's scratch file
        self._scratch = scratch_for is not None
        self.lock = threading.RLock()  # the writer's
        self._r_lock = threading.RLock()
        self._w: Any = None
        self._r: Any = None
        self._flock_fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._w_owner: int | None = None
        self._pin: int | None = None  # the thread holding the reader's snapshot
        self._closed = False
        self.vector = VectorEngine("disabled", False, None)
        self.recovered: list[Recovery] = []  # this process's recoveries, oldest first
        self._local_version = 0
        self._reset_caches()
        if scratch_for is not None:
            self._open_scratch(scratch_for)
        else:
            self._open()

    @property
    def conn(self) -> Any:
        """The writer connection (for tests and diagnostics; use the methods otherwise)."""
        return self._w

    def _reset_caches(self) -> None:
        """Forget everything derived from the file's contents (another file is in place)."""
        self._local_version += 1

    def _connect(self, *, uri: str | None = None) -> tuple[Any, VectorEngine]:
        module, name = u._binding()
        try:
            conn = module.connect(
                uri or str(self.path),
                uri=uri is not None,
                timeout=u.BUSY_TIMEOUT_MS / 1000,
                check_same_thread=False,
                isolation_level=None,
            )
        except u.db_errors() as err:
            raise self._classify_open(err) from None
        with contextlib.suppress(*u.db_errors()):  # without FTS5, keyword search is off anyway
            for statement in vocab_tables_sql("chunks_fts"):
                conn.execute(statement)
        if not self._vector_enabled:
            return conn, VectorEngine("disabled", False, "store.vector.enabled = false", name)
        error = u.load_vec(conn, self._extension_path)
        if error is None:
            return conn, VectorEngine("sqlite-vec", True, None, name)
        return conn, VectorEngine("numpy", True, error, name)

    def _classify_open(self, err: BaseException) -> Exception:
        code = u.code(err)
        if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            return u.Damaged(str(err))
        if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN) and os.path.isfile(self.path):
            return u.ReadOnly(str(err))
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return IndexError_(f"cannot open index {self.path}: it is locked by another process")
        if code == sqlite3.SQLITE_FULL:
            return IndexError_(f"cannot open index {self.path}: the disk is full")
        return IndexError_(f"cannot open index {self.path}: {err}")

    def _open(self) -> None:
        """Open (or create) the live index; a damaged file is moved aside and a fresh one made."""
        u.sweep_scratch(self.path)
        moved: Recovery | None = None
        for attempt in range(3):
            try:
                self._open_live()
                break
            except u.Damaged as damage:
                if attempt == 2:
                    raise IndexCorrupt(
                        f"index {self.path} is still damaged after moving it aside: {damage}"
                    ) from None
                moved = Recovery(u.move_aside(self.path, str(damage)), str(damage), time.time())
        if moved is not None:
            self._after_recovery(moved, refill_now=False)

    def _open_live(self) -> None:
        if self._own_folder:
            # a link in place of the index is planted, not damage to heal: refuse it
            check_state_path(self.path)
        damage = u.inspect(self.path)
        if damage is not None:
            raise u.Damaged(damage)
        refusal = self._not_writable() or self._make_private()
        if refusal is not None:
            self._open_read_only(refusal)
            return
        try:
            with contextlib.ExitStack() as opened:  # both closed unless all of it succeeds
                writer, vec = self._connect()
                opened.callback(writer.close)
                try:
                    writer.execute(f"pragma page_size = {u.PAGE_SIZE}")  # before WAL fixes it
                    writer.execute("pragma journal_mode = wal")
                    writer.execute("pragma synchronous = normal")
                    writer.execute(f"pragma journal_size_limit = {u.JOURNAL_SIZE_LIMIT}")
                    u.migrate(writer, self.MIGRATIONS)
                    meta = dict(writer.execute("select key, value from meta").fetchall())
                    reader, _ = self._connect()
                    opened.callback(reader.close)
                    reader.execute("pragma query_only = 1")
                    reader.execute("select count(*) from migrations").fetchone()
                except u.db_errors() as err:
                    raise self._classify_open(err) from None
                writer.execute(f"pragma busy_timeout = {u.WRITE_WAIT_MS}")
                opened.pop_all()
        except u.ReadOnly as err:
            self._open_read_only(self._not_writable() or f"SQLite cannot write there: {err}")
            return
        self._opened(writer, reader, vec, meta, read_only=None)

    def _make_private(self) -> str | None:
        """Make the file and folder private; why the index must open read-only, if it must."""
        try:
            u.make_private(self.path, own_folder=self._own_folder)
        except StateReadOnly as err:
            if not os.path.isfile(self.path):
                raise StateReadOnly(f"cannot create index {self.path}: {err}") from None
            return str(err)
        except StateError as err:
            raise StateError(f"cannot create index {self.path}: {err}") from None
        except OSError as err:
            if u.state_refusal(err) and os.path.isfile(self.path):
                return f"its mode cannot be changed: {u.strerror(err)}"
            raise IndexError_(f"cannot create index {self.path}: {u.strerror(err)}") from None
        return None

    def _opened(
        self,
        writer: Any,
        reader: Any,
        vec: VectorEngine,
        meta: dict[str, str],
        read_only: str | None,
    ) -> None:
        self._w, self._r, self.vector = writer, reader, vec
        self._ident = u.identity(self.path)
        self.read_only = read_only
        self.fts_error = meta.get("fts_error")
        self.trigram_error = meta.get("trigram_error")

    @property
    def keyword_tables(self) -> list[str]:
        """The FTS5 tables this file has: none without FTS5, the trigram one where it loaded."""
        if self.fts_error is not None:
            return []
        return ["chunks_fts"] if self.trigram_error is not None else ["chunks_fts", "chunks_tri"]

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
            try:
                with contextlib.ExitStack() as opened:  # both closed unless all of it succeeds
                    writer, vec = self._connect(uri=quoted + suffix)
                    opened.callback(writer.close)
                    reader, _ = self._connect(uri=quoted + suffix)
                    opened.callback(reader.close)
                    try:
                        done = {r[0] for r in writer.execute("select id from migrations")}
                        meta = dict(writer.execute("select key, value from meta").fetchall())
                    except u.db_errors() as err:
                        raise self._classify_open(err) from None
                    missing = [m for m, _ in self.MIGRATIONS if m not in done]
                    if missing:
                        raise StateReadOnly(
                            f"index {self.path} needs migrations {', '.join(missing)} but {reason}"
                        )
                    opened.pop_all()
            except u.Damaged as err:
                raise IndexCorrupt(
                    f"index {self.path} is damaged ({err}) and cannot be replaced: {reason}"
                ) from None
            except (u.ReadOnly, IndexError_) as err:
                last = err
                continue
            self._opened(writer, reader, vec, meta, read_only=reason + note)
            log.warning("index %s is read-only (%s): searches only", self.path, self.read_only)
            return
        raise StateReadOnly(f"cannot open index {self.path} read-only ({reason}): {last}")

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
        # embeddings cost real money or minutes of CPU: keep every row that still reads (in
        # int8 codes: an older layout's float32 rows are not converted)
        if not os.path.isfile(old):
            return
        uri = "file:" + urllib.parse.quote(str(old)) + "?mode=ro"
        module, _ = u._binding()
        try:
            src = module.connect(uri, uri=True, timeout=1, isolation_level=None)
        except Exception:
            return
        try:
            rows = src.execute(
                "select provider, model, fingerprint, hash, dims, vector, used_at from embedding_cache "
                "where length(vector) = dims"
            )
            with self.transaction(doing="keep the damaged index's embedding cache"):
                sql = "insert or ignore into embedding_cache values (?,?,?,?,?,?,?)"
                kept = self._w.executemany(sql, _until_unreadable(rows)).rowcount
            if kept > 0:
                log.warning("kept %d cached embeddings from %s", kept, old)
        except Exception as err:
            log.info("nothing salvaged from %s's embedding cache: %s", old, err)
        finally:
            with contextlib.suppress(Exception):
                src.close()

    def recover(self, reason: str) -> tuple[Recovery, bool]:
        """Move the damaged file aside (unless another process did), reopen; (recovery, refilled)."""
        with self.lock:
            mine = self._ident is not None and u.identity(self.path) == self._ident
            self._close_connections()
            moved = u.move_aside(self.path, reason) if mine else None
            self._open()
            rec = Recovery(moved, reason, time.time())
        return rec, self._after_recovery(rec, refill_now=mine)

    def verify(self, *, deep: bool = False) -> str | None:
        """What is wrong with the file (quick_check; `deep`: FTS5 checks too), or None."""
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
                for table in self.keyword_tables:
                    if not self.read_only:
                        conn.execute(f"insert into {table}({table}) values ('integrity-check')")
                    rows_in = int(conn.execute(f"select count(*) from {table}").fetchone()[0])
                    if rows_in != chunks:
                        return f"{table} holds {rows_in} rows for {chunks} chunks"
            except u.db_errors() as err:
                if u.code(err) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
                    return str(err)
                if u.code(err) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                    raise IndexError_(
                        f"cannot check index {self.path}: it is locked by another process"
                    ) from None
                raise IndexError_(f"cannot check index {self.path}: {err}") from None
        return None

    def recoveries(self) -> list[Recovery]:
        """Damaged files moved aside beside this index (kept until the user deletes them)."""
        recorded: dict[str, Any] = {}
        with contextlib.suppress(MemorydError, ValueError):
            recorded = self._recorded_recoveries()
        return u.moved_aside(self.path, recorded)

    def _recorded_recoveries(self) -> dict[str, Any]:
        raw = self.meta_value("recoveries")
        value = json.loads(raw) if raw else {}
        return value if isinstance(value, dict) else {}

    def _ensure_current(self) -> None:
        """Follow the index file if another process replaced it (a recovery moved it aside)."""
        if self._scratch or self._ident is None or u.identity(self.path) == self._ident:
            return
        with self.lock:
            if u.identity(self.path) == self._ident:
                return
            self._close_connections()
            self._open()
            rec = Recovery(None, "the index file was replaced by another process", time.time())
            self._reset_caches()
        log.info("index %s was replaced by another process: reopened it", self.path)
        if self.on_recovered is not None:
            self.on_recovered(rec, False)

    def _failed(self, err: BaseException, doing: str, *, writing: bool) -> MemorydError:
        """The one-line error for a failed SQLite call; a damaged file is recovered first."""
        code = u.code(err)
        where = f"index {self.path}"
        unchanged = "; the index was left as it was" if writing else ""
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return IndexError_(f"cannot {doing}: {where} is locked by another process")
        if code == sqlite3.SQLITE_FULL:
            self._free_wal()
            return IndexError_(
                f"cannot {doing}: the disk holding {self.path.parent} is full{unchanged}"
            )
        if code == sqlite3.SQLITE_READONLY:
            self.read_only = self.read_only or f"writes are refused: {err}"
            return StateReadOnly(f"cannot {doing}: {where} is read-only ({err})")
        if code == sqlite3.SQLITE_IOERR:
            self._free_wal()
            return IndexError_(f"cannot {doing}: disk I/O error on {where}{unchanged}")
        if self._scratch or self._closed:
            return IndexError_(f"cannot {doing}: {err}")
        problem = str(err) if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) else None
        if problem is None:
            with contextlib.suppress(MemorydError):
                problem = self.verify()
        if problem is None:
            return IndexError_(f"cannot {doing}: {err}")
        rec, rebuilt = self.recover(problem)
        moved = f"moved to {rec.moved_to}" if rec.moved_to else "replaced by another process"
        then = "rebuilt from the Markdown files (retry)"
        if not rebuilt:
            then = "it is rebuilt from the Markdown files at the next sync"
        return IndexCorrupt(f"index {self.path} was damaged ({rec.reason}); {moved}; {then}")

    def _free_wal(self) -> None:
        # a failed transaction leaves its frames in the WAL: hand that space back to the disk
        if self._w is None or self._scratch or self.read_only:
            return
        with self.lock, contextlib.suppress(Exception):
            # a short wait: a reader in another process must not hold up a shutdown or an error
            self._w.execute("pragma busy_timeout = 100")
            try:
                self._w.execute("pragma wal_checkpoint(truncate)")
            finally:
                self._w.execute(f"pragma busy_timeout = {u.WRITE_WAIT_MS}")

    def open_scratch(self) -> Self:
        """A private scratch database beside this index; fill it, `publish` it, `discard` it."""
        self._check_writable("rebuild the index")
        import secrets  # only for a rebuild

        name = f"{self.path.name}{u.SCRATCH_INFIX}{os.getpid()}-{secrets.token_hex(4)}.tmp"
        return type(self)(
            self.path.with_name(name),
            vector_enabled=self._vector_enabled,
            extension_path=self._extension_path,
            scratch_for=self,
            own_folder=self._own_folder,
        )

    def _open_scratch(self, live: SqliteFile) -> None:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as err:
            cls = StateReadOnly if u.state_refusal(err) else IndexError_
            raise cls(f"cannot create the rebuild file {self.path}: {u.strerror(err)}") from None
        # held until discard(): a sweeper that can take it knows the rebuild is gone
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._flock_fd = fd
        with u.ACTIVE_LOCK:
            u.ACTIVE_SCRATCH.add(str(self.path))
        try:
            conn, vec = self._connect()
            self._w = conn  # for discard() if the setup fails
            with live.lock:
                page_size = int(live._w.execute("pragma page_size").fetchone()[0])
            # the backup into a WAL database needs equal page sizes; the scratch is disposable,
            # so no journal on disk and no fsync
            conn.execute(f"pragma page_size = {page_size}")
            conn.execute("pragma journal_mode = memory")
            conn.execute("pragma synchronous = off")
            u.migrate(conn, self.MIGRATIONS)
            meta = dict(conn.execute("select key, value from meta").fetchall())
        except BaseException as err:
            self.discard()
            if isinstance(err, u.db_errors()) and not isinstance(err, MemorydError):
                raise self._failed(err, "create the rebuild file", writing=True) from None
            raise
        self._opened(conn, conn, vec, meta, read_only=None)

    def discard(self) -> None:
        """Close and delete a scratch database."""
        self._close_connections()
        self._closed = True
        u.remove_db_files(self.path)
        if self._flock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._flock_fd)
            self._flock_fd = None
        with u.ACTIVE_LOCK:
            u.ACTIVE_SCRATCH.discard(str(self.path))

    def publish(self, scratch: StoreBase) -> None:
        """Copy the scratch in (backup API, one WAL transaction), with the live cache and records."""
        assert isinstance(scratch, SqliteFile), "a scratch from this store's open_scratch"
        self._check_writable("publish the rebuilt index")
        failure: BaseException | None = None
        with self.lock:
            self._ensure_current()
            scratch._adopt_live_state(self.path)
            try:
                scratch._w.backup(self._w)
            except u.db_errors() as err:
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
            conn.execute(
                "insert or replace into main.embedding_cache select * from live.embedding_cache"
            )
            conn.execute(
                "insert or replace into main.meta select key, value from live.meta "
                "where key = 'recoveries'"
            )
        except u.db_errors() as err:  # a damaged old index: its cache is only an optimization
            log.warning("could not carry the embedding cache of %s: %s", live, err)
        finally:
            with contextlib.suppress(Exception):  # fails too when the attach did
                conn.execute("detach database live")

    def _close_connections(self) -> None:
        with self._r_lock:
            self._pin = None
        for attr in ("_r", "_w"):
            conn = getattr(self, attr)
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            setattr(self, attr, None)

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
            self._free_wal()
            self._closed = True
            self._close_connections()

    def _end_pin(self) -> None:
        with self._r_lock:
            if self._pin is None:
                return
            self._pin = None
            with contextlib.suppress(Exception):
                if self._r is not None and self._r.in_transaction:
                    self._r.execute("commit")

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Within, this thread's reads see one committed state (a write of its own ends it)."""
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
        except u.db_errors() as err:
            if self._w_owner == threading.get_ident():
                raise  # inside this thread's transaction: it rolls back first, then handles it
            failure = err
        if failure is not None:
            raise self._failed(failure, doing, writing=False) from None

    @contextlib.contextmanager
    def transaction(
        self, *, wait_ms: int | None = None, doing: str = "update the index"
    ) -> Iterator[None]:
        """One `BEGIN IMMEDIATE` transaction (nested calls join it); failures: one-line errors."""
        me = threading.get_ident()
        if self._w_owner == me:
            yield
            return
        self._check_writable(doing)
        if self._pin == me:
            self._end_pin()  # what this thread writes, it reads back
        failure: BaseException | None = None
        with self.lock:
            self._ensure_current()
            conn = self._w
            try:
                self._begin_immediate(conn, wait_ms)
            except u.db_errors() as err:
                failure = err
            else:
                self._w_owner = me
                try:
                    yield
                    conn.execute("commit")
                except u.db_errors() as err:
                    failure = err
                    u.rollback(conn)
                except BaseException:
                    u.rollback(conn)
                    raise
                finally:
                    self._w_owner = None
                if failure is None:
                    self._local_version += 1
        if failure is not None:
            raise self._failed(failure, doing, writing=True) from None

    @staticmethod
    def _begin_immediate(conn: Any, wait_ms: int | None) -> None:
        if wait_ms is None:
            conn.execute("begin immediate")
            return
        conn.execute(f"pragma busy_timeout = {int(wait_ms)}")
        try:
            conn.execute("begin immediate")
        finally:
            conn.execute(f"pragma busy_timeout = {u.WRITE_WAIT_MS}")

    @property
    def version(self) -> tuple[int, int]:
        """Changes whenever this connection or any other (another process) commits a write."""
        with self._reading("read the index") as conn:
            other = int(conn.execute("pragma data_version").fetchone()[0])
        return self._local_version, other

    def _mine(self, alias: str = "") -> str:
        return "1"  # one index a file

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._reading("read the index") as conn:
            rows: list[Any] = conn.execute(sql, params).fetchall()
        return rows

    def _write(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._w.execute(sql, params)

    def set_meta(self, values: dict[str, str], *, wait_ms: int | None = None) -> None:
        with self.transaction(wait_ms=wait_ms, doing="save index metadata"):
            self._w.executemany(
                "insert or replace into meta(key, value) values (?, ?)", list(values.items())
            )


def _until_unreadable(rows: Iterable[Any]) -> Iterator[Any]:
    """`rows` up to the first that does not read: a damaged page ends a salvage, not fails it."""
    with contextlib.suppress(Exception):
        yield from rows
