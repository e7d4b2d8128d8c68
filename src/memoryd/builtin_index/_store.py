"""The SQLite index's contents, each stored once: migrations, files, chunks (the text), FTS5
postings (contentless), the trigram index (distinct words), int8 vectors, the embedding cache."""

from __future__ import annotations

import logging
import math
import re
import sqlite3
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # numpy is imported where used: a keyword-only search never loads it
    import numpy as np

    from ._knn import VectorMatrix

from ..core.text import segment_for_fts
from ..errors import IndexError_
from ._common import ChunkRow as ChunkRow  # re-exported, as the next, for index.py
from ._common import Recovery as Recovery
from ._postings import Postings, or_phrases
from ._sqlite_file import SqliteFile
from ._sqlite_util import Damaged, _binding, code, db_errors

log = logging.getLogger("memoryd.builtin_index")
_T = TypeVar("_T")

#: The keyword index's tokenizer (`chunks_fts`; `_postings` tokenizes query terms with it too).
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
#: Up to this many bytes of vectors (174k 384-d ones), a long-lived process's KNN runs over a
#: numpy matrix held in memory; above, sqlite-vec scans the stored vectors in SQL for each
#: query, which reads them all from the file each time.
IN_MEMORY_MAX_BYTES = 256 * 2**20
#: What the trigram index holds of a chunk: its runs of word characters (and the `.-/:` that
#: `core.text.trigram_terms` keeps inside a query term), each once. A query term is one such
#: run, so it matches inside a chunk's text exactly when it matches inside one of these.
_TRIGRAM_RUN = re.compile(r"[\w.\-/:]{3,}")

_FTS_QUERY_ERRORS = (
    "fts5:",
    "syntax error",
    "no such column",
    "unterminated string",
    "special query",
)


def trigram_body(text: str) -> str:
    """The trigram index's row for a chunk's text: its distinct runs (`_TRIGRAM_RUN`)."""
    return " ".join(dict.fromkeys(run.lower() for run in _TRIGRAM_RUN.findall(text)))


#: What each keyword table indexes of a chunk's text.
_KEYWORD_BODY = {"chunks_fts": segment_for_fts, "chunks_tri": trigram_body}


def _create_layout(conn: Any) -> None:
    if conn.execute("select 1 from migrations").fetchone():
        # pre-release indexes are not converted: moved aside, rebuilt from the files
        raise Damaged("written by a development build of memoryd in an older layout")
    # executescript() would commit the migration's transaction; run statements one by one
    for statement in """
        create table meta (key text primary key, value text not null);
        create table files (path text primary key, abs_path text not null, source text not null,
            hash text not null, mtime real not null, size integer not null);
        create table chunks (id integer primary key, path text not null, source text not null,
            start_line integer not null, end_line integer not null, hash text not null,
            text text not null, tokens integer not null, has_vector integer not null default 0);
        create index chunks_by_path on chunks(path);
        create index chunks_pending on chunks(has_vector) where has_vector = 0;
        create table chunk_vectors (chunk_id integer primary key, vector blob not null);
        -- counting the vectors and picking the background sample read ids, not every vector
        create index chunk_vectors_ids on chunk_vectors(chunk_id);
        create table embedding_cache (provider text not null, model text not null,
            fingerprint text not null, hash text not null, dims integer not null,
            vector blob not null, used_at real not null,
            primary key (provider, model, fingerprint, hash));
        create index embedding_cache_lru on embedding_cache(used_at);
        """.split(";"):
        if statement.strip():
            conn.execute(statement)
    _create_keyword_tables(conn)


def _create_keyword_tables(conn: Any) -> None:
    # Optional features: a SQLite without FTS5 still gets a working (vector-only) index.
    for table, tokenizer, key in (
        ("chunks_fts", FTS_TOKENIZER, "fts_error"),
        ("chunks_tri", "trigram", "trigram_error"),
    ):
        try:
            # no copy of the text: rows go by FTS5's `delete` command with the text they were
            # indexed with (`contentless_delete` would keep counting deleted rows in bm25)
            conn.execute(
                f"create virtual table {table} using fts5(body, tokenize = '{tokenizer}', content = '')"
            )
        except Exception as err:
            conn.execute("insert or replace into meta(key, value) values (?, ?)", (key, str(err)))
            return


