"""What the indexer, the searcher and the statistics need of the engine they are parts of."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from ..background import Background
from ..config import IndexSettings
from ..core.chunking import ChunkingPlan
from ..embeddings.base import EmbeddingProvider, ProviderSelection
from ._store import Store as SqliteStore

if TYPE_CHECKING:  # the PostgreSQL driver loads only when a config names it
    from ._pg_store import PgStore

#: The store of one (agent, workspace): a SQLite file or a tenant of a PostgreSQL database.
Store: TypeAlias = "SqliteStore | PgStore"


class Engine(Protocol):
    """`MemoryIndex` as its parts see it: a protocol, so no part imports the engine back."""

    cfg: IndexSettings
    path: Path
    store: Store
    selection: ProviderSelection
    provider: EmbeddingProvider | None
    unavailable: str | None
    fallback_reason: str | None
    fallback_since: float | None
    one_off: bool
    dirty: bool
    background: Background | None

    @property
    def chunking(self) -> ChunkingPlan: ...
    def provider_key(self) -> tuple[str, str, str]: ...
    def vectors_usable(self) -> bool: ...
    def lean(self, store: Store) -> bool: ...
    def signature(self) -> dict[str, Any]: ...
    def reindex_reason(self) -> str | None: ...
    def bind_workspace(self, store: Store) -> None: ...
    def provider_failed(self, err: Exception) -> None: ...
