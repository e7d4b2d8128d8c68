"""One (agent, workspace) tenant's files, chunks, FTS, vectors and embedding cache in a shared
PostgreSQL database: a drop-in for the SQLite `Store` that many memoryd processes may use at once.

Every write transaction holds the tenant's advisory lock, so one process writes a tenant at a time
and one that dies mid-sync leaves the previous state (its lock goes with its connection); searches
read committed state on a connection of their own.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from array import array
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:  # numpy and the driver are imported where used
    import numpy as np
    import psycopg

from ..core.text import segment_for_fts
from ..errors import IndexError_, StoreUnavailable
from . import _pg_migrations as migrations
from ._common import Recovery, StoreBase, VectorEngine
from ._pg_migrations import first_line
from ._postings import or_phrases

#: Up to this many vectors per tenant, KNN is an exact scan; above it, the HNSW index answers.
EXACT_MAX_VECTORS = 50_000
LOCK_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10
#: A tenant past the exact-scan limit gets its HNSW index once at most this many vectors are
#: pending (a few chunks that cannot be embedded must not keep it on the exact scan forever).
HNSW_BUILD_MAX_PENDING = 1_000
#: The tenant's writer lock, which a rebuild's builder holds as its mark of life.
_LOCK_TENANT = "select pg_advisory_lock(memoryd.tenant_lock(%s))"
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def describe_url(url: str) -> str:
    """`host=… port=… dbname=… user=…` of a libpq URL or DSN: never the password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(url)
    except Exception:
        return "the configured PostgreSQL server"
    shown = [f"{k}={parts[k]}" for k in ("host", "port", "dbname", "user") if parts.get(k)]
    return " ".join(shown) or "the default PostgreSQL server"


def clean(text: str) -> str:
    # PostgreSQL text cannot hold NUL; SQLite can, so the same file indexes on both
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def fts_document(text: str) -> tuple[str, int]:
    """The text split as FTS5's unicode61 splits it, joined by spaces for `to_tsvector`, and its
    token count: PostgreSQL's parser keeps `foo.bar` whole, so `foo` would not match it."""
    tokens = _TOKEN.findall(segment_for_fts(text))
    return " ".join(tokens), len(tokens)


def _word_terms(match: str) -> list[str]:
    """The FTS5 MATCH string's phrases as `fts_document`s (those with any word)."""
    return [doc for doc, n in map(fts_document, or_phrases(match) or []) if n]


def _vector_literal(vec: np.ndarray | array[float]) -> str | None:
    """pgvector's text form; None for a zero vector (cosine distance to it is undefined)."""
    import numpy as np

    values = np.asarray(vec, dtype=np.float32)
    if not np.any(values):
        return None
    # float32 → Python float is exact and repr round-trips, so pgvector stores the same float4
    return "[" + ",".join(map(repr, values.tolist())) + "]"


