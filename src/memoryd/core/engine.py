"""The engine contract: what the orchestrator asks of the built-in index and of the qmd sidecar.

Both engines implement `MemoryEngine`. They return results in ranking order with snippets already
within the per-snippet cap; the orchestrator applies scope rules before, and citations and the
injected-characters budget after, exactly once, whichever engine answered. Status is typed:
`BuiltinStatus` and `QmdStatus` are the only shapes an engine reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from .layout import MemoryRoot
from .results import FileText, SearchResult

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

EngineName = Literal["builtin", "qmd"]
#: Longest query accepted (characters), on every surface; longer ones are `invalid_input`.
MAX_QUERY_CHARS = 2000
Corpus = Literal["memory", "sessions", "all"]
ProgressFn = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One search: the query and the caller's limits (None = the engine's configured default)."""

    query: str
    max_results: int | None = None
    min_score: float | None = None
    corpus: Corpus = "all"


@dataclass(slots=True)
class EngineAnswer:
    """What an engine found, and how: which provider/model, which mode, notes for the caller."""

    results: list[SearchResult]
    engine: EngineName
    provider: str | None
    model: str | None
    mode: str
    #: The engine's `maxInjectedChars`: the orchestrator trims the decorated results to it.
    max_injected_chars: int
    notes: list[str] = field(default_factory=list)
    #: Why the engine answered in a degraded way (e.g. embeddings failed → keyword only).
    degraded: dict[str, Any] | None = None
    pending_vectors: int = 0
    #: Set when the engine's index is older than the newest memory file (seconds behind).
    stale_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class IndexCheck:
    """What `MemoryIndex.check` found, and what it did about it."""

    ok: bool
    #: What `quick_check` or the FTS5 checks reported (None when the file is sound).
    problem: str | None = None
    #: Where the damaged file was moved (None when nothing was moved).
    moved_to: str | None = None
    #: Whether the index was rebuilt from the Markdown files.
    rebuilt: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problem": self.problem,
            "movedTo": self.moved_to,
            "rebuilt": self.rebuilt,
            "seconds": round(self.seconds, 3),
        }


class MemoryEngine(Protocol):
    """The built-in index and the qmd manager, as the orchestrator sees them."""

    @property
    def name(self) -> EngineName: ...

    async def start(self, task_group: TaskGroup | None = None) -> None:
        """Prepare (open, create collections); with a task group, run timers/watchers in it."""

    async def search(self, request: SearchRequest) -> EngineAnswer:
        """Ranked results; raises a `MemorydError` subclass on failure, never returns garbage."""

    async def get(self, path: str, from_line: int | None, lines: int | None) -> FileText:
        """A memory file or a line range of it; `PathNotAllowed` for anything else."""

    def notify_changed(self) -> None:
        """A memory file changed through memoryd: refresh soon (debounced)."""

    async def aclose(self) -> None:
        """Stop timers and release files and processes."""


class BuiltinEngine(MemoryEngine, Protocol):
    """The built-in index's side of the contract."""

    async def sync(
        self,
        *,
        force: bool = False,
        progress: ProgressFn | None = None,
        embed_budget_s: float | None = None,
    ) -> Any:
        """Bring the index up to date with the files now (vectors within `embed_budget_s`)."""

    def status(self) -> BuiltinStatus: ...

    def pending_changes(self) -> int:
        """Memory files added, changed or removed since the last sync."""

    async def check(self) -> IndexCheck:
        """Verify the index file; a damaged one is moved aside and rebuilt."""


class QmdEngine(MemoryEngine, Protocol):
    """The qmd sidecar's side of the contract."""

    @property
    def search_mode(self) -> str: ...

    async def sync(self, *, force: bool = False, progress: ProgressFn | None = None) -> Any:
        """`qmd update`, then `qmd embed` when due."""

    def status(self) -> QmdStatus: ...

    def roots(self) -> list[MemoryRoot]:
        """Every collection as a memory root (what `memory_get` serves)."""

    async def probe(self) -> bool:
        """Whether qmd starts and answers `qmd X.Y.Z` (never raises)."""


