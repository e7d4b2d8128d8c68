"""The typed `status()` model: which backend serves an agent, why, and how healthy each side is."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    # output model: extra keys from the backends are kept (and shown by --json), never dropped
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class FallbackInfo(_Out):
    from_: Literal["qmd"] = Field("qmd", alias="from")
    reason: str | None = None
    since: float | None = Field(None, description="Unix time the agent failed over.")


class RecoveryInfo(_Out):
    attempts: int = Field(0, description="Recovery probes made since the last failover.")
    next_probe_at: float | None = Field(None, alias="nextProbeAt")
    recovered_at: float | None = Field(None, alias="recoveredAt")


class VectorInfo(_Out):
    enabled: bool
    available: bool
    engine: str = Field(description="sqlite-vec | numpy | disabled")
    dims: int | None = None
    load_error: str | None = Field(None, alias="loadError")


class FtsInfo(_Out):
    available: bool
    error: str | None = None


class CacheInfo(_Out):
    entries: int
    max_entries: int = Field(alias="maxEntries")


class MemoryStatus(_Out):
    """What `memoryd status` prints (camelCase in JSON)."""

    agent_id: str = Field(alias="agentId")
    backend: Literal["qmd", "builtin"]
    requested_backend: Literal["qmd", "builtin"] = Field(alias="requestedBackend")
    fallback: FallbackInfo | None = None
    recovery: RecoveryInfo | None = None
    provider: str | None = None
    model: str | None = None
    files: int | None = None
    chunks: int | None = None
    dirty: bool = False
    db_path: str | None = Field(None, alias="dbPath")
    workspace_dir: str = Field(alias="workspaceDir")
    sources: list[str] = Field(default_factory=list)
    source_counts: dict[str, int] = Field(default_factory=dict, alias="sourceCounts")
    vector: VectorInfo | None = None
    fts: FtsInfo | None = None
    cache: CacheInfo | None = None
    collections: list[dict[str, Any]] | None = None
    last_update_at: float | None = Field(None, alias="lastUpdateAt")
    last_embed_at: float | None = Field(None, alias="lastEmbedAt")
    search_mode: str | None = Field(None, alias="searchMode")
    qmd_version: str | None = Field(None, alias="qmdVersion")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")
