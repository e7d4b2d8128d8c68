"""Configuration: pydantic models shaped like OpenClaw's keys, and the loader that finds and reads them.

Keys are written camelCase as in OpenClaw's config; snake_case field names are accepted too.
Every model forbids unknown keys so a misspelled option fails loudly with its key path.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import parse_qsl, quote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from . import config_cache, paths
from .core.layout import LONG_TERM_NAMES, MEMORY_DIR, MemoryRoot, default_roots, extra_root
from .errors import ConfigError, InvalidAgentId, UnknownAgent, WorkspaceNotFound


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        validate_default=True,
        defer_build=True,
    )


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1}


def parse_duration_ms(value: str | int | float) -> int:
    """`"5m"` → 300000; bare numbers are milliseconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '5m', '30s' or milliseconds")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("duration must not be negative")
        return int(value)
    match = _DURATION_RE.match(value)
    if not match:
        raise ValueError(f"invalid duration {value!r} (use e.g. '500ms', '30s', '5m', '1h')")
    return int(float(match.group(1)) * _UNIT_MS[match.group(2)])


# --------------------------------------------------------------------------- memorySearch


class BatchConfig(_Model):
    enabled: bool = Field(False, description="Use the provider's async batch API for indexing.")
    wait: bool = Field(True, description="Wait for batch jobs to finish during a sync.")
    concurrency: int = Field(2, ge=1, description="Batch jobs in flight at once.")
    poll_interval_ms: int = Field(2000, ge=1, description="How often to poll a batch job.")
    timeout_minutes: float = Field(60, gt=0, description="Give up on a batch job after this long.")


class RemoteConfig(_Model):
    base_url: str | None = Field(
        None, description="Endpoint for OpenAI-compatible or self-hosted APIs."
    )
    api_key: str | None = Field(
        None, description="API key; falls back to provider config and env vars."
    )
    headers: dict[str, str] = Field(
        default_factory=dict, description="Extra HTTP headers (win over defaults)."
    )
    batch: BatchConfig = Field(default_factory=BatchConfig)
    input_type: dict[str, str] | None = Field(
        None,
        description="Asymmetric input types for OpenAI-compatible endpoints: {query, document}.",
    )
    output_dimensionality: int | None = Field(None, description="Requested embedding dimensions.")


class LocalConfig(_Model):
    @model_validator(mode="before")
    @classmethod
    def _no_model_cache_dir(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and ("modelCacheDir" in data or "model_cache_dir" in data):
            raise ValueError(
                "modelCacheDir is not supported: memoryd's local model ships inside its Python "
                "package and downloads nothing (remove the key)"
            )
        return data

    model_path: str | None = Field(None, description="Path to a local embedding model file.")
    threads: int | None = Field(
        None,
        ge=1,
        le=64,
        description="CPU threads of the local model; default min(2, cores). OMP_NUM_THREADS wins when set. "
        "Threads wait passively (OMP_WAIT_POLICY=PASSIVE) unless set otherwise: spinning threads turned "
        "~20 ms queries into 150 ms-1.3 s tails whenever another process held a core.",
    )


class VectorStoreConfig(_Model):
    enabled: bool = Field(
        True, description="Store vectors in sqlite-vec (numpy fallback when it cannot load)."
    )
    extension_path: str | None = Field(
        None, description="Explicit path to the sqlite-vec loadable extension."
    )


StoreDriver = Literal["sqlite", "postgres"]
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def check_store_url(url: str) -> None:
    """Refuse what `store.url` must not be: anything but a libpq URL, or one with a password.

    A password written into the config would sit in a file that is copied, shared and shown;
    it comes from the environment instead (`PGPASSWORD`, `~/.pgpass`, `PGSERVICE`, or a
    `${NAME}` reference; the whole URL may be one, checked when it is filled). The messages never
    repeat the URL.
    """
    if _ENV_REF.fullmatch(url):
        return
    if not url.startswith(("postgresql://", "postgres://")):
        raise ValueError(
            "must be a libpq URL, postgresql://user@host:port/dbname (key=value strings are "
            "not accepted)"
        )
    try:
        parts = urlsplit(url)
        password = parts.password
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        raise ValueError("is not a valid URL") from None
    inline = [v for k, v in query if k == "password"]
    if password is not None:
        inline.append(password)
    if any(not _ENV_REF.fullmatch(v) for v in inline):
        raise ValueError(
            "must not contain a password: set PGPASSWORD or ~/.pgpass for memoryd, or write "
            "it as a reference to an environment variable, postgresql://user:${PGPASS_VAR}@host/db"
        )


def expand_store_url(url: str, environ: Mapping[str, str]) -> str:
    """`store.url` with its `${NAME}` references filled from the environment.

    Each value is inserted percent-encoded (libpq decodes every part), so a password with `@`
    or `/` stays one field; a reference that is the whole URL is inserted as it is.
    """
    whole = _ENV_REF.fullmatch(url)

    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in environ:
            raise ConfigError(
                f"store.url refers to ${{{name}}}, which is not set in the environment"
            )
        return environ[name] if whole else quote(environ[name], safe="")

    filled = _ENV_REF.sub(value, url)
    if whole and not filled.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"store.url: ${{{whole.group(1)}}} must hold a libpq URL, postgresql://…")
    return filled


