"""The typed status an engine reports: `BuiltinStatus` (the built-in index) and `QmdStatus`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class StatusModel(BaseModel):
    """Output models: camelCase in JSON, every field declared (nothing passes through untyped)."""

    # defer_build: a search that reports no status never pays for building the validator
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
    #: sqlite-vec | numpy | disabled
    engine: str
    #: This process's KNN: numpy (in-memory matrix) | sqlite-vec (vec0) | sqlite-vec-scan (a one-off
    #: command's exact scan in SQL) | pgvector-exact | pgvector-hnsw | none
    search_engine: str = "none"
    binding: str = "sqlite3"
    dims: int | None = None
    load_error: str | None = None
    #: Which engine embeds this process's queries where the provider has several.
    query_engine: str | None = None
    query_engine_problem: str | None = None


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

    #: Where the damaged file is now (kept until you delete it).
    moved_to: str
    at: float | None = None
    reason: str | None = None


class SkippedFile(StatusModel):
    """A memory file the built-in index left out, and why."""

    path: str
    #: read_failed, binary, too_large (over sync.maxFileBytes) or refused (no longer readable).
    reason: str
    #: The OS reason, or what made the file binary or too large.
    detail: str
    size: int


class BuiltinStatus(StatusModel):
    """The built-in index of one (agent, workspace)."""

    #: 'none': keyword only.
    provider: str
    model: str | None = None
    requested_provider: str
    provider_reason: str
    fallback: DegradedInfo | None = None
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
    #: Files left out by kind (deep, special, hard links, mount points, unreadable, binary, …).
    skipped: dict[str, int] = {}
    #: Each memory file that was found but not indexed, with the reason.
    skipped_files: list[SkippedFile] = []
    #: Files that are not valid UTF-8 (indexed with U+FFFD).
    undecodable: list[str] = []
    #: Why the index is open read-only: searches answer from it, syncs cannot update it.
    read_only: str | None = None
    #: Damaged index files moved aside beside the index, oldest first.
    recoveries: list[IndexRecovery] = []


class CollectionStatus(StatusModel):
    name: str
    path: str
    pattern: str
    source: str


class QmdStatus(StatusModel):
    """The qmd sidecar of one (agent, workspace), as this process knows it."""

    command: str
    #: `qmd X.Y.Z`, validated; None until known.
    version: str | None = None
    version_error: str | None = None
    home: str
    search_mode: str
    collections: list[CollectionStatus]
    waiting_for_folder: list[str] = []
    last_update_at: float | None = None
    last_embed_at: float | None = None
    embed_failures: int = 0
    embed_retry_in_s: float | None = None
    last_error: str | None = None
    #: qmd hits memoryd did not serve, by reason (refused, stale, unknown_collection…).
    dropped_hits: dict[str, int] = {}
    last_dropped: str | None = None
    #: When qmd last returned a hit memoryd's file rules refuse.
    last_refused_at: float | None = None
