"""Configuration: the settings, shaped like OpenClaw's keys, and one agent's view of them."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import parse_qsl, quote, urlsplit

from . import paths
from .config_validation import Bounds, Check, as_written, deep_merge, model, validate, value_class
from .core.layout import CURATED_ROOT_NAMES, MEMORY_DIR, MemoryRoot, default_roots, extra_root
from .errors import ConfigError, InvalidAgentId, UnknownAgent, WorkspaceNotFound

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


def _duration(value: str | int) -> str | int:
    parse_duration_ms(value)
    return value


@model
class BatchConfig:
    enabled: bool = False
    wait: bool = True
    concurrency: Annotated[int, Bounds(ge=1)] = 2
    poll_interval_ms: Annotated[int, Bounds(ge=1)] = 2000
    timeout_minutes: Annotated[float, Bounds(gt=0)] = 60


@model
class RemoteConfig:
    base_url: str | None = None
    #: Unset: the provider's entry in `models.providers`, then its environment variable.
    api_key: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    batch: BatchConfig = field(default_factory=BatchConfig)
    #: Asymmetric input types for OpenAI-compatible endpoints: {query, document}.
    input_type: dict[str, str] | None = None
    output_dimensionality: int | None = None


@model
class LocalConfig:
    model_path: str | None = None
    #: Threads that embed documents; unset: every core this process may use, at most 8.
    threads: Annotated[int, Bounds(ge=1, le=64)] | None = None

    removed_keys: ClassVar = {
        "modelCacheDir": "modelCacheDir is not supported: memoryd's local model ships inside "
        "its Python package and downloads nothing (remove the key)",
        "contextSize": "contextSize is not supported: memoryd's local model reads at most 512 "
        "tokens of a chunk, a limit of the model (remove the key)",
    }


@model
class VectorStoreConfig:
    #: False: keyword search only.
    enabled: bool = True
    extension_path: str | None = None


StoreDriver = Literal["sqlite", "postgres"]
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def check_store_url(url: str) -> str:
    """A libpq URL without a password (a config file gets copied and shown; the password comes
    from the environment); messages never repeat the URL."""
    if _ENV_REF.fullmatch(url):
        return url
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
    return url


def expand_store_url(url: str, environ: Mapping[str, str]) -> str:
    """`store.url` with its `${NAME}` references filled from the environment, percent-encoded
    (libpq decodes every part) unless the reference is the whole URL."""
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


@model
class StoreConfig:
    driver: StoreDriver = "sqlite"
    #: The SQLite file ({agentId} and {workspaceKey} filled in); unset: in the agent's state.
    path: str | None = None
    url: Annotated[str, Check(check_store_url)] | None = None
    vector: VectorStoreConfig = field(default_factory=VectorStoreConfig)

    removed_keys: ClassVar = {
        "fts": "store.fts.tokenizer is not supported: memoryd's keyword index always has both "
        "porter+unicode61 words and a trigram table for substrings (remove the key)"
    }


@model
class DailyNoteChunkingConfig:
    tokens: Annotated[int, Bounds(ge=16, le=8192)]
    overlap: Annotated[int, Bounds(ge=0)]

    def __post_init__(self) -> None:
        if self.overlap >= self.tokens:
            raise ValueError("chunking.dailyNotes.overlap must be smaller than its tokens")


@model
class ChunkingConfig:
    tokens: Annotated[int, Bounds(ge=16, le=8192)] = 400
    overlap: Annotated[int, Bounds(ge=0)] = 80
    #: Unset: daily notes (memory/YYYY-MM-DD*.md) are chunked like every other note.
    daily_notes: DailyNoteChunkingConfig | None = None

    def __post_init__(self) -> None:
        if self.overlap >= self.tokens:
            raise ValueError("chunking.overlap must be smaller than chunking.tokens")


@model
class MmrConfig:
    enabled: bool = False
    #: Written `lambda` (a Python keyword).
    lambda_: Annotated[float, Bounds(ge=0, le=1)] = 0.7


@model
class TemporalDecayConfig:
    enabled: bool = False
    half_life_days: Annotated[float, Bounds(gt=0)] = 30


Fusion = Literal["auto", "relative", "weighted", "rrf", "minmax", "zscore"]


@model
class HybridConfig:
    enabled: bool = True
    vector_weight: Annotated[float, Bounds(ge=0)] = 0.7
    text_weight: Annotated[float, Bounds(ge=0)] = 0.3
    candidate_multiplier: Annotated[int, Bounds(ge=1, le=50)] = 4
    fusion: Fusion = "auto"
    mmr: MmrConfig = field(default_factory=MmrConfig)
    temporal_decay: TemporalDecayConfig = field(default_factory=TemporalDecayConfig)

    def __post_init__(self) -> None:
        if self.vector_weight + self.text_weight <= 0:
            raise ValueError("vectorWeight and textWeight cannot both be 0")


RerankFormat = Literal["auto", "cohere", "voyage", "tei"]


def _http_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return url


@model
class RerankRemoteConfig:
    """A `POST /v1/rerank` endpoint (Cohere, Jina, llama.cpp, Voyage, Hugging Face TEI)."""

    base_url: Annotated[str, Check(_http_url)] | None = None
    #: Unset: `MEMORYD_RERANK_API_KEY` from the environment (never logged, shown or cached).
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    #: The wire shape; `auto` reads whichever of the shapes the server answers in.
    format: RerankFormat = "auto"


@model
class RerankConfig:
    """The optional stage that reorders what passed minScore (docs/configuration.md)."""

    provider: Literal["none", "remote", "qmd"] = "none"
    candidates: Annotated[int, Bounds(ge=1, le=100)] = 24
    timeout_ms: Annotated[int, Bounds(ge=1, le=60_000)] = 1500
    remote: RerankRemoteConfig = field(default_factory=RerankRemoteConfig)

    def __post_init__(self) -> None:
        if self.provider == "remote" and not self.remote.base_url:
            raise ValueError(
                'provider is "remote" but remote.baseUrl is not set '
                "(the rerank API, e.g. http://127.0.0.1:8012)"
            )


@model
class QueryConfig:
    max_results: Annotated[int, Bounds(ge=1, le=100)] = 6
    min_score: Annotated[float, Bounds(ge=0, le=1)] = 0.35
    max_injected_chars: Annotated[int, Bounds(ge=100)] = 4000
    hybrid: HybridConfig = field(default_factory=HybridConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)


@model
class CacheConfig:
    enabled: bool = True
    max_entries: Annotated[int, Bounds(ge=1)] = 50_000


@model
class SessionSyncConfig:
    delta_bytes: Annotated[int, Bounds(ge=0)] = 100_000
    delta_messages: Annotated[int, Bounds(ge=0)] = 50


@model
class SyncConfig:
    on_session_start: bool = True
    on_search: bool = True
    watch: bool = True
    watch_debounce_ms: Annotated[int, Bounds(ge=0)] = 1500
    interval_minutes: Annotated[float, Bounds(ge=0)] = 0
    search_wait_ms: Annotated[int, Bounds(ge=0)] = 2000
    #: One huge note must not become thousands of chunks to embed.
    max_file_bytes: Annotated[int, Bounds(ge=1)] = 4 * 1024 * 1024
    sessions: SessionSyncConfig = field(default_factory=SessionSyncConfig)


@model
class RedactConfig:
    #: Transcripts are always redacted; notes only when asked, since users write them on purpose.
    notes: bool = False


@model
class ExperimentalConfig:
    session_memory: bool = False


@model
class ExtraPathEntry:
    """An extra memory folder with its own glob (OpenClaw 2026.8's `{path, pattern}` entries)."""

    path: str
    pattern: str = "**/*.md"


ProviderName = Literal["auto", "local", "openai", "gemini", "voyage", "mistral", "ollama", "none"]
FallbackName = Literal["openai", "gemini", "voyage", "mistral", "ollama", "local", "none"]
SourceName = Literal["memory", "sessions"]


@model
class MemorySearchConfig:
    enabled: bool = True
    provider: ProviderName = "auto"
    model: str | None = None
    fallback: FallbackName = "none"
    remote: RemoteConfig = field(default_factory=RemoteConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    query: QueryConfig = field(default_factory=QueryConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)
    extra_paths: list[str | ExtraPathEntry] = field(default_factory=list)
    sources: list[SourceName] = field(default_factory=lambda: list[SourceName](["memory"]))
    experimental: ExperimentalConfig = field(default_factory=ExperimentalConfig)
    redact: RedactConfig = field(default_factory=RedactConfig)

    #: OpenClaw 2026.9 keys memoryd refuses, each with its reason (docs/openclaw.md).
    removed_keys: ClassVar = {
        "rememberAcrossConversations": "rememberAcrossConversations is not supported: "
        "transcripts are searched with sources = ['memory', 'sessions'] and "
        "experimental.sessionMemory = true (remove the key)",
        "multimodal": "multimodal is not supported: memoryd indexes Markdown text only "
        "(remove the key)",
        "inputType": "inputType is written remote.inputType = {query, document} in memoryd",
        "queryInputType": "queryInputType is written remote.inputType.query in memoryd",
        "documentInputType": "documentInputType is written remote.inputType.document in memoryd",
        "outputDimensionality": "outputDimensionality is written remote.outputDimensionality "
        "in memoryd",
        "embeddingTimeoutSeconds": "embeddingTimeoutSeconds is not supported: a search spends "
        "at most sync.searchWaitMs syncing and embedding (remove the key)",
        "qmd": "memory.search.qmd is not a memoryd key (OpenClaw 2026.8 retired it too): qmd "
        "collections are memory.qmd.paths",
    }


DEFAULT_FLUSH_SYSTEM_PROMPT = (
    "Pre-compaction memory flush turn. The session is near auto-compaction; capture durable memories "
    "to disk. You may reply, but usually NO_REPLY is correct."
)
DEFAULT_FLUSH_PROMPT = (
    "Pre-compaction memory flush. Store durable memories now (use memory/YYYY-MM-DD.md; create "
    "memory/ if needed). If nothing to store, reply with NO_REPLY."
)


@model
class MemoryFlushConfig:
    enabled: bool = True
    soft_threshold_tokens: Annotated[int, Bounds(ge=0)] = 4000
    system_prompt: str = DEFAULT_FLUSH_SYSTEM_PROMPT
    prompt: str = DEFAULT_FLUSH_PROMPT
    model: str | None = None


@model
class CompactionConfig:
    reserve_tokens_floor: Annotated[int, Bounds(ge=0)] = 20_000
    memory_flush: MemoryFlushConfig = field(default_factory=MemoryFlushConfig)


@model
class ScopeMatch:
    channel: str | None = None
    chat_type: Literal["direct", "group", "channel"] | None = None
    key_prefix: str | None = None
    raw_key_prefix: str | None = None


@model
class ScopeRule:
    action: Literal["allow", "deny"]
    match: ScopeMatch | None = None


@model
class ScopeConfig:
    """OpenClaw's `session.sendPolicy` schema, applied to who may search memory."""

    default: Literal["allow", "deny"] | None = None
    rules: list[ScopeRule] | None = None


@model
class QmdPathConfig:
    path: str
    name: str | None = None
    pattern: str = "**/*.md"


@model
class QmdSessionsConfig:
    enabled: bool = False
    export_dir: str | None = None
    retention_days: Annotated[int, Bounds(ge=1)] | None = None


@model
class QmdUpdateConfig:
    interval: Annotated[str | int, Check(_duration)] = "5m"
    debounce_ms: Annotated[int, Bounds(ge=0)] = 15_000
    on_boot: bool = True
    wait_for_boot_sync: bool = False
    embed_interval: Annotated[str | int, Check(_duration)] = "60m"
    command_timeout_ms: Annotated[int, Bounds(ge=1)] = 30_000
    update_timeout_ms: Annotated[int, Bounds(ge=1)] = 120_000
    embed_timeout_ms: Annotated[int, Bounds(ge=1)] = 120_000

    @property
    def interval_ms(self) -> int:
        return parse_duration_ms(self.interval)

    @property
    def embed_interval_ms(self) -> int:
        return parse_duration_ms(self.embed_interval)


@model
class QmdLimitsConfig:
    max_results: Annotated[int, Bounds(ge=1)] = 6
    max_snippet_chars: Annotated[int, Bounds(ge=1)] = 700
    max_injected_chars: Annotated[int, Bounds(ge=1)] = 4000
    timeout_ms: Annotated[int, Bounds(ge=1)] = 4000
    min_score: Annotated[float, Bounds(ge=0)] = 0.0


@model
class QmdModelsConfig:
    embed: str | None = None
    rerank: str | None = None
    generate: str | None = None


@model
class FailoverConfig:
    """When qmd's failures flip an agent to the built-in index and how it comes back."""

    failure_threshold: Annotated[int, Bounds(ge=1)] = 1
    cooldown_ms: Annotated[int, Bounds(ge=0)] = 15_000
    probe_max_interval_ms: Annotated[int, Bounds(ge=1)] = 300_000


@model
class QmdConfig:
    command: str = "qmd"
    search_mode: Literal["search", "vsearch", "query"] = "search"
    #: Off by default: without the reranker model a keyword search needs no model at all.
    rerank: bool = False
    include_default_memory: bool = True
    paths: list[QmdPathConfig] = field(default_factory=list)
    sessions: QmdSessionsConfig = field(default_factory=QmdSessionsConfig)
    update: QmdUpdateConfig = field(default_factory=QmdUpdateConfig)
    limits: QmdLimitsConfig = field(default_factory=QmdLimitsConfig)
    models: QmdModelsConfig = field(default_factory=QmdModelsConfig)
    #: Where OpenClaw keeps the scope rules (`memory.scope` wins).
    scope: ScopeConfig | None = None
    fallback: Literal["builtin", "none"] = "builtin"
    failover: FailoverConfig = field(default_factory=FailoverConfig)
    empty_results: Literal["empty", "builtin"] = "empty"


@model
class MemoryConfig:
    backend: Literal["builtin", "qmd"] = "builtin"
    citations: Literal["auto", "on", "off"] = "auto"
    scope: ScopeConfig | None = None
    qmd: QmdConfig = field(default_factory=QmdConfig)

    @property
    def effective_scope(self) -> ScopeConfig | None:
        """`memory.scope`, else OpenClaw's `memory.qmd.scope`; None means the shipped default."""
        return self.scope if self.scope is not None else self.qmd.scope


WorkspaceAccess = Literal["rw", "ro", "none"]


@model
class AgentDefaults:
    workspace: str | None = None
    workspace_access: WorkspaceAccess = "rw"
    bootstrap_max_chars: Annotated[int, Bounds(ge=1)] = 20_000
    bootstrap_total_max_chars: Annotated[int, Bounds(ge=1)] = 150_000
    memory_search: MemorySearchConfig = field(default_factory=MemorySearchConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)


def _valid_agent_id(value: str) -> str:
    try:
        return paths.validate_agent_id(value)
    except InvalidAgentId as err:
        raise ValueError(str(err)) from None


@model
class AgentEntry:
    id: Annotated[str, Check(_valid_agent_id)]
    workspace: str | None = None
    workspace_access: WorkspaceAccess | None = None
    #: This agent's settings: what the file wrote merged over `agents.defaults` (`validate_config`).
    memory_search: MemorySearchConfig | None = None
    compaction: CompactionConfig | None = None


@model
class AgentMemoryConfig:
    """An `agents.entries.<id>.memory` table: OpenClaw 2026.8+ keeps only `search` there."""

    search: MemorySearchConfig | None = None


@model
class KeyedAgentEntry:
    """An `agents.entries.<id>` table (OpenClaw 2026.8+), read as the `agents.list` entry `id`."""

    workspace: str | None = None
    workspace_access: WorkspaceAccess | None = None
    memory: AgentMemoryConfig | None = None
    compaction: CompactionConfig | None = None

    removed_keys: ClassVar = {
        "memorySearch": "memorySearch is OpenClaw's pre-2026.8 per-agent key: write it as "
        "agents.entries.<id>.memory.search"
    }


def _unique_ids(entries: list[AgentEntry]) -> list[AgentEntry]:
    seen: set[str] = set()
    for entry in entries:
        if entry.id in seen:
            raise ValueError(f"duplicate agent id {entry.id!r}")
        seen.add(entry.id)
    return entries


@model
class AgentsConfig:
    defaults: AgentDefaults = field(default_factory=AgentDefaults)
    list_: Annotated[list[AgentEntry], Check(_unique_ids)] = field(default_factory=list)


@model
class ProviderEntry:
    api_key: str | None = None
    base_url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@model
class ModelsConfig:
    providers: dict[str, ProviderEntry] = field(default_factory=dict)


@model
class MemorydConfig:
    """The whole config file."""

    memory: MemoryConfig = field(default_factory=MemoryConfig)
    agents: AgentsConfig = field(default_factory=AgentsConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)


@value_class
class ResolvedAgent:
    """One agent's effective settings after defaults, per-agent overrides and CLI overrides."""

    agent_id: str
    workspace: Path
    workspace_access: WorkspaceAccess
    memory_search: MemorySearchConfig
    compaction: CompactionConfig
    memory: MemoryConfig
    models: ModelsConfig
    bootstrap_max_chars: int
    bootstrap_total_max_chars: int

    @property
    def state(self) -> paths.AgentState:
        return paths.agent_state(self.agent_id, self.workspace)

    @property
    def index_path(self) -> Path:
        raw = self.memory_search.store.path
        if not raw:
            return self.state.index_db
        return paths.expand_store_path(raw, self.agent_id, self.workspace)

    @property
    def sessions_enabled(self) -> bool:
        """Transcripts are searched only with `experimental.sessionMemory` and "sessions" in sources."""
        ms = self.memory_search
        return bool(ms.experimental.session_memory) and "sessions" in ms.sources

    def extra_roots(self) -> list[MemoryRoot]:
        """One root per `extraPaths` entry, `~` and workspace-relative paths resolved."""
        out = []
        for entry in self.memory_search.extra_paths:
            raw, pattern = (entry, None) if isinstance(entry, str) else (entry.path, entry.pattern)
            # `join` keeps an absolute path as it is
            path = os.path.join(self.workspace, os.path.expanduser(raw))
            out.append(extra_root(os.path.normpath(path), pattern))
        return out

    def memory_roots(self) -> list[MemoryRoot]:
        """The default memory files plus `extraPaths`: what the built-in index reads and serves."""
        return default_roots(str(self.workspace)) + self.extra_roots()

    def index_settings(self) -> IndexSettings:
        """The built-in index's settings for this agent (`store.url` filled from the environment)."""
        ms = self.memory_search
        store = ms.store
        state = self.state
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
            workspace_key=state.key,
            roots=tuple(self.memory_roots()),
            db_path=self.index_path,
            own_db_folder=not store.path,
            sources=tuple(ms.sources),
            sessions_dir=state.sessions_dir if self.sessions_enabled else None,
            chunking=ms.chunking,
            query=ms.query,
            sync=ms.sync,
            cache=ms.cache,
            vector=store.vector,
            store_driver=store.driver,
            store_url=url,
            redact_notes=ms.redact.notes,
            state_dir=state.root,
            session_retention_days=self.memory.qmd.sessions.retention_days,
        )

    def qmd_settings(self) -> QmdSettings:
        """The qmd sidecar's settings for this agent (`memory.qmd.rerank = true` is read as
        `memorySearch.query.rerank.provider = "qmd"`)."""
        q = self.memory.qmd
        export = q.sessions.export_dir
        state = self.state
        rerank = self.memory_search.query.rerank
        if q.rerank and rerank.provider == "none":  # the stage's own keys win
            rerank = dataclasses.replace(rerank, provider="qmd")
        return QmdSettings(
            agent_id=self.agent_id,
            workspace=self.workspace,
            qmd=q,
            home=state.qmd_home,
            exports_dir=(
                paths.expand_store_path(export, self.agent_id, self.workspace)
                if export
                else state.qmd_exports
            ),
            extra_roots=tuple(self.extra_roots()),
            rerank=rerank,
            state_dir=state.root,
        )


@value_class
class IndexSettings:
    """What the built-in index needs to know, and nothing more (built by `ResolvedAgent`)."""

    agent_id: str
    workspace: Path
    #: With the agent id, the PostgreSQL store's tenant.
    workspace_key: str
    roots: tuple[MemoryRoot, ...]
    db_path: Path
    #: False for a folder the user chose (`store.path`): making a home or /tmp 0700 would hurt.
    own_db_folder: bool
    sources: tuple[str, ...]
    #: None unless transcripts are a search source.
    sessions_dir: Path | None
    chunking: ChunkingConfig
    query: QueryConfig
    sync: SyncConfig
    cache: CacheConfig
    vector: VectorStoreConfig
    store_driver: StoreDriver
    #: Out of repr: a `${NAME}` reference may have filled in a password.
    store_url: str | None = dataclasses.field(repr=False)
    redact_notes: bool
    #: Where the rerank stage records whether it degraded (None: nowhere).
    state_dir: Path | None
    #: `memory.qmd.sessions.retentionDays`: one rule for both engines, so a failover to the
    #: built-in index never brings back sessions that qmd's exports dropped.
    session_retention_days: int | None


@value_class
class QmdSettings:
    """What the qmd sidecar needs to know (built by `ResolvedAgent`)."""

    agent_id: str
    workspace: Path
    qmd: QmdConfig
    home: Path
    exports_dir: Path
    #: `memorySearch.extraPaths` become qmd collections too.
    extra_roots: tuple[MemoryRoot, ...]
    rerank: RerankConfig
    #: Where the rerank stage records whether it degraded (None: nowhere).
    state_dir: Path | None


def validate_config(data: Mapping[str, Any], *, source: str = "config") -> MemorydConfig:
    """A parsed TOML/JSON config validated, each agent's settings merged over the defaults first
    so that a problem is reported at its own path; ConfigError names each bad key."""
    data = _merge_overrides(_entries_as_list(_memory_search_as_defaults(data, source), source))
    return validate(MemorydConfig, data, what=source)


def _entries_as_list(data: Mapping[str, Any], what: str) -> Mapping[str, Any]:
    """OpenClaw 2026.8+'s keyed `agents.entries.<id>` read as `agents.list` entries (after those
    of `agents.list`), each checked at its own path first."""
    agents = data.get("agents")
    if not isinstance(agents, Mapping) or "entries" not in agents:
        return data
    keyed = agents["entries"]
    if not isinstance(keyed, Mapping):
        raise ConfigError(f"invalid {what}: agents.entries: must be a table/object")
    listed = agents.get("list", [])
    if not isinstance(listed, list):
        return data  # validation reports agents.list where it is
    added = []
    for agent_id, item in keyed.items():
        where = f"agents.entries.{agent_id}"
        try:
            paths.validate_agent_id(str(agent_id))
        except InvalidAgentId as err:
            raise ConfigError(f"invalid {what}: {where}: {err}") from None
        if not isinstance(item, Mapping):
            raise ConfigError(f"invalid {what}: {where}: must be a table/object")
        validate(KeyedAgentEntry, item, root=where, what=what)
        entry = as_written(KeyedAgentEntry, item)
        memory = entry.pop("memory", None) or {}
        if memory.get("search") is not None:
            entry["memorySearch"] = memory["search"]
        added.append({"id": agent_id, **entry})
    rest = {k: v for k, v in agents.items() if k != "entries"}
    return {**data, "agents": {**rest, "list": [*listed, *added]}}


def _memory_search_as_defaults(data: Mapping[str, Any], what: str) -> Mapping[str, Any]:
    """OpenClaw 2026.8+ keeps memory settings under `memory.search`: read them as
    `agents.defaults.memorySearch` (`memory.search` wins), problems reported at their own path."""
    memory = data.get("memory")
    if not isinstance(memory, Mapping) or "search" not in memory:
        return data
    search = memory["search"]
    if not isinstance(search, Mapping):
        raise ConfigError(f"invalid {what}: memory.search: must be a table/object")
    validate(MemorySearchConfig, search, root="memory.search", what=what)
    out = {**data, "memory": {k: v for k, v in memory.items() if k != "search"}}
    agents = data.get("agents", {})
    defaults = agents.get("defaults", {}) if isinstance(agents, Mapping) else None
    if not isinstance(agents, Mapping) or not isinstance(defaults, Mapping):
        return out  # validation reports the bad key where it is
    written = as_written(AgentDefaults, defaults)
    base = written.get("memorySearch")
    search = as_written(MemorySearchConfig, search)
    written["memorySearch"] = deep_merge(base, search) if isinstance(base, Mapping) else search
    out["agents"] = {**agents, "defaults": written}
    return out


def _merge_overrides(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """Each `agents.list` entry's memorySearch and compaction merged over the defaults' (keys in
    either case); `extraPaths` add the agent's own to the global ones, as in OpenClaw."""
    agents = data.get("agents")
    if not isinstance(agents, Mapping) or not isinstance(agents.get("list"), list):
        return data
    defaults = agents.get("defaults", {})
    if not isinstance(defaults, Mapping):
        return data  # validation reports it
    defaults = as_written(AgentDefaults, defaults)
    entries = []
    for entry in agents["list"]:
        if isinstance(entry, Mapping):
            entry = as_written(AgentEntry, entry)
            for key in ("memorySearch", "compaction"):
                base, override = defaults.get(key), entry.get(key)
                if isinstance(override, Mapping) and isinstance(base, Mapping):
                    entry[key] = deep_merge(base, override)
                    ours, theirs = base.get("extraPaths"), override.get("extraPaths")
                    if isinstance(ours, list) and isinstance(theirs, list):
                        entry[key]["extraPaths"] = [*ours, *(e for e in theirs if e not in ours)]
        entries.append(entry)
    return {**data, "agents": {**agents, "list": entries}}


def resolve_agent(
    config: MemorydConfig,
    agent_id: str | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> ResolvedAgent:
    """One agent's settings: defaults ← agents.list entry ← flags and `env` (default
    `os.environ`; `serve` passes `{}`, since a caller sends its own workspace)."""
    agent_id = paths.validate_agent_id(paths.DEFAULT_AGENT_ID if agent_id is None else agent_id)
    entry = next((e for e in config.agents.list_ if e.id == agent_id), None)
    if entry is None and config.agents.list_ and agent_id != paths.DEFAULT_AGENT_ID:
        known = ", ".join(e.id for e in config.agents.list_)
        raise UnknownAgent(f"unknown agent {agent_id!r} (configured: {known})")
    entry = entry or AgentEntry(id=agent_id)  # an unlisted agent has the defaults alone
    defaults = config.agents.defaults
    environ = os.environ if env is None else env
    raw_ws = workspace or environ.get("MEMORYD_WORKSPACE") or entry.workspace or defaults.workspace
    return ResolvedAgent(
        agent_id=agent_id,
        workspace=_workspace(raw_ws, cwd or Path.cwd()),
        workspace_access=entry.workspace_access or defaults.workspace_access,
        memory_search=entry.memory_search or defaults.memory_search,
        compaction=entry.compaction or defaults.compaction,
        memory=config.memory,
        models=config.models,
        bootstrap_max_chars=defaults.bootstrap_max_chars,
        bootstrap_total_max_chars=defaults.bootstrap_total_max_chars,
    )


def _workspace(raw: str | os.PathLike[str] | None, cwd: Path) -> Path:
    """The workspace named by flag, environment or config, else `cwd` if it looks like one."""
    if not raw:
        if not (
            any((cwd / name).is_file() for name in CURATED_ROOT_NAMES)
            or (cwd / MEMORY_DIR).is_dir()
        ):
            raise WorkspaceNotFound(
                f"no workspace: {cwd} has no MEMORY.md or memory/ folder. Pass --workspace DIR, set "
                "MEMORYD_WORKSPACE, or set agents.defaults.workspace in a config file (--config)."
            )
        return cwd.resolve()
    ws = cwd / Path(raw).expanduser()  # an absolute path replaces cwd
    if not ws.is_dir():
        raise WorkspaceNotFound(f"workspace {ws} does not exist or is not a directory")
    return ws.resolve()


def agent_ids(config: MemorydConfig) -> list[str]:
    """Configured agent ids (`main` when none are listed)."""
    return [e.id for e in config.agents.list_] or [paths.DEFAULT_AGENT_ID]
