"""The types the indexer, the searcher and the statistics share with the engine they are parts of."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:  # the parts import the engine's type only: at run time it imports them
    from ._pg_store import PgStore
    from ._store import Store as SqliteStore
    from .index import MemoryIndex as Engine

#: The store of one (agent, workspace): a SQLite file or a tenant of a PostgreSQL database.
Store: TypeAlias = "SqliteStore | PgStore"

__all__ = ["Engine", "Store"]