class StoreConfig(_Model):
    driver: StoreDriver = Field(
        "sqlite",
        description="Where the built-in index lives: 'sqlite' (one file per agent and workspace) "
        "or 'postgres' (a shared PostgreSQL database with pgvector, see store.url).",
    )
    path: str | None = Field(
        None, description="Index file; supports {agentId}. Default <state>/memory/<agentId>.sqlite."
    )
    url: str | None = Field(
        None,
        description="driver = postgres: a libpq URL, postgresql://user@host:port/dbname. No "
        "inline password: libpq reads PGPASSWORD, ~/.pgpass or PGSERVICE, and ${NAME} "
        "references are filled from the environment.",
    )
    vector: VectorStoreConfig = Field(default_factory=VectorStoreConfig)

    @field_validator("url")
    @classmethod
    def _url_without_password(cls, value: str | None) -> str | None:
        if value is not None:
            check_store_url(value)
        return value


class DailyNoteChunkingConfig(_Model):
    tokens: int = Field(
        ge=16, le=8192, description="Chunk size of daily notes in estimated tokens."
    )
    overlap: int = Field(ge=0, description="Overlap between a daily note's chunks in tokens.")

    @model_validator(mode="after")
    def _overlap_below_size(self) -> DailyNoteChunkingConfig:
        if self.overlap >= self.tokens:
            raise ValueError("chunking.dailyNotes.overlap must be smaller than its tokens")
        return self


class ChunkingConfig(_Model):
    tokens: int = Field(400, ge=16, le=8192, description="Target chunk size in estimated tokens.")
    overlap: int = Field(80, ge=0, description="Overlap between consecutive chunks in tokens.")
    daily_notes: DailyNoteChunkingConfig | None = Field(
        None,
        description="A size of their own for daily notes (memory/YYYY-MM-DD*.md), e.g. "
        "{tokens = 160, overlap = 16} for conversational logs; unset: tokens/overlap for all.",
    )

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkingConfig:
        if self.overlap >= self.tokens:
            raise ValueError("chunking.overlap must be smaller than chunking.tokens")
        return self


class MmrConfig(_Model):
    enabled: bool = False
    lambda_: float = Field(
        0.7, ge=0, le=1, alias="lambda", description="Relevance vs diversity trade-off."
    )


class TemporalDecayConfig(_Model):
    enabled: bool = False
    half_life_days: float = Field(30, gt=0)


class HybridConfig(_Model):
    enabled: bool = True
    vector_weight: float = Field(0.7, ge=0)
    text_weight: float = Field(0.3, ge=0)
    candidate_multiplier: int = Field(4, ge=1, le=50)
    fusion: Literal["auto", "relative", "weighted", "rrf", "minmax", "zscore"] = Field(
        "auto",
        description="How BM25 and vector lists merge: 'auto' is memoryd's default (calibrated scores "
        "that mean the same across queries, so minScore drops what is unrelated; see README); "
        "'relative' is the previous default (scores relative to the query's best hit, never "
        "abstains); 'weighted' is the seed's linear merge.",
    )
    mmr: MmrConfig = Field(default_factory=MmrConfig)
    temporal_decay: TemporalDecayConfig = Field(default_factory=TemporalDecayConfig)

    @model_validator(mode="after")
    def _weights_not_both_zero(self) -> HybridConfig:
        if self.vector_weight + self.text_weight <= 0:
            raise ValueError("vectorWeight and textWeight cannot both be 0")
        return self


