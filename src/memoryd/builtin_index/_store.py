"""The SQLite side of the built-in index: connections, migrations, FTS5, vectors, embedding cache.

Connections come from `sqlean` (a DB-API sqlite3 twin that bundles a modern SQLite able to load
extensions) so sqlite-vec's `vec0` works in the default install; the stdlib `sqlite3` is used
when it can load extensions, and a numpy brute-force search stands in when no vec0 can load.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ..core.text import segment_for_fts
from ..errors import IndexError_, StateError
from ..fsio import private_database

BUSY_TIMEOUT_MS = 5000
#: Up to this many vectors, KNN runs over an in-memory numpy matrix (~1.5 KB per 384-d vector).
IN_MEMORY_MAX_VECTORS = 50_000


@dataclass
class VectorEngine:
    engine: str  # "sqlite-vec" | "numpy" | "disabled"
    available: bool
    load_error: str | None = None
    binding: str = "sqlite3"


def _binding() -> tuple[ModuleType, str]:
    try:
        import sqlean

        return sqlean, "sqlean"
    except ImportError:
        import sqlite3

        return sqlite3, "sqlite3"


def _load_vec(conn: Any, extension_path: str | None) -> str | None:
    """Load sqlite-vec into conn; returns an error message, or None on success."""
    if not hasattr(conn, "enable_load_extension"):
        return "this Python's sqlite3 cannot load extensions (install sqlean.py)"
    try:
        conn.enable_load_extension(True)
        if extension_path:
            conn.load_extension(extension_path)
        else:
            import sqlite_vec

            sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        conn.execute("select vec_version()").fetchone()
    except Exception as err:  # the binding raises its own OperationalError/AttributeError types
        return f"sqlite-vec failed to load: {err}"
    return None


def connect(
    path: Path, *, vector_enabled: bool = True, extension_path: str | None = None
) -> tuple[Any, VectorEngine]:
    """Open the index with WAL, a busy timeout and (when possible) sqlite-vec loaded."""
    module, name = _binding()
    try:
        # SQLite gives -wal/-shm the database file's mode: create it private first.
        private_database(path)
    except StateError as err:
        raise IndexError_(f"cannot create index {path}: {err}") from None
    try:
        conn = module.connect(
            str(path), timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False, isolation_level=None
        )
        conn.execute(f"pragma busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("pragma journal_mode = wal")
        conn.execute("pragma synchronous = normal")
    except Exception as err:
        raise IndexError_(f"cannot open index {path}: {err}") from None
    if not vector_enabled:
        return conn, VectorEngine("disabled", False, "store.vector.enabled = false", name)
    error = _load_vec(conn, extension_path)
    if error is None:
        return conn, VectorEngine("sqlite-vec", True, None, name)
    return conn, VectorEngine("numpy", True, error, name)


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
            "create virtual table chunks_fts using fts5(body, tokenize = 'porter unicode61 remove_diacritics 2')"
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


MIGRATIONS: list[tuple[str, Callable[[Any], None]]] = [
    ("m001_base", _m001_base),
    ("m002_fts", _m002_fts),
]


def migrate(conn: Any) -> list[str]:
    """Apply pending numbered migrations in order; each runs in its own transaction."""
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
        except Exception as err:
            conn.execute("rollback")
            raise IndexError_(f"migration {mig_id} failed: {err}") from None
        applied.append(mig_id)
    return applied


# ----------------------------------------------------------------------------- the store


def _blob(vec: np.ndarray) -> bytes:
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


class Store:
    """One SQLite index file. Thread-safe: every statement runs under the store's lock."""

    def __init__(
        self, path: Path, *, vector_enabled: bool = True, extension_path: str | None = None
    ) -> None:
        self.path = path
        self.conn, self.vector = connect(
            path, vector_enabled=vector_enabled, extension_path=extension_path
        )
        self.lock = threading.RLock()
        migrate(self.conn)
        meta = self.meta()
        self.fts_error: str | None = meta.get("fts_error")
        self.trigram_error: str | None = meta.get("trigram_error")
        self._vec_dims: int | None = self._vec_table_dims()
        self._matrix: tuple[tuple[int, int], np.ndarray, np.ndarray] | None = (
            None  # (version, ids, matrix)
        )
        self._local_version = 0
        self._count_cache: tuple[tuple[int, int], int] | None = None

    @property
    def version(self) -> tuple[int, int]:
        """Changes whenever this connection or any other (another process) commits a write."""
        with self.lock:
            other = int(self.conn.execute("pragma data_version").fetchone()[0])
        return self._local_version, other

    # -- housekeeping --------------------------------------------------------------------------

    def close(self) -> None:
        with self.lock:
            with contextlib.suppress(Exception):
                self.conn.execute("pragma wal_checkpoint(truncate)")
            self.conn.close()

    @property
    def fts_available(self) -> bool:
        return self.fts_error is None

    def meta(self) -> dict[str, str]:
        with self.lock:
            return dict(self.conn.execute("select key, value from meta").fetchall())

    def set_meta(self, values: dict[str, str]) -> None:
        with self.lock:
            self.conn.executemany(
                "insert or replace into meta(key, value) values (?, ?)", list(values.items())
            )

    @property
    def vec_dims(self) -> int | None:
        """Dimensions of the stored vectors (None until the first vector is written)."""
        return self._vec_dims

    def finalize_for_publish(self) -> None:
        """Fold the WAL into the main file and leave journal mode `delete`: one self-contained file."""
        with self.lock:
            self.conn.execute("pragma wal_checkpoint(truncate)")
            self.conn.execute("pragma journal_mode = delete")

    def _vec_table_dims(self) -> int | None:
        with self.lock:
            row = self.conn.execute("select value from meta where key = 'vec_dims'").fetchone()
        return int(row[0]) if row else None

    # -- files and chunks ------------------------------------------------------------------------

    def files(self) -> dict[str, tuple[str, float, int, str]]:
        with self.lock:
            rows = self.conn.execute("select path, hash, mtime, size, source from files").fetchall()
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
        with self.lock:
            self.conn.execute("begin immediate")
            try:
                self._delete_chunks_of(path)
                for start, end, chash, text, tokens in chunks:
                    cur = self.conn.execute(
                        "insert into chunks(path, source, start_line, end_line, hash, text, tokens) values (?,?,?,?,?,?,?)",
                        (path, source, start, end, chash, text, tokens),
                    )
                    rowid = cur.lastrowid
                    if self.fts_available:
                        seg = segment_for_fts(text)
                        self.conn.execute(
                            "insert into chunks_fts(rowid, body) values (?, ?)", (rowid, seg)
                        )
                        if self.trigram_error is None:
                            self.conn.execute(
                                "insert into chunks_tri(rowid, body) values (?, ?)", (rowid, text)
                            )
                self.conn.execute(
                    "insert or replace into files(path, abs_path, source, hash, mtime, size) values (?,?,?,?,?,?)",
                    (path, abs_path, source, file_hash, mtime, size),
                )
                self.conn.execute("commit")
            except BaseException:
                self.conn.execute("rollback")
                raise
            self._local_version += 1

    def touch_file(self, path: str, mtime: float, size: int) -> None:
        with self.lock:
            self.conn.execute(
                "update files set mtime = ?, size = ? where path = ?", (mtime, size, path)
            )

    def remove_file(self, path: str) -> None:
        with self.lock:
            self.conn.execute("begin immediate")
            try:
                self._delete_chunks_of(path)
                self.conn.execute("delete from files where path = ?", (path,))
                self.conn.execute("commit")
            except BaseException:
                self.conn.execute("rollback")
                raise
            self._local_version += 1

    def _delete_chunks_of(self, path: str) -> None:
        ids = [r[0] for r in self.conn.execute("select id from chunks where path = ?", (path,))]
        if not ids:
            return
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            if self.fts_available:
                self.conn.execute(f"delete from chunks_fts where rowid in ({marks})", part)
                if self.trigram_error is None:
                    self.conn.execute(f"delete from chunks_tri where rowid in ({marks})", part)
            if self._vec_dims is not None and self.vector.engine == "sqlite-vec":
                self.conn.execute(f"delete from chunks_vec where rowid in ({marks})", part)
            self.conn.execute(f"delete from chunk_vectors where chunk_id in ({marks})", part)
            self.conn.execute(f"delete from chunks where id in ({marks})", part)

    def counts(self) -> dict[str, Any]:
        with self.lock:
            files = self.conn.execute("select count(*) from files").fetchone()[0]
            chunks = self.conn.execute("select count(*) from chunks").fetchone()[0]
            pending = self.conn.execute(
                "select count(*) from chunks where has_vector = 0"
            ).fetchone()[0]
            by_source = dict(
                self.conn.execute("select source, count(*) from files group by source").fetchall()
            )
            cache = self.conn.execute("select count(*) from embedding_cache").fetchone()[0]
        return {
            "files": files,
            "chunks": chunks,
            "pending_vectors": pending,
            "source_counts": by_source,
            "cache_entries": cache,
        }

    def pending_count(self) -> int:
        with self.lock:
            return int(
                self.conn.execute("select count(*) from chunks where has_vector = 0").fetchone()[0]
            )

    def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        ids = list(ids)
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        with self.lock:
            rows = self.conn.execute(
                f"select c.id, c.path, c.source, c.start_line, c.end_line, c.text, f.mtime "
                f"from chunks c left join files f on f.path = c.path where c.id in ({marks})",
                ids,
            ).fetchall()
        return {r[0]: ChunkRow(*r) for r in rows}

    def chunk_ids_for_paths(self, paths: Sequence[str], limit_per_path: int) -> list[int]:
        out: list[int] = []
        with self.lock:
            for p in paths:
                out.extend(
                    r[0]
                    for r in self.conn.execute(
                        "select id from chunks where path = ? order by start_line limit ?",
                        (p, limit_per_path),
                    )
                )
        return out

    def abs_paths(self, source: str) -> list[str]:
        """Absolute paths of the indexed files of one source."""
        with self.lock:
            return [
                r[0]
                for r in self.conn.execute("select abs_path from files where source = ?", (source,))
            ]

    def paths(self) -> list[str]:
        with self.lock:
            return [r[0] for r in self.conn.execute("select path from files")]

    # -- keyword search --------------------------------------------------------------------------

    def keyword_search(
        self, match: str, limit: int, *, trigram: bool = False
    ) -> list[tuple[int, float]]:
        """(chunk id, positive BM25 strength) best first."""
        if not self.fts_available or (trigram and self.trigram_error is not None):
            return []
        table = "chunks_tri" if trigram else "chunks_fts"
        with self.lock:
            try:
                rows = self.conn.execute(
                    f"select rowid, bm25({table}) as r from {table} where {table} match ? order by r limit ?",
                    (match, limit),
                ).fetchall()
            except Exception:  # malformed MATCH from odd input: treat as no keyword hits
                return []
        return [(int(r[0]), -float(r[1])) for r in rows]

    # -- vectors -------------------------------------------------------------------------------

    def pending_chunks(self, limit: int) -> list[tuple[int, str, str]]:
        with self.lock:
            return [
                (r[0], r[1], r[2])
                for r in self.conn.execute(
                    "select id, hash, text from chunks where has_vector = 0 order by id limit ?",
                    (limit,),
                )
            ]

    def _ensure_vec_table(self, dims: int) -> None:
        if self._vec_dims == dims:
            return
        if self._vec_dims is not None and self._vec_dims != dims:
            raise IndexError_(
                f"vector dims changed from {self._vec_dims} to {dims}; a reindex is required"
            )
        if self.vector.engine == "sqlite-vec":
            self.conn.execute(
                f"create virtual table if not exists chunks_vec using vec0(embedding float[{dims}] distance_metric=cosine)"
            )
        self.conn.execute(
            "insert or replace into meta(key, value) values ('vec_dims', ?)", (str(dims),)
        )
        self._vec_dims = dims

    def write_vectors(self, rows: Sequence[tuple[int, np.ndarray]]) -> None:
        if not rows:
            return
        dims = int(rows[0][1].shape[0])
        with self.lock:
            self.conn.execute("begin immediate")
            try:
                self._ensure_vec_table(dims)
                for chunk_id, vec in rows:
                    # the chunk may have been deleted by a concurrent file change
                    if not self.conn.execute(
                        "select 1 from chunks where id = ?", (chunk_id,)
                    ).fetchone():
                        continue
                    blob = _blob(vec)
                    self.conn.execute(
                        "insert or replace into chunk_vectors(chunk_id, vector) values (?, ?)",
                        (chunk_id, blob),
                    )
                    if self.vector.engine == "sqlite-vec":
                        self.conn.execute("delete from chunks_vec where rowid = ?", (chunk_id,))
                        if np.any(vec):
                            self.conn.execute(
                                "insert into chunks_vec(rowid, embedding) values (?, ?)",
                                (chunk_id, blob),
                            )
                    self.conn.execute("update chunks set has_vector = 1 where id = ?", (chunk_id,))
                self.conn.execute("commit")
            except BaseException:
                self.conn.execute("rollback")
                raise
            self._local_version += 1

    def vector_search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) best first."""
        if self._vec_dims is None or query.shape[0] != self._vec_dims or not self.vector.available:
            return []
        if self.vector.engine == "sqlite-vec" and self._vector_count() > IN_MEMORY_MAX_VECTORS:
            with self.lock:
                rows = self.conn.execute(
                    "select rowid, distance from chunks_vec where embedding match ? and k = ?",
                    (_blob(query), k),
                ).fetchall()
            return [(int(r[0]), 1.0 - float(r[1])) for r in rows]
        # Exact search over an in-memory matrix: ~1 ms at 12.7k x 384 where vec0's scan took
        # ~10 ms (bench/bench_builtin_index.py); vec0 takes over for indexes too big to hold.
        return self._numpy_search(query, k)

    def _vector_count(self) -> int:
        version = self.version
        if self._count_cache is None or self._count_cache[0] != version:
            with self.lock:
                n = int(self.conn.execute("select count(*) from chunk_vectors").fetchone()[0])
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

    def _numpy_search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        if self._matrix is None or self._matrix[0] != self.version:
            with self.lock:
                version = self.version
                rows = self.conn.execute("select chunk_id, vector from chunk_vectors").fetchall()
            if rows:
                ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
                matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(
                    len(rows), -1
                )
            else:
                ids, matrix = np.zeros(0, np.int64), np.zeros((0, query.shape[0]), np.float32)
            self._matrix = (version, ids, matrix)
        _, ids, matrix = self._matrix
        if not len(ids):
            return []
        sims = matrix @ query.astype(np.float32)
        k = min(k, len(ids))
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top])]
        return [(int(ids[i]), float(sims[i])) for i in top]

    # -- embedding cache -----------------------------------------------------------------------

    def cache_get(self, key: tuple[str, str, str], hashes: Sequence[str]) -> dict[str, np.ndarray]:
        if not hashes:
            return {}
        out: dict[str, np.ndarray] = {}
        now = time.time()
        with self.lock:
            for start in range(0, len(hashes), 500):
                part = list(hashes[start : start + 500])
                marks = ",".join("?" * len(part))
                rows = self.conn.execute(
                    f"select hash, vector from embedding_cache where provider = ? and model = ? and fingerprint = ? "
                    f"and hash in ({marks})",
                    (*key, *part),
                ).fetchall()
                for h, blob in rows:
                    out[h] = np.frombuffer(blob, dtype=np.float32).copy()
                if rows:
                    hit_marks = ",".join("?" * len(rows))
                    self.conn.execute(
                        f"update embedding_cache set used_at = ? where provider = ? and model = ? and fingerprint = ? "
                        f"and hash in ({hit_marks})",
                        (now, *key, *[r[0] for r in rows]),
                    )
        return out

    def cache_put(
        self, key: tuple[str, str, str], items: Sequence[tuple[str, np.ndarray]], max_entries: int
    ) -> None:
        if not items:
            return
        now = time.time()
        with self.lock:
            self.conn.executemany(
                "insert or replace into embedding_cache(provider, model, fingerprint, hash, dims, vector, used_at) "
                "values (?,?,?,?,?,?,?)",
                [(*key, h, int(v.shape[0]), _blob(v), now) for h, v in items],
            )
            total = self.conn.execute("select count(*) from embedding_cache").fetchone()[0]
            if total > max_entries:
                self.conn.execute(
                    "delete from embedding_cache where rowid in "
                    "(select rowid from embedding_cache order by used_at asc limit ?)",
                    (total - max_entries,),
                )

    def copy_cache_from(self, other: Path) -> int:
        """Import another index file's embedding cache (used by the atomic reindex)."""
        if not other.exists():
            return 0
        with self.lock:
            try:
                self.conn.execute("attach database ? as old", (str(other),))
            except Exception:
                return 0
            try:
                self.conn.execute(
                    "insert or ignore into embedding_cache select * from old.embedding_cache"
                )
                return int(self.conn.execute("select changes()").fetchone()[0])
            except Exception:
                return 0
            finally:
                self.conn.execute("detach database old")


def remove_db_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
