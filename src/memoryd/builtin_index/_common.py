"""What the SQLite and PostgreSQL stores share: their records and the checks that read alike."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, slots=True)
class VectorEngine:
    engine: str  # "sqlite-vec" | "numpy" | "pgvector" | "disabled"
    available: bool
    load_error: str | None = None
    binding: str = "sqlite3"


@dataclass(frozen=True, slots=True)
class Recovery:
    """A damaged index file moved aside (`moved_to` is None when another process already had)."""

    moved_to: Path | None
    reason: str | None
    at: float | None


@dataclass(frozen=True, slots=True)
class ChunkRow:
    id: int
    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    mtime: float | None


#: `on_recovered(recovery, refill_now)`, called when a fresh file replaced a damaged one: with
#: `refill_now` the owner may rebuild the contents at once, and returns whether it did.
RecoveryHook = Callable[[Recovery, bool], bool]


class StoreBase:
    """What both stores do alike: the checks, and the reads and writes whose SQL differs only by
    the tenant's rows (`_mine`); `?` marks a parameter in both."""

    #: The signature (provider, model, chunking) this process writes with, so that it writes
    #: nothing into an index another process rebuilt with other settings.
    guard_signature: dict[str, Any] | None = None
    fts_error: str | None = None
    trigram_error: str | None = None
    #: Why the index only answers searches here (None: it is written too).
    read_only: str | None = None
    #: Where the index lives: the file, or the database (never its password) and agent.
    location: str
    #: The column of `chunk_vectors v` that `_decoded` reads a vector from.
    _VECTOR: str

    def _decoded(self, stored: Any) -> np.ndarray:
        raise NotImplementedError

    def _mine(self, alias: str = "") -> str:
        """SQL true of this store's rows (a tenant's, in PostgreSQL)."""
        raise NotImplementedError

    def _pending(self) -> str:
        """The chunks waiting for a vector, as rows `c` of a FROM clause."""
        raise NotImplementedError

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    def _write(self, sql: str, params: Sequence[Any] = ()) -> None:
        """One statement inside `transaction()`."""
        raise NotImplementedError

    def transaction(
        self, *, wait_ms: int | None = None, doing: str = "update the index"
    ) -> AbstractContextManager[None]:
        raise NotImplementedError

    @property
    def fts_available(self) -> bool:
        return self.fts_error is None

    def signature_matches(self) -> bool:
        """Whether the index was built with `guard_signature` (or records none yet)."""
        raw = None if self.guard_signature is None else self.meta_value("signature")
        if raw is None:
            return True
        try:
            return bool(json.loads(raw) == self.guard_signature)
        except ValueError:
            return False

    def meta(self) -> dict[str, str]:
        return dict(self._read(f"select key, value from meta where {self._mine()}"))

    def meta_value(self, key: str) -> str | None:
        rows = self._read(f"select value from meta where {self._mine()} and key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def delete_meta(self, key: str) -> None:
        with self.transaction(doing="save index metadata"):
            self._write(f"delete from meta where {self._mine()} and key = ?", (key,))

    def files(self) -> dict[str, tuple[str, float, int, str]]:
        sql = f"select path, hash, mtime, size, source from files where {self._mine()}"
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in self._read(sql)}

    def paths(self) -> list[str]:
        return [r[0] for r in self._read(f"select path from files where {self._mine()}")]

    def abs_paths(self, source: str) -> list[str]:
        """Absolute paths of the indexed files of one source."""
        sql = f"select abs_path from files where {self._mine()} and source = ?"
        return [r[0] for r in self._read(sql, (source,))]

    def touch_file(self, path: str, mtime: float, size: int) -> None:
        with self.transaction(doing=f"index {path}"):
            sql = f"update files set mtime = ?, size = ? where {self._mine()} and path = ?"
            self._write(sql, (mtime, size, path))

    def chunk_count(self) -> int:
        return int(self._read(f"select count(*) from chunks where {self._mine()}")[0][0])

    def pending_count(self) -> int:
        return int(self._read(f"select count(*) from {self._pending()}")[0][0])

    def pending_chunks(self, limit: int) -> list[tuple[int, str, str]]:
        """(chunk id, content hash, text) of up to `limit` chunks waiting for a vector."""
        sql = f"select c.id, c.hash, c.text from {self._pending()} order by c.id limit ?"
        return [(int(r[0]), str(r[1]), str(r[2])) for r in self._read(sql, (limit,))]

    def counts(self) -> dict[str, Any]:
        mine = self._mine()
        files, chunks, pending, cache = self._read(
            f"select (select count(*) from files where {mine}), "
            f"(select count(*) from chunks where {mine}), "
            f"(select count(*) from {self._pending()}), "
            f"(select count(*) from embedding_cache where {mine})"
        )[0]
        by_source = f"select source, count(*) from files where {mine} group by source"
        return {
            "files": files,
            "chunks": chunks,
            "pending_vectors": pending,
            "source_counts": dict(self._read(by_source)),
            "cache_entries": cache,
        }

    def chunk_ids_for_paths(self, paths: Sequence[str], limit_per_path: int) -> list[int]:
        """The first `limit_per_path` chunks of each of `paths`, path by path."""
        if not paths:
            return []
        rows = self._read(
            "select path, id from (select path, id, start_line, row_number() over "
            "(partition by path order by start_line) as n from chunks "
            f"where {self._mine()} and path in ({','.join('?' * len(paths))})) as c "
            "where n <= ? order by start_line",
            (*paths, limit_per_path),
        )
        order = {p: i for i, p in enumerate(paths)}
        return [int(r[1]) for r in sorted(rows, key=lambda r: order[r[0]])]

    def _vector_count(self) -> int:
        raise NotImplementedError

    def _sample(self, columns: str, limit: int, params: Sequence[Any] = ()) -> list[Any]:
        """(chunk id, *columns) of up to `limit` vectors spread evenly over chunk ids: the one
        sample every background statistic is taken over."""
        step = max(1, -(-self._vector_count() // max(limit, 1)))
        return self._read(
            f"select v.chunk_id, {columns} from chunk_vectors v join chunks c "
            f"on c.id = v.chunk_id and {self._mine('c')} where {self._mine('v')} "
            "and v.chunk_id % ? = 0 order by v.chunk_id limit ?",
            (*params, step, limit),
        )

    def vector_sample(self, limit: int) -> list[tuple[int, np.ndarray, str, str]]:
        """`_sample`'s (chunk id, vector, text, content hash)."""
        rows = self._sample(f"{self._VECTOR}, c.text, c.hash", limit)
        return [(int(r[0]), self._decoded(r[1]), r[2], str(r[3])) for r in rows]

    def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        ids = list(ids)
        if not ids:
            return {}
        rows = self._read(
            "select c.id, c.path, c.source, c.start_line, c.end_line, c.text, f.mtime "
            f"from chunks c left join files f on f.path = c.path and {self._mine('f')} "
            f"where {self._mine('c')} and c.id in ({','.join('?' * len(ids))})",
            ids,
        )
        return {int(r[0]): ChunkRow(*r) for r in rows}