class QueryConfig(_Model):
    max_results: int = Field(6, ge=1, le=100)
    min_score: float = Field(0.35, ge=0, le=1)
    max_injected_chars: int = Field(
        4000, ge=100, description="Budget of snippet characters returned."
    )
    hybrid: HybridConfig = Field(default_factory=HybridConfig)


class CacheConfig(_Model):
    enabled: bool = True
    max_entries: int = Field(50_000, ge=1)


class SessionSyncConfig(_Model):
    delta_bytes: int = Field(100_000, ge=0)
    delta_messages: int = Field(50, ge=0)


class SyncConfig(_Model):
    on_session_start: bool = True
    on_search: bool = True
    watch: bool = True
    watch_debounce_ms: int = Field(1500, ge=0)
    interval_minutes: float = Field(0, ge=0, description="Periodic full sync; 0 disables.")
    search_wait_ms: int = Field(
        2000, ge=0, description="Longest a search waits for a dirty index to sync."
    )
    sessions: SessionSyncConfig = Field(default_factory=SessionSyncConfig)


class ExperimentalConfig(_Model):
    session_memory: bool = False


class ExtraPathEntry(_Model):
    """An extra memory folder with its own glob (OpenClaw 2026.8's `{path, pattern}` entries)."""

    path: str = Field(description="Folder (absolute, workspace-relative or ~).")
    pattern: str = Field("**/*.md", description="qmd-style glob of the files to index under it.")


ProviderName = Literal["auto", "local", "openai", "gemini", "voyage", "mistral", "ollama", "none"]
FallbackName = Literal["openai", "gemini", "voyage", "mistral", "ollama", "local", "none"]
SourceName = Literal["memory", "sessions"]


