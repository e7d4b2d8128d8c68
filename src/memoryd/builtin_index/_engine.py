"""The types the indexer, the searcher and the statistics name their engine and store by."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:  # type names only: the parts never import the engine (or PostgreSQL) back
    from ._pg_store import PgStore
    from ._store import Store as SqliteStore
    from .index import MemoryIndex

#: The engine the parts belong to.
Engine: TypeAlias = "MemoryIndex"
#: The store of one (agent, workspace): a SQLite file or a tenant of a PostgreSQL database.
Store: TypeAlias = "SqliteStore | PgStore"
