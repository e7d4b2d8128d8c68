"""One tenant of a PostgreSQL index: its connections, metadata, checks and rebuilds.

Every write transaction holds the tenant's advisory lock, so one process writes a tenant at a time
and one that dies mid-sync leaves the previous state (its lock goes with its connection); searches
read committed state on a connection of their own.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:  # the driver is imported where used
    import psycopg

from ..errors import IndexError_, StoreUnavailable
from . import _pg_migrations as migrations
from ._common import Recovery, StoreChecks, VectorEngine
from ._pg_migrations import first_line
from ._store import IN_MEMORY_MAX_VECTORS

#: Up to this many vectors per tenant, KNN is an exact scan; above it, the HNSW index answers.
EXACT_MAX_VECTORS = IN_MEMORY_MAX_VECTORS
LOCK_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10


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


class PgTenant(StoreChecks):
    """One tenant of a PostgreSQL index; thread-safe (each connection has its own lock).

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
        self.workspace = workspace
        self.exact_max_vectors = exact_max_vectors
        self._ro_lock = threading.RLock()
        self._rw_lock = threading.RLock()
        self._tx_owner: int | None = None
        self.building = False
        self.tenant_id = 0
        self.read_only: str | None = None
        self.recovered: list[Recovery] = []
        self._lock_wait_s = LOCK_TIMEOUT_S
        self._indexed_dims: set[int] = set()
        self._ro = self._connect()
        try:
            self._rw = self._connect()
        except BaseException:
            self._ro.close()
            raise
        try:
            self._open(migrate, vector_enabled, _tenant_id)
        except BaseException:
            self.close()
            raise

    def _open(self, migrate: bool, vector_enabled: bool, tenant_id: int | None) -> None:
        if migrate:
            with self._rw_lock:
                migrations.migrate(self._rw)
        with self._ro_lock, self._ro.cursor() as cur:
            version = migrations.current_version(cur)
            if version < migrations.LATEST:
                raise IndexError_(
                    f"memoryd's schema in {self.where} is at version {version}, this memoryd "
                    f"needs {migrations.LATEST}: run the migrations once as the database owner"
                )
            self._ext = migrations.extension_schemas(cur)
        for conn in (self._ro, self._rw):
            self._set_search_path(conn)
        self.building = tenant_id is not None
        if tenant_id is None:
            opened = self._scalar(
                "select memoryd.open_tenant(%s, %s)", (self.agent_id, self.workspace)
            )
            tenant_id = int(opened)
        self.tenant_id = tenant_id
        if self.building:
            # the builder's mark of life: a build whose lock is free is a dead one
            self._scalar("select pg_advisory_lock(%s)", (self._lock_key,), write=True)
        off = None if vector_enabled else "store.vector.enabled = false"
        self.vector = VectorEngine("disabled" if off else "pgvector", not off, off, "psycopg")
        self.fts_error: str | None = None
        self.trigram_error: str | None = None
        self._stats: tuple[int, int | None] = (0, None)  # (tenant version, vec_dims)
        self._refresh()

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
                conn.execute("select pg_advisory_lock(%s)", (self._lock_key,))

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
                    raise IndexError_(
                        f"agent {self.agent_id} is being written by another memoryd process "
                        f"(waited {self._lock_wait_s:g}s for its lock)"
                    ) from None
                except psycopg.OperationalError as err:
                    # a dropped connection is reopened once, outside a transaction only
                    if attempt == 0 and conn.broken and not self._owns_tx():
                        with contextlib.suppress(IndexError_):
                            self._reconnect("rw" if use_rw else "ro")
                            continue
                    raise self._unreachable(err) from None
                except psycopg.errors.InsufficientPrivilege as err:
                    raise IndexError_(
                        f"PostgreSQL store refused agent {self.agent_id} ({self.where}): "
                        f"{first_line(err)}"
                    ) from None
                except psycopg.Error as err:
                    raise IndexError_(
                        f"PostgreSQL store error ({self.where}): {first_line(err)}"
                    ) from None
        raise AssertionError("unreachable")

    def _scalar(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, write: bool = False
    ) -> Any:
        rows = self._rows(sql, params, write=write)
        return rows[0][0] if rows else None

    @property
    def _lock_key(self) -> int:
        return migrations.tenant_lock_key(self.tenant_id)

    @contextlib.contextmanager
    def _write(self, wait_s: float | None = None) -> Iterator[None]:
        """One write transaction holding the tenant's lock (waits up to `wait_s`, by default
        `lock_timeout_s`); nested inside `transaction()` it is a savepoint of that one."""
        psycopg = self._psycopg
        wait = LOCK_TIMEOUT_S if wait_s is None else wait_s
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
                        "select set_config('lock_timeout', %s, true), pg_advisory_xact_lock(%s)",
                        (f"{max(1, int(wait * 1000))}ms", self._lock_key),
                        write=True,
                    )
                    break
                except (IndexError_, psycopg.Error):
                    # a connection the server dropped is found dead here, before any write:
                    # reopen it and start again, unless this is a caller's open transaction
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

    @contextlib.contextmanager
    def transaction(
        self, *, wait_ms: int | None = None, doing: str = "update the index"
    ) -> Iterator[None]:
        """Make every write inside one transaction (a sync's text phase) of the entering thread,
        waiting up to `wait_ms` for another process's; other threads read the committed state."""
        try:
            with self._write(None if wait_ms is None else wait_ms / 1000):
                yield
        except IndexError_ as err:
            if str(err).startswith("cannot "):
                raise
            raise type(err)(f"cannot {doing}: {err}") from None

    def close(self) -> None:
        for lock, conn in ((self._ro_lock, self._ro), (self._rw_lock, self._rw)):
            with lock, contextlib.suppress(Exception):
                conn.close()

    def _refresh(self) -> None:
        """Re-read the tenant's version and dims; follow a rebuild another process published."""
        if self.building:
            rows = self._rows(
                "select %s::bigint, s.version, s.vec_dims from memoryd.tenant_stats s "
                "where s.tenant_id = %s",
                (self.tenant_id, self.tenant_id),
            )
        else:
            rows = self._rows(
                "select t.id, s.version, s.vec_dims "
                "from (select memoryd.active_tenant(%s, %s) as id) t "
                "left join memoryd.tenant_stats s on s.tenant_id = t.id",
                (self.agent_id, self.workspace),
            )
        if not rows or rows[0][0] is None:
            raise IndexError_(f"agent {self.agent_id} has no index in {self.where}")
        tenant, version, dims = rows[0]
        if int(tenant) != self.tenant_id:  # a rebuild was published: its indexes are its own
            self._indexed_dims = set()
        self.tenant_id = int(tenant)
        self._stats = (int(version or 0), None if dims is None else int(dims))

    @property
    def version(self) -> tuple[int, int]:
        """(tenant, its write count): changes with any process's commit or published rebuild."""
        self._refresh()
        return self.tenant_id, self._stats[0]

    @property
    def vec_dims(self) -> int | None:
        """Dimensions of the stored vectors (None until the first vector is written)."""
        return self._stats[1]

    def meta(self) -> dict[str, str]:
        rows = self._rows(
            "select key, value from memoryd.meta where tenant_id = %s", (self.tenant_id,)
        )
        return {r[0]: r[1] for r in rows}

    def meta_value(self, key: str) -> str | None:
        value = self._scalar(
            "select value from memoryd.meta where tenant_id = %s and key = %s",
            (self.tenant_id, key),
        )
        return None if value is None else str(value)

    def set_meta(self, values: dict[str, str]) -> None:
        if not values:
            return
        with self._write():
            self._rows(
                "insert into memoryd.meta (tenant_id, key, value) "
                "select %s, k, v from unnest(%s::text[], %s::text[]) as u (k, v) "
                "on conflict (tenant_id, key) do update set value = excluded.value",
                (self.tenant_id, list(values), [clean(v) for v in values.values()]),
                write=True,
            )

    def delete_meta(self, key: str) -> None:
        with self._write():
            self._rows(
                "delete from memoryd.meta where tenant_id = %s and key = %s",
                (self.tenant_id, key),
                write=True,
            )

    def verify(self, *, deep: bool = False) -> str | None:
        """What is wrong with the tenant, or None: `deep` compares the totals BM25 and the KNN
        choice use with its rows (PostgreSQL checks its own pages)."""
        if not deep:
            self._refresh()  # reachable, and the tenant exists
            return None
        row = self._rows(
            "select s.chunk_count, s.token_total, s.vector_count, "
            "(select count(*) from memoryd.chunks where tenant_id = %(t)s), "
            "(select coalesce(sum(doc_len), 0) from memoryd.chunks where tenant_id = %(t)s), "
            "(select count(*) from memoryd.chunk_vectors where tenant_id = %(t)s) "
            "from memoryd.tenant_stats s where s.tenant_id = %(t)s",
            {"t": self.tenant_id},
        )
        if not row:
            return f"tenant {self.tenant_id} has no totals"
        chunks, tokens, vectors, real_chunks, real_tokens, real_vectors = map(int, row[0])
        if (chunks, tokens, vectors) != (real_chunks, real_tokens, real_vectors):
            return (
                f"tenant {self.tenant_id} records {chunks} chunks, {tokens} tokens, {vectors} "
                f"vectors for {real_chunks}, {real_tokens}, {real_vectors}"
            )
        return None

    def recover(self, reason: str) -> tuple[Recovery, bool]:
        """Recount the tenant's totals from its rows (nothing is moved: there is no file)."""
        with self._write():
            self._rows(
                "update memoryd.tenant_stats s set version = s.version + 1, "
                "chunk_count = c.n, token_total = c.tokens, char_total = c.chars, "
                "vector_count = (select count(*) from memoryd.chunk_vectors "
                "where tenant_id = %(t)s) "
                "from (select count(*) n, coalesce(sum(doc_len), 0) tokens, "
                "coalesce(sum(char_length(text)), 0) chars from memoryd.chunks "
                "where tenant_id = %(t)s) c where s.tenant_id = %(t)s",
                {"t": self.tenant_id},
                write=True,
            )
        rec = Recovery(None, reason, time.time())
        self.recovered.append(rec)
        return rec, False

    def recoveries(self) -> list[Recovery]:
        """Damaged files moved aside: none, ever (there is no index file)."""
        return []

    def open_scratch(self) -> Self:
        """A store on a fresh tenant for this (agent, workspace), seeded with this embedding cache;
        searches read this one until `publish`."""
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

    def publish(self, new: PgTenant) -> None:
        """Make `new` the active tenant and drop this one's rows, in one transaction."""
        with self._write():
            self._rows(
                "select memoryd.publish_rebuild(%s, %s)",
                (self.tenant_id, new.tenant_id),
                write=True,
            )
        new.building = False
        with contextlib.suppress(IndexError_):
            new._rows("select pg_advisory_unlock(%s)", (new._lock_key,), write=True)
        self.tenant_id = new.tenant_id

    def discard(self) -> None:
        """Close a rebuild's store, dropping it first if it was not published."""
        if self.building:
            with contextlib.suppress(IndexError_):
                self._rows("select memoryd.discard_rebuild(%s)", (self.tenant_id,), write=True)
        self.close()