#: The index layout, named after the development-build migration that completed it: an index
#: that records it is in this layout (later releases append their migrations to `MIGRATIONS`).
LAYOUT = "m005_int8_vectors"


def _codes(vec: np.ndarray | array[float]) -> bytes:
    """int8 codes scaled to the largest component; vectors are unit length, so no scale is kept."""
    import numpy as np

    v = np.nan_to_num(np.asarray(vec, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    peak = float(np.abs(v).max()) if v.size else 0.0
    codes: bytes = np.rint(v * (127 / peak if peak > 0 else 0.0)).astype(np.int8).tobytes()
    return codes


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """`matrix` (float32) with each nonzero row scaled to unit length, in place."""
    import numpy as np

    # einsum: no squared copy of the whole matrix (np.linalg.norm makes one)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))[:, None]
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


def _vector(blob: bytes, dims: int) -> np.ndarray:
    """A stored vector as a float32 unit vector (zero stays zero; the wrong length reads as zero)."""
    import numpy as np

    row = np.zeros((1, dims), np.float32)
    if len(blob) == dims:
        row[0] = np.frombuffer(blob, dtype=np.int8)
    out: np.ndarray = unit_rows(row)[0]
    return out


def _query_codes(query: array[float]) -> bytes:
    """`_codes` of a query without numpy (a one-off search loads none), byte for byte: the scale
    and the products rounded to float32 as numpy's float32 arithmetic rounds them."""
    peak = max((abs(x) for x in query if math.isfinite(x)), default=0.0)
    scale = array("f", [127 / peak if peak > 0 else 0.0])[0]
    scaled = array("f", (x * scale if math.isfinite(x) else 0.0 for x in query))
    return array("b", (round(x) for x in scaled)).tobytes()


def _batches(items: Sequence[Any]) -> Iterator[tuple[list[Any], str]]:
    """`items` 500 at a time, each with its `?` placeholders (SQLite's bound-parameter limit)."""
    for start in range(0, len(items), 500):
        part = list(items[start : start + 500])
        yield part, ",".join("?" * len(part))


class Store(SqliteFile):
    """One SQLite index file's contents (or, with `scratch_for`, a rebuild's scratch copy's)."""

    _VECTOR = "v.vector"
    MIGRATIONS = ((LAYOUT, _create_layout),)

    def _decoded(self, stored: Any) -> np.ndarray:
        return _vector(stored, self.vec_dims or 0)

    def _pending(self) -> str:
        return "chunks c where c.has_vector = 0"

    def _reset_caches(self) -> None:
        super()._reset_caches()
        #: What `_at_version` computed, by name, with the index version it is of.
        self._by_version: dict[str, tuple[tuple[int, int], Any]] = {}
        # hashes of the chunks handed out for embedding: a vector is only stored on the same text
        self._pending_hashes: dict[int, str] = {}
        #: Keyword search from postings held in memory, after the first search at a state.
        self._postings: Postings | None = None
        if not self._scratch:
            self._postings = Postings(FTS_TOKENIZER, self._private_memory_db)

    def _at_version(self, name: str, compute: Callable[[], _T]) -> _T:
        """`compute()`, once per index version."""
        version = self.version
        held = self._by_version.get(name)
        if held is None or held[0] != version:
            self._by_version.pop(name, None)  # the old one goes before the new one is built
            held = self._by_version[name] = (version, compute())
        out: _T = held[1]
        return out

    @property
    def vec_dims(self) -> int | None:
        """Dimensions of the stored vectors (None until the first vector is written)."""

        def read() -> int | None:
            rows = self._read("select value from meta where key = 'vec_dims'")
            return int(rows[0][0]) if rows else None

        return self._at_version("vec_dims", read)

    def query_as_stored(self, query: np.ndarray | array[float]) -> np.ndarray | array[float]:
        """`query` at the stored precision, so cosines in SQL and in numpy agree to rounding."""
        if not isinstance(query, array):
            return _vector(_codes(query), len(query))
        codes = array("b", _query_codes(query))
        norm = math.sqrt(sum(c * c for c in codes)) or 1.0
        return array("f", (c / norm for c in codes))

    def _cosine_sql(self, column: str, query: array[float]) -> tuple[str, bytes]:
        """SQL for `column`'s cosine to `query` (0 for a zero vector) and the query's parameter."""
        expr = f"vec_distance_cosine(vec_int8({column}), vec_int8(?))"
        return f"coalesce(1.0 - {expr}, 0.0)", _query_codes(query)

    def replace_file(
        self,
        path: str,
        abs_path: str,
        source: str,
        file_hash: str,
        mtime: float,
        size: int,
        chunks: Sequence[tuple[int, int, str, str, int]],
    ) -> int:
        """Swap a file's chunks (start, end, hash, text, tokens), keeping unchanged ones; rows written."""
        with self.transaction(doing=f"index {path}"):
            conn = self._w
            kept: dict[str, list[tuple[int, int, int]]] = {}
            stale: list[int] = []
            for cid, start, end, chash, was_source in conn.execute(
                "select id, start_line, end_line, hash, source from chunks where path = ?", (path,)
            ):
                if was_source == source:
                    kept.setdefault(chash, []).append((cid, start, end))
                else:
                    stale.append(cid)
            fresh = []
            for start, end, chash, text, tokens in chunks:
                same = kept.get(chash)
                if not same:
                    fresh.append((start, end, chash, text, tokens))
                    continue
                cid, was_start, was_end = same.pop()
                if (was_start, was_end) != (start, end):
                    conn.execute(
                        "update chunks set start_line = ?, end_line = ? where id = ?",
                        (start, end, cid),
                    )
            stale += [cid for rows in kept.values() for cid, _, _ in rows]
            self._delete_chunk_ids(stale)
            for start, end, chash, text, tokens in fresh:
                cur = conn.execute(
                    "insert into chunks(path, source, start_line, end_line, hash, text, tokens) values (?,?,?,?,?,?,?)",
                    (path, source, start, end, chash, text, tokens),
                )
                for table in self.keyword_tables:
                    body = _KEYWORD_BODY[table](text)
                    sql = f"insert into {table}(rowid, body) values (?, ?)"
                    conn.execute(sql, (cur.lastrowid, body))
            conn.execute(
                "insert or replace into files(path, abs_path, source, hash, mtime, size) values (?,?,?,?,?,?)",
                (path, abs_path, source, file_hash, mtime, size),
            )
        return len(fresh)

    def remove_file(self, path: str) -> None:
        with self.transaction(doing=f"remove {path} from the index"):
            ids = [r[0] for r in self._w.execute("select id from chunks where path = ?", (path,))]
            self._delete_chunk_ids(ids)
            self._w.execute("delete from files where path = ?", (path,))

    def _delete_chunk_ids(self, ids: list[int]) -> None:
        conn, tables = self._w, self.keyword_tables
        for part, marks in _batches(ids):
            # a contentless table is told what each row held, to take it out of its postings
            rows = conn.execute(f"select id, text from chunks where id in ({marks})", part)
            rows = rows.fetchall()
            for table in tables:
                conn.executemany(
                    f"insert into {table}({table}, rowid, body) values ('delete', ?, ?)",
                    [(cid, _KEYWORD_BODY[table](text)) for cid, text in rows],
                )
            conn.execute(f"delete from chunk_vectors where chunk_id in ({marks})", part)
            conn.execute(f"delete from chunks where id in ({marks})", part)

    def count_matching(self, match: str) -> int:
        """How many chunks the FTS5 MATCH string matches (0 when FTS5 cannot parse it)."""
        with self._reading("read the keyword index") as conn:
            phrases = or_phrases(match)
            if phrases is not None and len(phrases) == 1:
                counted = self._from_postings(lambda p: p.count(conn, phrases[0]))
                if counted is not None:
                    return counted
            try:
                row = conn.execute(
                    "select count(*) from chunks_fts where chunks_fts match ?", (match,)
                ).fetchone()
            except Exception:  # a term FTS5 cannot parse matched nothing as a keyword either
                return 0
        return int(row[0])

    def sample_keys(self, limit: int) -> list[tuple[int, str]]:
        """`vector_sample`'s chunks as (chunk id, content hash): what their vectors are of."""
        return [(int(r[0]), str(r[1])) for r in self._sample("c.hash", limit)]

    def sample_cosines(self, limit: int, query: array[float]) -> list[tuple[int, str, float, str]]:
        """`vector_sample`'s (chunk id, content hash, cosine to `query` in SQL, text)."""
        cosine, param = self._cosine_sql("v.vector", query)
        rows = self._sample(f"c.hash, {cosine}, c.text", limit, (param,))
        return [(int(r[0]), str(r[1]), float(r[2]), r[3]) for r in rows]

    def keyword_search(
        self, match: str, limit: int, *, trigram: bool = False
    ) -> list[tuple[int, float]]:
        """(chunk id, positive BM25 strength) best first."""
        if not self.fts_available or (trigram and self.trigram_error is not None):
            return []
        table = "chunks_tri" if trigram else "chunks_fts"
        with self._reading("search the keyword index") as conn:
            phrases = None if trigram else or_phrases(match)
            if phrases is not None:
                held = self._from_postings(lambda p: p.top(conn, phrases, limit))
                if held is not None:
                    return held
            try:
                rows = conn.execute(
                    f"select rowid, bm25({table}) as r from {table} where {table} match ? order by r limit ?",
                    (match, limit),
                ).fetchall()
            except db_errors() as err:
                # a MATCH expression odd input made invalid: no keyword hits. Anything else
                # (a damaged index) goes to the checks in _reading.
                if code(err) == sqlite3.SQLITE_ERROR and any(
                    s in str(err) for s in _FTS_QUERY_ERRORS
                ):
                    return []
                raise
        return [(int(r[0]), -float(r[1])) for r in rows]

    def _from_postings(self, ask: Callable[[Postings], _T | None]) -> _T | None:
        postings = self._postings
        if postings is None or self._w_owner == threading.get_ident():
            return None
        try:
            return ask(postings)
        except db_errors() as err:
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
        rows = super().pending_chunks(limit)
        if len(self._pending_hashes) > 100_000:
            self._pending_hashes.clear()
        self._pending_hashes.update((cid, h) for cid, h, _ in rows)
        return rows

    def _ensure_vec_table(self, dims: int) -> None:
        row = self._w.execute("select value from meta where key = 'vec_dims'").fetchone()
        stored = int(row[0]) if row else None
        if stored == dims:
            return
        if stored is not None:
            raise IndexError_(f"vector dims changed from {stored} to {dims}; a reindex is required")
        self._w.execute(
            "insert or replace into meta(key, value) values ('vec_dims', ?)", (str(dims),)
        )

    def write_vectors(self, rows: Sequence[tuple[int, np.ndarray]]) -> None:
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
                conn.execute(
                    "insert or replace into chunk_vectors(chunk_id, vector) values (?, ?)",
                    (chunk_id, _codes(vec)),
                )
                conn.execute("update chunks set has_vector = 1 where id = ?", (chunk_id,))

    @property
    def cosine_sql(self) -> bool:
        """Whether this store's connections compute cosines in SQL (sqlite-vec loaded): then a
        query vector given as a float32 `array` is searched without numpy."""
        return self.vector.available and self.vector.engine == "sqlite-vec"

    def vector_search(self, query: np.ndarray | array[float], k: int) -> list[tuple[int, float]]:
        """(chunk id, cosine) best first: in memory (`_knn`), or scanned in SQL for a float32
        `array` (a one-off search needs no numpy) and an index too big to hold."""
        dims = self.vec_dims
        if dims is None or len(query) != dims or not self.vector.available:
            return []
        if isinstance(query, array):
            return self._scan_search(query, k)
        if self.search_engine == "sqlite-vec-scan":
            return self._scan_search(array("f", query.astype("float32").tobytes()), k)
        return self._numpy_search(query, k)

    def _vector_count(self) -> int:
        def read() -> int:
            with self._reading("read the index") as conn:
                return int(conn.execute("select count(*) from chunk_vectors").fetchone()[0])

        return self._at_version("vector_count", read)

    @property
    def search_engine(self) -> str:
        """Which engine answers a numpy query's KNN now (see vector_search)."""
        if not self.vector.available:
            return "none"
        too_big = self._vector_count() * 4 * (self.vec_dims or 0) > IN_MEMORY_MAX_BYTES
        if self.vector.engine == "sqlite-vec" and too_big:
            return "sqlite-vec-scan"
        return "numpy"

    def _scan_search(self, query: array[float], k: int) -> list[tuple[int, float]]:
        # ties by chunk id and a zero vector at cosine 0, as `_numpy_search` ranks them
        if not self.cosine_sql:
            raise IndexError_("a vector search in SQL needs sqlite-vec")
        cosine, param = self._cosine_sql("vector", query)
        with self._reading("search the vector index") as conn:
            rows = conn.execute(
                f"select chunk_id, {cosine} as s "
                "from chunk_vectors order by s desc, chunk_id limit ?",
                (param, k),
            ).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def _numpy_search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        held = self._at_version("matrix", lambda: self._load_matrix(query.shape[0]))
        if not len(held.ids) or held.rows.shape[1] != query.shape[0]:
            return []
        return held.search(query, k)

    def _load_matrix(self, dims: int) -> VectorMatrix:
        import numpy as np

        from ._knn import VectorMatrix

        with self._reading("search the vector index") as conn:
            n = int(conn.execute("select count(*) from chunk_vectors").fetchone()[0])
            ids = np.zeros(n, np.int64)
            matrix = np.zeros((n, dims), np.float32)
            m = 0
            # row by row into the matrix: no second copy of every vector on the way
            for cid, blob in conn.execute("select chunk_id, vector from chunk_vectors"):
                if m >= n:
                    break
                if len(blob) != dims:  # a vector of other dimensions cannot answer this query
                    continue
                ids[m] = cid
                matrix[m] = np.frombuffer(blob, dtype=np.int8)
                m += 1
        return VectorMatrix(ids[:m], unit_rows(matrix[:m]))

    def cache_get(self, key: tuple[str, str, str], hashes: Sequence[str]) -> dict[str, np.ndarray]:
        if self._live is not None:  # a rebuild fills the live cache: a killed one loses nothing
            return self._live.cache_get(key, hashes)
        if not hashes:
            return {}
        out: dict[str, np.ndarray] = {}
        where = "provider = ? and model = ? and fingerprint = ? and hash in"
        with self._reading("read the embedding cache") as conn:
            for part, marks in _batches(hashes):
                sql = f"select hash, dims, vector from embedding_cache where {where} ({marks})"
                for h, dims, blob in conn.execute(sql, (*key, *part)).fetchall():
                    out[h] = _vector(blob, dims)
        if out and not self.read_only:
            with self.transaction(doing="update the embedding cache"):
                for part, marks in _batches(list(out)):
                    sql = f"update embedding_cache set used_at = ? where {where} ({marks})"
                    self._w.execute(sql, (time.time(), *key, *part))
        return out

    def cache_put(
        self, key: tuple[str, str, str], items: Sequence[tuple[str, np.ndarray]], max_entries: int
    ) -> None:
        if self._live is not None:
            self._live.cache_put(key, items, max_entries)
            return
        if not items:
            return
        now = time.time()
        with self.transaction(doing="update the embedding cache"):
            conn = self._w
            conn.executemany(
                "insert or replace into embedding_cache(provider, model, fingerprint, hash, dims, vector, used_at) "
                "values (?,?,?,?,?,?,?)",
                [(*key, h, int(v.shape[0]), _codes(v), now) for h, v in items],
            )
            total = conn.execute("select count(*) from embedding_cache").fetchone()[0]
            if total > max_entries:
                conn.execute(
                    "delete from embedding_cache where rowid in "
                    "(select rowid from embedding_cache order by used_at asc limit ?)",
                    (total - max_entries,),
                )