# --------------------------------------------------------------------------- status models


class StatusModel(BaseModel):
    """Output models: camelCase in JSON, every field declared (nothing passes through untyped)."""

    # defer_build: a validator is built the first time a status is made, not at import (a
    # search that reports no status never pays for it)
    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
        frozen=True,
        defer_build=True,
    )

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


class VectorInfo(StatusModel):
    enabled: bool
    available: bool
    engine: str = Field(description="sqlite-vec | numpy | disabled")
    search_engine: str = Field(
        "none", description="Which engine answers KNN now: numpy | sqlite-vec | none"
    )
    binding: str = "sqlite3"
    dims: int | None = None
    load_error: str | None = None


class FtsInfo(StatusModel):
    available: bool
    error: str | None = None
    trigram: bool = False
    #: what runs keyword search: "fts5" (SQLite) or "tsvector" (PostgreSQL)
    engine: str = "fts5"


class CacheInfo(StatusModel):
    enabled: bool = True
    entries: int
    max_entries: int


class DegradedInfo(StatusModel):
    reason: str
    since: float | None = None


class IndexRecovery(StatusModel):
    """A damaged index file moved aside (the index was rebuilt from the Markdown files)."""

    moved_to: str = Field(description="Where the damaged file is now (kept until you delete it).")
    at: float | None = None
    reason: str | None = Field(None, description="What was wrong with it.")


class BuiltinStatus(StatusModel):
    """The built-in index of one (agent, workspace)."""

    provider: str = Field(description="Embedding provider serving, or 'none' (keyword only).")
    model: str | None = None
    requested_provider: str
    provider_reason: str
    fallback: DegradedInfo | None = Field(None, description="Set when embeddings degraded.")
    unavailable: str | None = None
    files: int
    chunks: int
    pending_vectors: int
    dirty: bool
    needs_reindex: str | None = None
    db_path: str
    workspace_dir: str
    sources: list[str]
    source_counts: dict[str, int]
    vector: VectorInfo
    fts: FtsInfo
    cache: CacheInfo
    last_sync_at: float | None = None
    last_error: str | None = None
    skipped: dict[str, int] = Field(
        default_factory=dict, description="Files left out by kind (deep, special, hard links…)."
    )
    undecodable: list[str] = Field(
        default_factory=list, description="Files that are not valid UTF-8 (indexed with U+FFFD)."
    )
    read_only: str | None = Field(
        None,
        description="Why the index is open read-only: searches answer from it, syncs cannot "
        "update it.",
    )
    recoveries: list[IndexRecovery] = Field(
        default_factory=list,
        description="Damaged index files moved aside beside the index, oldest first.",
    )


class CollectionStatus(StatusModel):
    name: str
    path: str
    pattern: str
    source: str


class QmdStatus(StatusModel):
    """The qmd sidecar of one (agent, workspace), as this process knows it."""

    command: str
    version: str | None = Field(None, description="`qmd X.Y.Z`, validated; None until known.")
    version_error: str | None = None
    home: str
    search_mode: str
    collections: list[CollectionStatus]
    waiting_for_folder: list[str] = Field(default_factory=list)
    last_update_at: float | None = None
    last_embed_at: float | None = None
    embed_failures: int = 0
    embed_retry_in_s: float | None = None
    last_error: str | None = None


__all__ = [
    "BuiltinEngine",
    "BuiltinStatus",
    "CacheInfo",
    "CollectionStatus",
    "Corpus",
    "DegradedInfo",
    "EngineAnswer",
    "EngineName",
    "FileText",
    "FtsInfo",
    "IndexCheck",
    "IndexRecovery",
    "MemoryEngine",
    "ProgressFn",
    "QmdEngine",
    "QmdStatus",
    "SearchRequest",
    "SearchResult",
    "StatusModel",
    "VectorInfo",
]