class PgStore(StoreBase):
    """One tenant's contents in a PostgreSQL index; thread-safe (a lock per connection).

    The password comes from libpq's environment (`PGPASSWORD`, `PGPASSFILE`, `PGSERVICE`).
    """

    def __init__(
        self,
        url: str,
        *,
        agent_id: str,
        workspace: str,
        vector_enabled: bool = True,
        migrate: bool = True,
        exact_max_vectors: int = EXACT_MAX_VECTORS,
        _tenant_id: int | None = None,
    ) -> None:
        try:
            import psycopg
        except ImportError:
            raise IndexError_(
                "store.driver = postgres needs psycopg: pip install 'memoryd[postgres]'"
            ) from None
        self._psycopg = psycopg
        self.url = url
        self.where = describe_url(url)
        self.agent_id = agent_id
        self.location = f"postgres {self.where} agent={agent_id}"
        self.workspace = workspace
        self.exact_max_vectors = exact_max_vectors
        self._ro_lock = threading.RLock()
        self._rw_lock = threading.RLock()
        self._tx_owner: int | None = None
        self.recovered: list[Recovery] = []
        self._lock_wait_s = LOCK_TIMEOUT_S
        self._indexed_dims: set[int] = set()
        with contextlib.ExitStack() as opened:  # both closed unless the whole open succeeds
            self._ro = self._connect()
            opened.callback(self._ro.close)
            self._rw = self._connect()
            opened.callback(self._rw.close)
            if migrate:
                migrations.migrate(self._rw, self.where)
            with self._ro.cursor() as cur:
                version = migrations.current_version(cur)
                migrations.check_version(version, self.where)
                if version < migrations.LATEST:
                    raise IndexError_(
                        f"memoryd's schema in {self.where} is at version {version}, this memoryd "
                        f"needs {migrations.LATEST}: run the migrations once as the database owner"
                    )
                self._ext = migrations.extension_schemas(cur)
            for conn in (self._ro, self._rw):
                self._set_search_path(conn)
            self.building = _tenant_id is not None
            if _tenant_id is None:
                sql = "select memoryd.open_tenant(%s, %s)"
                _tenant_id = int(self._scalar(sql, (self.agent_id, self.workspace)))
            self.tenant_id = _tenant_id
            if self.building:
                # the builder's mark of life: a build whose lock is free is a dead one
                self._scalar(_LOCK_TENANT, (self.tenant_id,), write=True)
            off = None if vector_enabled else "store.vector.enabled = false"
            self.vector = VectorEngine("disabled" if off else "pgvector", not off, off, "psycopg")
            self._version = 0  # the tenant's write count
            #: Dimensions of the stored vectors (None until the first vector is written).
            self.vec_dims: int | None = None
            self._refresh()
            opened.pop_all()

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        try:
            # prepare_threshold=None: every statement is planned with its parameters, so the
            # planner keeps only this tenant's partitions (a generic plan would lock them all)
            return self._psycopg.connect(
                self.url,
                autocommit=True,
                prepare_threshold=None,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name="memoryd",
            )
        except self._psycopg.Error as err:
            raise self._unreachable(err) from None

    def _unreachable(self, err: Exception) -> StoreUnavailable:
        return StoreUnavailable(f"PostgreSQL store unreachable ({self.where}): {first_line(err)}")

    def _set_search_path(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        # unqualified `vector` casts resolve in whichever schema the extension was created in
        conn.execute(f"set search_path = memoryd, {self._ext}, pg_catalog")

    def _reconnect(self, which: str) -> None:
        conn = self._connect()
        self._set_search_path(conn)
        if which == "ro":
            self._ro = conn
        else:
            self._rw = conn
            if self.building:
                conn.execute(_LOCK_TENANT, (self.tenant_id,))

    def _owns_tx(self) -> bool:
        return self._tx_owner == threading.get_ident()

    def _rows(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, write: bool = False
    ) -> list[tuple[Any, ...]]:
        """Run one statement: on the read connection, or the write one (writes, and reads by
        the thread inside `transaction()`, which must see its own uncommitted writes)."""
        use_rw = write or self._owns_tx()
        psycopg = self._psycopg
        with self._rw_lock if use_rw else self._ro_lock:
            for attempt in (0, 1):
                conn = self._rw if use_rw else self._ro
                try:
                    cur = conn.execute(sql, params)
                    return cur.fetchall() if cur.description else []
                except psycopg.errors.LockNotAvailable:  # an OperationalError: caught first
                    why = f"agent {self.agent_id} is being written by another memoryd process "
                    why += f"(waited {self._lock_wait_s:g}s for its lock)"
                except psycopg.OperationalError as err:
                    # a dropped connection is reopened once, outside a transaction only
                    if attempt == 0 and conn.broken and not self._owns_tx():
                        with contextlib.suppress(IndexError_):
                            self._reconnect("rw" if use_rw else "ro")
                            continue
                    raise self._unreachable(err) from None
                except psycopg.errors.InsufficientPrivilege as err:
                    why = f"PostgreSQL store refused agent {self.agent_id} ({self.where}): "
                    why += first_line(err)
                except psycopg.Error as err:
                    why = f"PostgreSQL store error ({self.where}): {first_line(err)}"
                raise IndexError_(why) from None
        raise AssertionError("unreachable")

    _VECTOR = "v.embedding::text"

    def _decoded(self, stored: Any) -> np.ndarray:
        import numpy as np

        return np.array(json.loads(stored), dtype=np.float32)

    def _mine(self, alias: str = "") -> str:
        # a literal, not a parameter: the planner prunes to the tenant's partition
        return f"{alias}{'.' if alias else ''}tenant_id = {self.tenant_id:d}"

    def _pending(self) -> str:
        return (
            f"pending_vectors p join chunks c on c.id = p.chunk_id and {self._mine('c')} "
            f"where {self._mine('p')}"
        )

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self._rows(sql.replace("%", "%%").replace("?", "%s"), params)

    def _write(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._rows(sql.replace("%", "%%").replace("?", "%s"), params, write=True)

    def _scalar(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, write: bool = False
    ) -> Any:
        rows = self._rows(sql, params, write=write)
        return rows[0][0] if rows else None

    @contextlib.contextmanager
    def transaction(
        self, *, wait_ms: int | None = None, doing: str | None = None
    ) -> Iterator[None]:
        """One write transaction of the entering thread holding the tenant's lock (waiting up to
        `wait_ms`); nested, a savepoint of the outer one; other threads read the committed state."""
        psycopg = self._psycopg
        wait = LOCK_TIMEOUT_S if wait_ms is None else wait_ms / 1000
        try:
            with self._rw_lock, contextlib.ExitStack() as stack:
                owner = self._tx_owner
                stack.callback(setattr, self, "_tx_owner", owner)
                for attempt in (0, 1):
                    tx = self._rw.transaction()
                    try:
                        stack.enter_context(tx)
                        self._tx_owner = threading.get_ident()
                        self._lock_wait_s = wait
                        self._rows(
                            # lock_timeout 0 would mean "wait forever": 1 ms is "do not wait"
                            "select set_config('lock_timeout', %s, true), "
                            "pg_advisory_xact_lock(memoryd.tenant_lock(%s))",
                            (f"{max(1, int(wait * 1000))}ms", self.tenant_id),
                        )
                        break
                    except (IndexError_, psycopg.Error):
                        # a dropped connection shows here, before any write: reopen it, once, if
                        # no caller's transaction is open
                        if attempt == 1 or owner is not None or not self._rw.broken:
                            raise
                        stack.pop_all()
                        self._tx_owner = owner
                        self._reconnect("rw")
                        stack.callback(setattr, self, "_tx_owner", owner)
                try:
                    yield
                except psycopg.Error as err:
                    raise IndexError_(
                        f"PostgreSQL store write failed ({self.where}): {first_line(err)}"
                    ) from None
        except IndexError_ as err:
            if doing is None or str(err).startswith("cannot "):
                raise
            raise type(err)(f"cannot {doing}: {err}") from None

    def close(self) -> None:
        for lock, conn in ((self._ro_lock, self._ro), (self._rw_lock, self._rw)):
            with lock, contextlib.suppress(Exception):
                conn.close()

    def _refresh(self) -> None:
        """Re-read the tenant's version and dims; follow a rebuild another process published."""
        rows = self._rows(
            "select t.id, s.version, s.vec_dims "
            "from (select coalesce(%s::bigint, memoryd.active_tenant(%s, %s)) as id) t "
            "left join memoryd.tenant_stats s on s.tenant_id = t.id",
            (self.tenant_id if self.building else None, self.agent_id, self.workspace),
        )
        if not rows or rows[0][0] is None:
            raise IndexError_(f"agent {self.agent_id} has no index in {self.where}")
        tenant, version, dims = rows[0]
        if int(tenant) != self.tenant_id:  # a rebuild was published: its indexes are its own
            self._indexed_dims = set()
        self.tenant_id = int(tenant)
        self._version, self.vec_dims = int(version or 0), None if dims is None else int(dims)

    @property
    def version(self) -> tuple[int, int]:
        """(tenant, its write count): changes with any process's commit or published rebuild."""
        self._refresh()
        return self.tenant_id, self._version

    def set_meta(self, values: dict[str, str]) -> None:
        if not values:
            return
        with self.transaction():
            self._rows(
                "insert into memoryd.meta (tenant_id, key, value) "
                "select %s, k, v from unnest(%s::text[], %s::text[]) as u (k, v) "
                "on conflict (tenant_id, key) do update set value = excluded.value",
                (self.tenant_id, list(values), [clean(v) for v in values.values()]),
            )

    def verify(self, *, deep: bool = False) -> str | None:
        """What is wrong with the tenant, or None; `deep` recounts the totals BM25 and KNN use."""
        if not deep:
            self._refresh()  # reachable, and the tenant exists
            return None
        rows = self._read(
            "select chunk_count, token_total, vector_count, r.n, r.tokens, r.vectors "
            f"from tenant_stats, ({self._recount()}) r where {self._mine()}"
        )
        if not rows:
            return f"tenant {self.tenant_id} has no totals"
        chunks, tokens, vectors, real_chunks, real_tokens, real_vectors = map(int, rows[0])
        if (chunks, tokens, vectors) != (real_chunks, real_tokens, real_vectors):
            return (
                f"tenant {self.tenant_id} records {chunks} chunks, {tokens} tokens, {vectors} "
                f"vectors for {real_chunks}, {real_tokens}, {real_vectors}"
            )
        return None

    def _recount(self) -> str:
        """SQL counting the tenant's totals from its rows."""
        mine = self._mine()
        return (
            "select count(*) n, coalesce(sum(doc_len), 0) tokens, coalesce(sum(char_length(text)), "
            f"0) chars, (select count(*) from chunk_vectors where {mine}) vectors from chunks "
            f"where {mine}"
        )

    def recover(self, reason: str) -> tuple[Recovery, bool]:
        """Recount the tenant's totals from its rows (nothing is moved: there is no file)."""
        with self.transaction():
            self._write(
                "update tenant_stats set version = version + 1, "
                "(chunk_count, token_total, char_total, vector_count) = "
                f"({self._recount()}) where {self._mine()}"
            )
        rec = Recovery(None, reason, time.time())
        self.recovered.append(rec)
        return rec, False

    def recoveries(self) -> list[Recovery]:
        """Damaged files moved aside: none, ever (there is no index file)."""
        return []

    def open_scratch(self) -> Self:
        """A store on a fresh tenant seeded with this embedding cache (searched after `publish`)."""
        new_id = int(
            self._scalar("select memoryd.begin_rebuild(%s)", (self.tenant_id,), write=True)
        )
        try:
            return type(self)(
                self.url,
                agent_id=self.agent_id,
                workspace=self.workspace,
                vector_enabled=self.vector.available,
                migrate=False,
                exact_max_vectors=self.exact_max_vectors,
                _tenant_id=new_id,
            )
        except BaseException:
            with contextlib.suppress(IndexError_):
                self._rows("select memoryd.discard_rebuild(%s)", (new_id,), write=True)
            raise

    def publish(self, new: StoreBase) -> None:
        """Make `new` the active tenant and drop this one's rows, in one transaction."""
        assert isinstance(new, PgStore), "a store from this store's open_scratch"
        with self.transaction():
            self._rows("select memoryd.publish_rebuild(%s, %s)", (self.tenant_id, new.tenant_id))
        new.building = False
        with contextlib.suppress(IndexError_):
            sql = "select pg_advisory_unlock(memoryd.tenant_lock(%s))"
            new._rows(sql, (new.tenant_id,), write=True)
        self.tenant_id = new.tenant_id

    def discard(self) -> None:
        """Close a rebuild's store, dropping it first if it was not published."""
        if self.building:
            with contextlib.suppress(IndexError_):
                self._rows("select memoryd.discard_rebuild(%s)", (self.tenant_id,), write=True)
        self.close()

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
        """Swap a file's chunks (start, end, hash, text, tokens) in one transaction; returns how
        many rows were written: all of them (their vectors come back from the cache)."""
        texts = [clean(c[3]) for c in chunks]
        docs = [fts_document(t) for t in texts]
        columns = [[c[i] for c in chunks] for i in (0, 1, 2)] + [texts, [c[4] for c in chunks]]
        columns += [[d[1] for d in docs], [d[0] for d in docs]]
        t = self.tenant_id
        with self.transaction():
            removed = self._delete_chunks(path)
            if chunks:
                self._rows(
                    "with ins as (insert into memoryd.chunks (tenant_id, path, source, start_line, "
                    "end_line, hash, text, tokens, doc_len, tsv, tf) "
                    "select %s, %s, %s, u.s, u.e, u.h, u.x, u.k, u.n, v.tsv, memoryd.tf_map(v.tsv) "
                    "from unnest(%s::int[], %s::int[], %s::text[], %s::text[], %s::int[], "
                    "%s::int[], %s::text[]) with ordinality as u (s, e, h, x, k, n, f, o) "
                    "cross join lateral (select to_tsvector('memoryd.fts', u.f) as tsv) v "
                    "order by u.o returning id, tenant_id) "
                    "insert into memoryd.pending_vectors (chunk_id, tenant_id) "
                    "select id, tenant_id from ins",
                    (t, path, source, *columns),
                )
            self._rows(
                "insert into memoryd.files (tenant_id, path, abs_path, source, hash, mtime, size) "
                "values (%s, %s, %s, %s, %s, %s, %s) on conflict (tenant_id, path) do update set "
                "abs_path = excluded.abs_path, source = excluded.source, hash = excluded.hash, "
                "mtime = excluded.mtime, size = excluded.size",
                (t, path, clean(abs_path), source, file_hash, mtime, size),
            )
            added = (len(chunks), sum(d[1] for d in docs), sum(map(len, texts)), 0)
            self._bump(*(a - r for a, r in zip(added, removed, strict=True)))
        return len(chunks)

    def _delete_chunks(self, path: str) -> tuple[int, int, int, int]:
        """Delete a file's chunks and their vectors; (chunks, tokens, characters, vectors)."""
        # the tenant id is written into the statement so the planner prunes to its partition
        row = self._rows(
            "with d as (delete from memoryd.chunks where tenant_id = %(t)s and path = %(p)s "
            "returning id, doc_len, char_length(text) as cl), "
            f"v as (delete from memoryd.chunk_vectors where tenant_id = {self.tenant_id:d} "
            "and chunk_id in (select id from d) returning 1), "
            "n as (delete from memoryd.pending_vectors where tenant_id = %(t)s "
            "and chunk_id in (select id from d)) "
            "select count(*), coalesce(sum(doc_len), 0), coalesce(sum(cl), 0), "
            "(select count(*) from v) from d",
            {"t": self.tenant_id, "p": path},
        )[0]
        return int(row[0]), int(row[1]), int(row[2]), int(row[3])

    def _bump(self, chunks: int, tokens: int, chars: int, vectors: int) -> None:
        self._rows(
            "update memoryd.tenant_stats set version = version + 1, "
            "chunk_count = chunk_count + %s, token_total = token_total + %s, "
            "char_total = char_total + %s, vector_count = vector_count + %s "
            "where tenant_id = %s",
            (chunks, tokens, chars, vectors, self.tenant_id),
        )

    def remove_file(self, path: str) -> None:
        with self.transaction():
            removed = self._delete_chunks(path)
            self._rows(
                "delete from memoryd.files where tenant_id = %s and path = %s",
                (self.tenant_id, path),
            )
            self._bump(*(-r for r in removed))

    def keyword_search(
        self, match: str, limit: int, *, trigram: bool = False
    ) -> list[tuple[int, float]]:
        """(chunk id, positive BM25 strength) best first, for the MATCH string SQLite takes."""
        if trigram:
            terms = [p.lower() for p in or_phrases(match) or [] if len(p) >= 3]
            function = "memoryd.substring_hits"
        else:
            terms, function = _word_terms(match), "memoryd.keyword_hits"
        if not terms:
            return []
        rows = self._search(f"select chunk_id, score from {function}(%s, %s, %s)", (terms, limit))
        return [(int(r[0]), float(r[1])) for r in rows]

    def count_matching(self, match: str) -> int:
        """How many of the tenant's chunks the MATCH string matches (as `keyword_search` reads it)."""
        terms = _word_terms(match)
        if not terms:
            return 0
        rows = self._search(
            "select count(*) from memoryd.keyword_hits(%s, %s, %s)", (terms, 2**31 - 1)
        )
        return int(rows[0][0]) if rows else 0

    def _search(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """A tenant-scoped search, asked again of the active tenant after another's rebuild."""
        try:
            return self._rows(sql, (self.tenant_id, *params))
        except IndexError_:
            before = self.tenant_id
            self._refresh()
            if self.tenant_id == before:
                raise
            return self._rows(sql, (self.tenant_id, *params))

    def _ensure_dims(self, dims: int) -> None:
        """Record the tenant's vector dims on first write; refuse a change (reindex instead)."""
        stored = self._scalar(
            "update memoryd.tenant_stats set vec_dims = coalesce(vec_dims, %s) "
            "where tenant_id = %s returning vec_dims",
            (dims, self.tenant_id),
        )
        if stored is not None and int(stored) != dims:
            raise IndexError_(f"vector dims changed from {stored} to {dims}; a reindex is required")
        self.vec_dims = dims

    def _ensure_index(self, dims: int) -> None:
        """Build the tenant's HNSW index once it outgrows exact search and its backlog is short."""
        if (
            not self.vector.available
            or self._owns_tx()  # the build would wait for this transaction's own locks
            or self._vector_count() <= self.exact_max_vectors
            or self._has_index(dims)
            # one build over every vector costs a fraction of inserting them one by one
            or self.pending_count() > HNSW_BUILD_MAX_PENDING
        ):
            return
        with contextlib.suppress(IndexError_):
            # a build that cannot get its lock soon is left to the next batch
            self._rows(
                "select set_config('lock_timeout', '2s', false), "
                "memoryd.ensure_tenant_vector_index(%s, %s), "
                "set_config('lock_timeout', '0', false)",
                (self.tenant_id, dims),
            )
            self._indexed_dims.add(dims)

    def write_vectors(self, rows: Sequence[tuple[int, np.ndarray]]) -> None:
        if not rows:
            return
        dims = int(rows[0][1].shape[0])
        if any(int(v.shape[0]) != dims for _, v in rows):
            raise IndexError_("vectors of one batch must have the same dims")
        ids = [int(cid) for cid, _ in rows]
        literals = [_vector_literal(v) for _, v in rows]
        with self.transaction():
            self._ensure_dims(dims)
            # chunks deleted by a concurrent file change are skipped (the join finds none)
            fresh = self._scalar(
                "with v as (select * from unnest(%(ids)s::bigint[], %(vecs)s::text[]) "
                "as u (id, emb)), "
                "ok as (select c.id from memoryd.chunks c join v on c.id = v.id "
                "where c.tenant_id = %(t)s), "
                "done as (delete from memoryd.pending_vectors p using ok "
                "where p.tenant_id = %(t)s and p.chunk_id = ok.id), "
                # every CTE sees the table as it was before the insert: `had` is the old rows
                "had as (select x.chunk_id from memoryd.chunk_vectors x join ok on ok.id = x.chunk_id "
                f"where x.tenant_id = {self.tenant_id:d}), "
                "w as (insert into memoryd.chunk_vectors (chunk_id, tenant_id, dims, embedding) "
                "select v.id, %(t)s, %(d)s, v.emb::vector from v join ok using (id) "
                "on conflict (tenant_id, chunk_id) do update set dims = excluded.dims, "
                "embedding = excluded.embedding returning 1) "
                "select (select count(*) from w) - (select count(*) from had)",
                {"ids": ids, "vecs": literals, "t": self.tenant_id, "d": dims},
            )
            self._bump(0, 0, 0, int(fresh or 0))
        self._ensure_index(dims)

    def vector_search(self, query: np.ndarray | array[float], k: int) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) best first."""
        if not self.vector.available:
            return []
        if self.vec_dims is None:
            self._refresh()  # another process may have written the first vectors
        literal = _vector_literal(query) if len(query) == self.vec_dims else None
        if literal is None:
            return []
        rows = self._search(
            "select chunk_id, similarity from memoryd.vector_hits(%s, %s::vector, %s, %s)",
            (literal, k, self.exact_max_vectors),
        )
        # the HNSW index ranks by its own traversal; order by the similarity shown
        return sorted(((int(r[0]), float(r[1])) for r in rows), key=lambda h: -h[1])

    def _vector_count(self) -> int:
        sql = "select vector_count from memoryd.tenant_stats where tenant_id = %s"
        return int(self._scalar(sql, (self.tenant_id,)) or 0)

    def _has_index(self, dims: int) -> bool:
        if dims not in self._indexed_dims and self._scalar(
            "select to_regclass(%s) is not null",
            (f"memoryd.chunk_vectors_t{self.tenant_id:d}_hnsw_{dims:d}",),
        ):
            self._indexed_dims.add(dims)
        return dims in self._indexed_dims

    @property
    def search_engine(self) -> str:
        """Which engine answers KNN queries now: an exact scan, or the HNSW index when big."""
        if not self.vector.available:
            return "none"
        if self.vec_dims is None:
            return "pgvector-exact"
        return str(
            self._scalar(
                "select memoryd.vector_engine(%s, %s, %s)",
                (self.tenant_id, self.vec_dims, self.exact_max_vectors),
            )
        )

    def cache_get(self, key: tuple[str, str, str], hashes: Sequence[str]) -> dict[str, np.ndarray]:
        import numpy as np

        if not hashes:
            return {}
        # one statement reads the hits and marks them used (the LRU clock)
        rows = self._rows(
            "update memoryd.embedding_cache set used_at = %s where tenant_id = %s "
            "and provider = %s and model = %s and fingerprint = %s and hash = any(%s::text[]) "
            "returning hash, vector",
            (time.time(), self.tenant_id, *key, list(hashes)),
            write=True,
        )
        return {h: np.frombuffer(blob, dtype=np.float32).copy() for h, blob in rows}

    def cache_put(
        self, key: tuple[str, str, str], items: Sequence[tuple[str, np.ndarray]], max_entries: int
    ) -> None:
        import numpy as np

        if not items:
            return
        now, t = time.time(), self.tenant_id
        hashes, dims = [h for h, _ in items], [int(v.shape[0]) for _, v in items]
        blobs = [np.asarray(v, dtype=np.float32).tobytes() for _, v in items]
        self._rows(
            "insert into memoryd.embedding_cache (tenant_id, provider, model, fingerprint, hash, "
            "dims, vector, used_at) select %s, %s, %s, %s, u.h, u.d, u.v, %s "
            "from unnest(%s::text[], %s::int[], %s::bytea[]) as u (h, d, v) "
            "on conflict (tenant_id, provider, model, fingerprint, hash) do update set "
            "dims = excluded.dims, vector = excluded.vector, used_at = excluded.used_at",
            (t, *key, now, hashes, dims, blobs),
            write=True,
        )
        self._rows(
            "delete from memoryd.embedding_cache where ctid in (select ctid "
            "from memoryd.embedding_cache where tenant_id = %(t)s order by used_at "
            "limit greatest(0, (select count(*) from memoryd.embedding_cache "
            "where tenant_id = %(t)s) - %(max)s))",
            {"t": t, "max": max_entries},
            write=True,
        )