class MemorySearchConfig(_Model):
    enabled: bool = True
    provider: ProviderName = "auto"
    model: str | None = None
    fallback: FallbackName = "none"
    remote: RemoteConfig = Field(default_factory=RemoteConfig)
    local: LocalConfig = Field(default_factory=LocalConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    query: QueryConfig = Field(default_factory=QueryConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    sync: SyncConfig = Field(default_factory=SyncConfig)
    extra_paths: list[str | ExtraPathEntry] = Field(
        default_factory=list,
        description="More memory: folders (every **/*.md), single .md files, or {path, pattern}.",
    )
    sources: list[SourceName] = Field(default_factory=lambda: list[SourceName](["memory"]))
    experimental: ExperimentalConfig = Field(default_factory=ExperimentalConfig)


# --------------------------------------------------------------------------- compaction


DEFAULT_FLUSH_SYSTEM_PROMPT = (
    "Pre-compaction memory flush turn. The session is near auto-compaction; capture durable memories "
    "to disk. You may reply, but usually NO_REPLY is correct."
)
DEFAULT_FLUSH_PROMPT = (
    "Pre-compaction memory flush. Store durable memories now (use memory/YYYY-MM-DD.md; create "
    "memory/ if needed). If nothing to store, reply with NO_REPLY."
)


class MemoryFlushConfig(_Model):
    enabled: bool = True
    soft_threshold_tokens: int = Field(4000, ge=0)
    system_prompt: str = DEFAULT_FLUSH_SYSTEM_PROMPT
    prompt: str = DEFAULT_FLUSH_PROMPT
    model: str | None = None


class CompactionConfig(_Model):
    reserve_tokens_floor: int = Field(20_000, ge=0)
    memory_flush: MemoryFlushConfig = Field(default_factory=MemoryFlushConfig)


# --------------------------------------------------------------------------- scope


class ScopeMatch(_Model):
    channel: str | None = None
    chat_type: Literal["direct", "group", "channel"] | None = None
    key_prefix: str | None = None
    raw_key_prefix: str | None = None


class ScopeRule(_Model):
    action: Literal["allow", "deny"]
    match: ScopeMatch | None = None


class ScopeConfig(_Model):
    """OpenClaw's `session.sendPolicy` schema, applied to who may search memory."""

    default: Literal["allow", "deny"] | None = None
    rules: list[ScopeRule] | None = None


# --------------------------------------------------------------------------- qmd


class QmdPathConfig(_Model):
    path: str
    name: str | None = None
    pattern: str = "**/*.md"


class QmdSessionsConfig(_Model):
    enabled: bool = False
    export_dir: str | None = None
    retention_days: int | None = Field(None, ge=1)


class QmdUpdateConfig(_Model):
    interval: str | int = "5m"
    debounce_ms: int = Field(15_000, ge=0)
    on_boot: bool = True
    wait_for_boot_sync: bool = False
    embed_interval: str | int = "60m"
    command_timeout_ms: int = Field(30_000, ge=1)
    update_timeout_ms: int = Field(120_000, ge=1)
    embed_timeout_ms: int = Field(120_000, ge=1)

    @field_validator("interval", "embed_interval")
    @classmethod
    def _valid_duration(cls, value: str | int) -> str | int:
        parse_duration_ms(value)
        return value

    @property
    def interval_ms(self) -> int:
        return parse_duration_ms(self.interval)

    @property
    def embed_interval_ms(self) -> int:
        return parse_duration_ms(self.embed_interval)


class QmdLimitsConfig(_Model):
    max_results: int = Field(6, ge=1)
    max_snippet_chars: int = Field(700, ge=1)
    max_injected_chars: int = Field(4000, ge=1)
    timeout_ms: int = Field(4000, ge=1)
    min_score: float = Field(0.0, ge=0)


class QmdModelsConfig(_Model):
    embed: str | None = None
    rerank: str | None = None
    generate: str | None = None


class FailoverConfig(_Model):
    """When qmd's failures flip an agent to the built-in index and how it comes back."""

    failure_threshold: int = Field(
        1, ge=1, description="Consecutive qmd failures before failing over."
    )
    cooldown_ms: int = Field(
        15_000, ge=0, description="Minimum time on the built-in index before probing."
    )
    probe_max_interval_ms: int = Field(
        300_000, ge=1, description="Backoff cap between recovery probes."
    )


class QmdConfig(_Model):
    command: str = Field("qmd", description="The qmd executable (path or name on PATH).")
    search_mode: Literal["search", "vsearch", "query"] = "search"
    include_default_memory: bool = True
    paths: list[QmdPathConfig] = Field(default_factory=list)
    sessions: QmdSessionsConfig = Field(default_factory=QmdSessionsConfig)
    update: QmdUpdateConfig = Field(default_factory=QmdUpdateConfig)
    limits: QmdLimitsConfig = Field(default_factory=QmdLimitsConfig)
    models: QmdModelsConfig = Field(default_factory=QmdModelsConfig)
    scope: ScopeConfig | None = Field(None, description="OpenClaw location of the scope rules.")
    fallback: Literal["builtin", "none"] = "builtin"
    failover: FailoverConfig = Field(default_factory=FailoverConfig)
    empty_results: Literal["empty", "builtin"] = Field(
        "empty",
        description="When qmd answers a multi-word question with nothing (its `search` ANDs every "
        "term): 'empty' (OpenClaw's behaviour) or 'builtin' to complete the answer from the "
        "built-in index; such hits carry backend 'builtin'.",
    )


class MemoryConfig(_Model):
    backend: Literal["builtin", "qmd"] = "builtin"
    citations: Literal["auto", "on", "off"] = "auto"
    scope: ScopeConfig | None = None
    qmd: QmdConfig = Field(default_factory=QmdConfig)

    @property
    def effective_scope(self) -> ScopeConfig | None:
        """`memory.scope`, else OpenClaw's `memory.qmd.scope`; None means the shipped default."""
        return self.scope if self.scope is not None else self.qmd.scope


# --------------------------------------------------------------------------- agents


WorkspaceAccess = Literal["rw", "ro", "none"]


class AgentDefaults(_Model):
    workspace: str | None = None
    workspace_access: WorkspaceAccess = "rw"
    bootstrap_max_chars: int = Field(
        20_000, ge=1, description="Most characters of one memory file injected at session start."
    )
    bootstrap_total_max_chars: int = Field(
        150_000, ge=1, description="Most characters of all memory files injected at session start."
    )
    memory_search: MemorySearchConfig = Field(default_factory=MemorySearchConfig)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)


class AgentEntry(_Model):
    id: str = Field(description=f"Agent id: {paths.AGENT_ID_SHAPE} (case-insensitive).")
    workspace: str | None = None
    workspace_access: WorkspaceAccess | None = None
    memory_search: dict[str, Any] | None = Field(
        None, description="Overrides merged over agents.defaults.memorySearch."
    )
    compaction: dict[str, Any] | None = None

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        try:
            return paths.validate_agent_id(value)
        except InvalidAgentId as err:
            raise ValueError(str(err)) from None

    @field_validator("memory_search")
    @classmethod
    def _search_overrides_valid(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            MemorySearchConfig.model_validate(value)
        return value

    @field_validator("compaction")
    @classmethod
    def _compaction_overrides_valid(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            CompactionConfig.model_validate(value)
        return value


class AgentsConfig(_Model):
    defaults: AgentDefaults = Field(default_factory=AgentDefaults)
    entries: list[AgentEntry] = Field(default_factory=list, alias="list")

    @field_validator("entries")
    @classmethod
    def _unique_ids(cls, entries: list[AgentEntry]) -> list[AgentEntry]:
        seen: set[str] = set()
        for entry in entries:
            if entry.id in seen:
                raise ValueError(f"duplicate agent id {entry.id!r}")
            seen.add(entry.id)
        return entries


class ProviderEntry(_Model):
    api_key: str | None = None
    base_url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)


class ModelsConfig(_Model):
    providers: dict[str, ProviderEntry] = Field(default_factory=dict)


class MemorydConfig(_Model):
    """The whole config file."""

    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    agents: AgentsConfig = Field(default_factory=AgentsConfig)
    models: ModelsConfig = Field(default_factory=ModelsConfig)


# --------------------------------------------------------------------------- resolved agent view


@dataclass(frozen=True)
class ResolvedAgent:
    """One agent's effective settings after defaults, per-agent overrides and CLI overrides.

    A plain frozen dataclass, not a model: it is assembled from parts the config models have
    already validated, so it needs no validator of its own (building one cost every process
    tens of milliseconds at import).
    """

    agent_id: str
    workspace: Path
    workspace_access: WorkspaceAccess
    memory_search: MemorySearchConfig
    compaction: CompactionConfig
    memory: MemoryConfig
    models: ModelsConfig
    bootstrap_max_chars: int = 20_000
    bootstrap_total_max_chars: int = 150_000

    @property
    def state(self) -> paths.AgentState:
        """Every state path of this (agent, workspace) pair (see `memoryd.paths`)."""
        return paths.agent_state(self.agent_id, self.workspace)

    @property
    def index_path(self) -> Path:
        raw = self.memory_search.store.path
        if not raw:
            return self.state.index_db
        return paths.expand_store_path(raw, self.agent_id, self.workspace)

    @property
    def state_dir(self) -> Path:
        """`<state>/agents/<agentId>/workspaces/<workspaceKey>`."""
        return self.state.root

    @property
    def sessions_dir(self) -> Path:
        return self.state.sessions_dir

    @property
    def sessions_enabled(self) -> bool:
        """Transcripts are a search source: `experimental.sessionMemory` and `"sessions"` in sources."""
        ms = self.memory_search
        return bool(ms.experimental.session_memory) and "sessions" in ms.sources

    def extra_roots(self) -> list[MemoryRoot]:
        """One root per `extraPaths` entry, `~` and workspace-relative paths resolved."""
        out = []
        for entry in self.memory_search.extra_paths:
            raw, pattern = (entry, None) if isinstance(entry, str) else (entry.path, entry.pattern)
            out.append(extra_root(str(_absolute(raw, self.workspace)), pattern))
        return out

    def memory_roots(self) -> list[MemoryRoot]:
        """The default memory files plus `extraPaths`: what the built-in index reads and serves."""
        return default_roots(str(self.workspace)) + self.extra_roots()

    def index_settings(self) -> IndexSettings:
        """The built-in index's settings for this agent (`store.url` filled from the environment)."""
        ms = self.memory_search
        store = ms.store
        url = None
        if store.driver == "postgres":
            if not store.url:
                raise ConfigError(
                    f"agent {self.agent_id}: memorySearch.store.driver is 'postgres' but "
                    "memorySearch.store.url is not set (postgresql://user@host:port/dbname)"
                )
            url = expand_store_url(store.url, os.environ)
        return IndexSettings(
            agent_id=self.agent_id,
            workspace=self.workspace,
            workspace_key=paths.workspace_key(self.workspace),
            roots=tuple(self.memory_roots()),
            db_path=self.index_path,
            own_db_folder=not self.memory_search.store.path,
            sources=tuple(ms.sources),
            sessions_dir=self.sessions_dir if self.sessions_enabled else None,
            chunking=ms.chunking,
            query=ms.query,
            sync=ms.sync,
            cache=ms.cache,
            vector=ms.store.vector,
            store_driver=store.driver,
            store_url=url,
        )

    def qmd_settings(self) -> QmdSettings:
        """The qmd sidecar's settings for this agent."""
        q = self.memory.qmd
        export = q.sessions.export_dir
        exports = (
            paths.expand_store_path(export, self.agent_id, self.workspace)
            if export
            else self.state.qmd_exports
        )
        return QmdSettings(
            agent_id=self.agent_id,
            workspace=self.workspace,
            qmd=q,
            home=self.state.qmd_home,
            exports_dir=exports,
            extra_roots=tuple(self.extra_roots()),
        )


def _absolute(raw: str, workspace: Path) -> Path:
    p = Path(os.path.expanduser(raw))
    return Path(os.path.normpath(p if p.is_absolute() else workspace / p))


@dataclass(frozen=True, slots=True)
class IndexSettings:
    """What the built-in index needs to know, and nothing more (built by `ResolvedAgent`)."""

    agent_id: str
    workspace: Path
    #: `memoryd.paths.workspace_key(workspace)`: with the agent id, the PostgreSQL store's tenant.
    workspace_key: str
    roots: tuple[MemoryRoot, ...]
    db_path: Path
    #: False when `store.path` put the index in a folder of the user's choosing: memoryd then
    #: never changes that folder's mode (it would make a home or /tmp 0700).
    own_db_folder: bool
    sources: tuple[str, ...]
    #: The agent's transcripts folder when transcripts are a search source, else None.
    sessions_dir: Path | None
    chunking: ChunkingConfig
    query: QueryConfig
    sync: SyncConfig
    cache: CacheConfig
    vector: VectorStoreConfig
    store_driver: StoreDriver = "sqlite"
    #: driver = postgres: the libpq URL with its `${NAME}` references filled (it may carry a
    #: password from the environment: kept out of repr, never logged or shown in status).
    store_url: str | None = dataclasses.field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class QmdSettings:
    """What the qmd sidecar needs to know (built by `ResolvedAgent`)."""

    agent_id: str
    workspace: Path
    qmd: QmdConfig
    home: Path
    exports_dir: Path
    #: `memorySearch.extraPaths`, which become qmd collections too.
    extra_roots: tuple[MemoryRoot, ...] = ()


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge `override` over `base` (dicts merge, everything else replaces)."""
    out: dict[str, Any] = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _model_at(model: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The pydantic model that holds the key at `loc` (None when the path leaves the models)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next(
            (f for name, f in current.model_fields.items() if part in (name, f.alias)), None
        )
        if field is None:
            return None
        current = _inner_model(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    """The model inside `X | None`, `list[X]`, `dict[str, X]` (or the annotation itself)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _inner_model(arg)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation


def _did_you_mean(model: type[BaseModel] | None, loc: Sequence[str | int], key: str) -> str:
    holder = _model_at(model, loc) if model is not None else None
    if holder is None:
        return ""
    known = [f.alias or name for name, f in holder.model_fields.items()]
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def format_validation_error(
    err: ValidationError, *, root: str = "", model: type[BaseModel] | None = None
) -> str:
    """One line per problem, each naming the offending key path (`agents.defaults.memorySearch…`).

    With `model`, an unknown key also suggests the closest known one (`maxResult` → `maxResults`).
    """
    lines = []
    for item in err.errors():
        parts = [p for p in item["loc"] if p != "__root__"]
        loc = ".".join(str(part) for part in parts)
        path = ".".join(p for p in (root, loc) if p)
        msg = item["msg"]
        if item["type"] == "extra_forbidden":
            msg = "unknown key" + _did_you_mean(model, parts[:-1], str(parts[-1]))
        elif item["type"] == "value_error":
            # our validators' own sentences, without pydantic's "Value error, " in front
            msg = str(item.get("ctx", {}).get("error", msg.removeprefix("Value error, ")))
        lines.append(f"{path or '<root>'}: {msg}")
    return "; ".join(lines)


def _map_memory_search(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """OpenClaw 2026.8+ keeps memory settings under `memory.search`: read them as
    `agents.defaults.memorySearch` (merged over it; `memory.search` wins), reporting problems at
    their own path (`memory.search.query.maxResult: unknown key (did you mean 'maxResults'?)`)."""
    memory = data.get("memory")
    if not isinstance(memory, Mapping) or "search" not in memory:
        return data
    search = memory["search"]
    if not isinstance(search, Mapping):
        raise ConfigError("invalid config: memory.search: must be a table/object")
    try:
        MemorySearchConfig.model_validate(search)
    except ValidationError as err:
        raise ConfigError(
            "invalid config: "
            + format_validation_error(err, root="memory.search", model=MemorySearchConfig)
        ) from None
    out = dict(data)
    out["memory"] = {k: v for k, v in memory.items() if k != "search"}
    agents = dict(out.get("agents") or {})
    defaults = dict(agents.get("defaults") or {})
    defaults["memorySearch"] = deep_merge(defaults.get("memorySearch") or {}, search)
    agents["defaults"] = defaults
    out["agents"] = agents
    return out


def validate_config(data: Mapping[str, Any], *, source: str = "config") -> MemorydConfig:
    data = _map_memory_search(data)
    try:
        return MemorydConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(
            f"invalid {source}: {format_validation_error(err, model=MemorydConfig)}"
        ) from None


# OpenClaw configs carry many unrelated keys (gateway, channels, …); take only the memory ones.
_OPENCLAW_AGENT_KEYS = ("id", "workspace", "workspaceAccess", "memorySearch", "compaction")
_OPENCLAW_DEFAULT_KEYS = (
    "workspace",
    "workspaceAccess",
    "memorySearch",
    "compaction",
    "bootstrapMaxChars",
    "bootstrapTotalMaxChars",
)


def _openclaw_subset(raw: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "memory" in raw:
        out["memory"] = raw["memory"]
    agents = raw.get("agents")
    if isinstance(agents, Mapping):
        sub: dict[str, Any] = {}
        defaults = agents.get("defaults")
        if isinstance(defaults, Mapping):
            sub["defaults"] = {k: defaults[k] for k in _OPENCLAW_DEFAULT_KEYS if k in defaults}
        entries = agents.get("list")
        if isinstance(entries, list):
            sub["list"] = [
                {k: e[k] for k in _OPENCLAW_AGENT_KEYS if k in e}
                for e in entries
                if isinstance(e, Mapping)
            ]
        out["agents"] = sub
    models = raw.get("models")
    if isinstance(models, Mapping) and isinstance(models.get("providers"), Mapping):
        out["models"] = {
            "providers": {
                name: {k: v for k, v in entry.items() if k in ("apiKey", "baseUrl", "headers")}
                for name, entry in models["providers"].items()
                if isinstance(entry, Mapping)
            }
        }
    return out


def _config_models() -> dict[str, type[BaseModel]]:
    """Every model a validated config can hold, by class name (what `config_cache` rebuilds)."""
    out: dict[str, type[BaseModel]] = {}
    pending: list[type[BaseModel]] = [_Model]
    while pending:
        cls = pending.pop()
        out[cls.__name__] = cls
        pending.extend(cls.__subclasses__())
    return out


def read_config_file(path: Path) -> MemorydConfig:
    """Read a memoryd TOML file, or an OpenClaw JSON/JSON5 file (memory keys only).

    A file whose exact bytes validated before comes from the validated-config cache instead
    (`memoryd.config_cache`): same models, no second validation.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror}") from None
    try:
        fingerprint = config_cache.code_fingerprint(__file__)
    except OSError:  # no source to fingerprint (a frozen build): validate every time
        return _parse_config_file(path, raw)
    where = path.absolute()
    cached = config_cache.load(where, raw, fingerprint, _config_models())
    if isinstance(cached, MemorydConfig):
        return cached
    config = _parse_config_file(path, raw)
    config_cache.store(where, raw, fingerprint, config, _CREDENTIAL_FIELDS)
    return config


#: Fields that may hold credentials: a config with any of them set is never cached.
_CREDENTIAL_FIELDS = frozenset({"api_key", "headers"})


def _parse_config_file(path: Path, raw: bytes) -> MemorydConfig:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"cannot read config file {path}: not UTF-8 ({err.reason})") from None
    if path.suffix.lower() in (".json", ".json5"):
        import json5

        try:
            raw = json5.loads(text)
        except ValueError as err:
            raise ConfigError(f"cannot parse {path}: {err}") from None
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{path}: top level must be an object")
        return validate_config(_openclaw_subset(raw), source=str(path))
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"cannot parse {path}: {err}") from None
    return validate_config(data, source=str(path))


def find_config_file(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """`--config`, then `MEMORYD_CONFIG`, then `<config dir>/config.toml` if present."""
    return paths.config_file(explicit)


def load_config(explicit: str | os.PathLike[str] | None = None) -> MemorydConfig:
    found = find_config_file(explicit)
    return read_config_file(found) if found else MemorydConfig()


def _looks_like_workspace(path: Path) -> bool:
    return any((path / name).is_file() for name in LONG_TERM_NAMES) or (path / MEMORY_DIR).is_dir()


def resolve_agent(
    config: MemorydConfig,
    agent_id: str | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> ResolvedAgent:
    """Effective settings for one agent: defaults ← agents.list entry ← CLI/env overrides.

    `env` is where `MEMORYD_WORKSPACE` is looked up (default: this process's environment;
    `serve` resolves a caller's identity with `{}`, since the caller sent its own).
    """
    agent_id = paths.validate_agent_id(paths.DEFAULT_AGENT_ID if agent_id is None else agent_id)
    entry = next((e for e in config.agents.entries if e.id == agent_id), None)
    if entry is None and config.agents.entries and agent_id != paths.DEFAULT_AGENT_ID:
        known = ", ".join(e.id for e in config.agents.entries)
        raise UnknownAgent(f"unknown agent {agent_id!r} (configured: {known})")
    defaults = config.agents.defaults

    search = defaults.memory_search
    if entry is not None and entry.memory_search:
        merged = deep_merge(
            defaults.memory_search.model_dump(exclude_unset=True, by_alias=True),
            entry.memory_search,
        )
        try:
            search = MemorySearchConfig.model_validate(merged)
        except ValidationError as err:
            idx = config.agents.entries.index(entry)
            raise ConfigError(
                "invalid config: "
                + format_validation_error(
                    err, root=f"agents.list.{idx}.memorySearch", model=MemorySearchConfig
                )
            ) from None
    compaction = defaults.compaction
    if entry is not None and entry.compaction:
        merged = deep_merge(
            defaults.compaction.model_dump(exclude_unset=True, by_alias=True), entry.compaction
        )
        try:
            compaction = CompactionConfig.model_validate(merged)
        except ValidationError as err:
            idx = config.agents.entries.index(entry)
            raise ConfigError(
                "invalid config: "
                + format_validation_error(err, root=f"agents.list.{idx}.compaction")
            ) from None

    environ = os.environ if env is None else env
    raw_ws: str | os.PathLike[str] | None = workspace or environ.get("MEMORYD_WORKSPACE")
    if not raw_ws:
        raw_ws = (entry.workspace if entry and entry.workspace else None) or defaults.workspace
    if raw_ws:
        ws = Path(raw_ws).expanduser()
        if not ws.is_absolute():
            ws = (cwd or Path.cwd()) / ws
        if not ws.is_dir():
            raise WorkspaceNotFound(f"workspace {ws} does not exist or is not a directory")
    else:
        here = cwd or Path.cwd()
        if not _looks_like_workspace(here):
            raise WorkspaceNotFound(
                f"no workspace: {here} has no MEMORY.md or memory/ folder. Pass --workspace DIR, set "
                "MEMORYD_WORKSPACE, or set agents.defaults.workspace in a config file (--config)."
            )
        ws = here
    access = (
        entry.workspace_access if entry and entry.workspace_access else None
    ) or defaults.workspace_access
    return ResolvedAgent(
        agent_id=agent_id,
        workspace=ws.resolve(),
        workspace_access=access,
        memory_search=search,
        compaction=compaction,
        memory=config.memory,
        models=config.models,
        bootstrap_max_chars=defaults.bootstrap_max_chars,
        bootstrap_total_max_chars=defaults.bootstrap_total_max_chars,
    )


def agent_ids(config: MemorydConfig) -> list[str]:
    """Configured agent ids (`main` when none are listed)."""
    return [e.id for e in config.agents.entries] or ["main"]
