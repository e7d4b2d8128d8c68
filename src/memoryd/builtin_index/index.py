"""`MemoryIndex`: the built-in hybrid index for one agent (sync, search, get, status, watch).

Sync has two phases. The text phase (files → chunks → FTS5) is fast and runs before a search on a
dirty index; the vector phase embeds pending chunks in batches, through the embedding cache, and
never blocks searches: BM25 answers while vectors catch up. A change of provider, model, endpoint
or chunking rebuilds the index in a scratch file published into the live one in one transaction.

The index is derived data: whatever happens to its file, the Markdown files rebuild it. A damaged
file is moved aside and refilled, a failed sync leaves the last complete index answering (and says
why in `status`), a read-only one keeps answering searches. `_store` holds the mechanics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final, TypeAlias, overload

if TYPE_CHECKING:  # numpy is imported where used: a keyword-only search never loads it
    import numpy as np

    from ..core.status import BuiltinStatus
    from ..core.transcripts import SessionDeltaTracker, TranscriptChunk

from ..background import Background
from ..config import IndexSettings
from ..core.chunking import ChunkingPlan, chunk_lines, chunking_plan, content_hash
from ..core.engine import EngineAnswer, IndexCheck, ProgressFn, SearchRequest
from ..core.layout import MemoryRoot, is_markdown
from ..core.ranking import (
    PATH_TOKEN,
    REFERENCE_QUERIES,
    Candidate,
    CorpusStats,
    RankParams,
    continue_snippet,
    extend_chunk,
    path_match_level,
    rank,
    select_snippet,
    uncovered_window,
)
from ..core.results import MAX_SNIPPET_CHARS, FileText, SearchResult
from ..core.text import (
    Script,
    binary_reason,
    fts_match_expression,
    query_terms,
    script_of,
    text_terms,
    trigram_terms,
)
from ..embeddings.base import DeadlineReached, EmbeddingProvider, ProviderSelection
from ..embeddings.shipped import reference_key, shipped_file, shipped_vectors
from ..errors import (
    BatchPending,
    IndexCorrupt,
    InvalidInput,
    MemorydError,
    MemoryReadFailed,
    ProviderUnavailable,
    StateError,
    WorkspaceMismatch,
)
from ..fsio import FileRead, open_private, private_dir
from ..memfiles import (
    MemoryFile,
    discover,
    discover_all,
    list_transcripts,
    read_memory,
    read_memory_file,
    transcript_display_path,
)
from ._store import ChunkRow, Recovery
from ._store import Store as SqliteStore

if TYPE_CHECKING:  # the PostgreSQL driver loads only when a config names it
    from ._pg_store import PgStore

log = logging.getLogger("memoryd.builtin_index")

#: The store of one (agent, workspace): a SQLite file (`store.driver = "sqlite"`) or a tenant of
#: a PostgreSQL database (`"postgres"`). Both have the methods and attributes this module uses.
Store: TypeAlias = "SqliteStore | PgStore"


def _newlines_in_prefix(path: Path, size: int) -> int:
    with open_private(path) as fh:  # transcripts are state: never read through a link
        return fh.read(size).count(b"\n")


def _count_newlines(path: Path) -> int:
    n = 0
    with open_private(path) as fh:
        while block := fh.read(1 << 16):
            n += block.count(b"\n")
    return n


def _transcript_chunks(path: Path, tokens: int, overlap: int) -> list[TranscriptChunk]:
    # loaded here: a memory-only index never parses a transcript (its regexes cost ~15 ms)
    from ..core.transcripts import chunk_transcript, parse_transcript_text

    with open_private(path) as fh:
        data = fh.read()
    messages, _malformed, _lines = parse_transcript_text(
        data.decode("utf-8", errors="replace"), sanitize=True
    )
    return chunk_transcript(messages, tokens=tokens, overlap=overlap)


EMBED_BATCH = 16
#: The first batch when progress is shown: small, so the rate and ETA appear within seconds.
FIRST_SHOWN_BATCH = 2
#: A search's embedding budget is spent only on a backlog it can make a real dent in: when the
#: pending chunks would take more than this many budgets (at the measured rate, else at
#: ASSUMED_SECONDS_PER_CHUNK), the search embeds none of them and answers at once by keywords;
#: its note says `memoryd index` or `serve` finishes them. A first search on a large workspace
#: used to spend its whole budget (model load included) embedding a few chunks of hundreds.
FUTILE_BACKLOG_BUDGETS = 4
#: The rate assumed before any chunk was embedded in this process (a local model on 2 cores
#: does 400-token chunks at 0.1–0.3 s; remote APIs faster per chunk).
ASSUMED_SECONDS_PER_CHUNK = 0.1
QUERY_CACHE_SIZE = 256
BACKGROUND_SAMPLE = 1024  # stored vectors a query is compared with to calibrate its cosines
STATS_TERM_CACHE = 4096  # per-term chunk counts kept between searches (cleared on any write)


@dataclass
class _StatsCache:
    """What `MemoryIndex._corpus_stats` keeps for one version of one index file."""

    store: Store
    version: tuple[int, int]
    chunks: int
    df: dict[str, int] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)
    sample: np.ndarray | None = None
    scripts: list[Script] = field(default_factory=list)
    #: The sample's (chunk id, content hash), read with it (SQLite): what a stored reference
    #: background computed from it is fingerprinted by.
    keys: list[tuple[int, str]] | None = None
    reference: dict[tuple[Script, Script], tuple[float, float]] | None = None


#: Chunks' worth of weight the pooled spread gets against a script pair's own: a pair measured
#: on a handful of chunks (one Chinese note in a small index) has a spread too narrow to trust.
SPREAD_PRIOR_CHUNKS = 2


def _reference_background(
    refs: dict[Script, np.ndarray], sample: np.ndarray, scripts: list[Script]
) -> dict[tuple[Script, Script], tuple[float, float]]:
    """Mean and deviation of reference-query cosines per (query script, chunk script).

    The mean is the pair's own (e5 scores any CJK chunk higher). For a chunk in another script
    than the query (where no keyword can vouch for it) the deviation is shrunk toward the query
    script's within-pair spread, pooled over the sample, when the pair rests on few chunks: with one
    Chinese chunk its eight reference cosines gave sd 0.021, so that note stood 3.7 sd out for an
    unrelated English question and outranked the note that answered it.
    """
    import numpy as np

    out: dict[tuple[Script, Script], tuple[float, float]] = {}
    script_arr = np.array(scripts)
    for query_script, vectors in refs.items():
        if vectors.shape[1] != sample.shape[1]:
            continue
        pairs: dict[Script, tuple[int, float, float]] = {}
        for chunk_script in set(scripts):
            sims = vectors @ sample[script_arr == chunk_script].T
            pairs[chunk_script] = (sims.shape[1], float(sims.mean()), float(sims.var()))
        # the spread within each pair, pooled (not the spread of all cosines: that would count
        # the shift between scripts' means as noise)
        total = sum(n for n, _, _ in pairs.values())
        pooled = sum(n * var for n, _, var in pairs.values()) / max(total, 1)
        k = SPREAD_PRIOR_CHUNKS
        for chunk_script, (n, mean, var) in pairs.items():
            if chunk_script != query_script:  # only the cosine vouches there: be sure of it
                var = (n * var + k * pooled) / (n + k)
            out[(query_script, chunk_script)] = (mean, var**0.5)
    return out


def _reference_fingerprint(
    provider: tuple[str, str, str], sample: Sequence[tuple[int, str]]
) -> str:
    """What a reference background was computed from: the provider, the reference queries, the
    sample's chunks (id and content hash: their vectors are that provider's of that text)."""
    h = hashlib.sha256(json.dumps([1, provider, REFERENCE_QUERIES, SPREAD_PRIOR_CHUNKS]).encode())
    h.update(json.dumps(sample).encode())
    return h.hexdigest()


def _reference_to_json(
    fingerprint: str, reference: dict[tuple[Script, Script], tuple[float, float]]
) -> str:
    pairs = [[q, c, mean, sd] for (q, c), (mean, sd) in sorted(reference.items())]
    return json.dumps({"fingerprint": fingerprint, "pairs": pairs})


def _reference_from_json(
    value: str | None, fingerprint: str
) -> dict[tuple[Script, Script], tuple[float, float]] | None:
    """The stored reference background if it was computed from `fingerprint`'s sample."""
    if value is None:
        return None
    try:
        held = json.loads(value)
        if held["fingerprint"] != fingerprint:
            return None
        return {(q, c): (float(mean), float(sd)) for q, c, mean, sd in held["pairs"]}
    except (ValueError, KeyError, TypeError):  # written by another version, or damaged
        return None


@dataclass
class SyncReport:
    files_scanned: int = 0
    files_changed: int = 0
    files_removed: int = 0
    chunks_written: int = 0
    vectors_embedded: int = 0
    vectors_from_cache: int = 0
    vectors_pending: int = 0
    reindexed: bool = False
    reindex_reason: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def wrote(self) -> bool:
        """Whether this sync changed the index (files, chunks or vectors)."""
        return bool(
            self.files_changed
            or self.files_removed
            or self.vectors_embedded
            or self.vectors_from_cache
            or self.reindexed
        )


#: Where the files a sync left out are recorded (see `LeftOut`).
LEFT_OUT_META_KEY: Final = "left_out"
#: When the last sync that changed the index finished (for other processes' status).
LAST_SYNC_META_KEY: Final = "last_sync_at"


@dataclass(frozen=True)
class LeftOut:
    """A memory file a sync did not index, why, and the file as it was then (size, times)."""

    path: str
    #: `read_failed` (with the OS reason), `binary`, `too_large`, or `refused`
    reason: str
    detail: str
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, mf: MemoryFile, reason: str, detail: str, size: int | None = None) -> LeftOut:
        size = mf.size if size is None else size
        return cls(mf.rel_path, reason, detail, size, mf.mtime_ns, mf.ctime_ns)

    def same_file(self, mf: MemoryFile) -> bool:
        """Whether `mf` is still the file that was left out (the next sync skips it again):
        the same size and times, the change time included (a chmod makes it readable)."""
        return (self.size, self.mtime_ns, self.ctime_ns) == (mf.size, mf.mtime_ns, mf.ctime_ns)


def _left_out_to_json(left_out: dict[str, LeftOut]) -> str:
    return json.dumps(
        {
            p: [e.reason, e.detail, e.size, e.mtime_ns, e.ctime_ns]
            for p, e in sorted(left_out.items())
        }
    )


def _left_out_from_meta(meta: dict[str, str]) -> dict[str, LeftOut]:
    """The files the last sync left out (none for an index written before they were kept)."""
    try:
        raw = json.loads(meta.get(LEFT_OUT_META_KEY) or "{}")
        return {
            p: LeftOut(p, str(r), str(d), int(size), int(mtime), int(ctime))
            for p, (r, d, size, mtime, ctime) in raw.items()
        }
    except (ValueError, TypeError, AttributeError):
        return {}


#: How many of the best hits also return the lines after their window (see `search`).
CONTINUE_BEST_HIT = 1
#: How many of the next chunks of its file a continuation may reach into (chunks shorter than
#: a snippet: the best window is the whole chunk, the lines after it are in the next ones).
FOLLOWING_CHUNKS = 2
#: Hits ranked past maxResults, to take the place of results whose lines are already shown.
SPARE_RESULTS = 4
#: Where the reference background (`_reference_background`) is kept between processes, with
#: the fingerprint of what it was computed from (`_reference_fingerprint`).
REFERENCE_META_KEY = "reference_background"
#: If the query is still embedding after that, the best keyword hits' snippets are chosen
#: while it does (at most this many, checking between each): a result among them needs no
#: snippet work once the vector is in. 0 turns it off (bench_builtin_index.py compares).
SPECULATIVE_SNIPPETS = 8


@dataclass(frozen=True, slots=True)
class _PathLookup:
    """The indexed paths (in store order) by lowercased file name and stem."""

    paths: list[str]
    by_name: dict[str, list[int]]
    by_stem: dict[str, list[int]]
    longest: int  # the longest name: no token prefix beyond it can name a file


@dataclass(slots=True)
class _KeywordSide:
    """The keyword side of a hybrid search, found while its query embedded."""

    version: tuple[int, int]
    hits: dict[int, Candidate]
    path_hits: list[int]
    terms: tuple[str, ...]
    rows: dict[int, tuple[ChunkRow, frozenset[str]]]  # row, the query terms it holds
    snippets: dict[int, tuple[str, int, int]]


class MemoryIndex:
    """The built-in index of one (agent, workspace): a `MemoryEngine`.

    `one_off`: this process runs one command and exits; a search of a SQLite index then keeps
    numpy out (`_lean`) and stores the reference background it computed for the next one.
    """

    name: Final = "builtin"

    def __init__(
        self,
        settings: IndexSettings,
        selection: ProviderSelection,
        *,
        path: Path | None = None,
        one_off: bool = False,
    ) -> None:
        self.settings = settings
        self.cfg = settings
        self.path = path or settings.db_path
        self.selection = selection
        self.provider: EmbeddingProvider | None = selection.provider
        self.fallback_reason: str | None = None
        self.fallback_since: float | None = None
        self.unavailable: str | None = None
        vec = self.cfg.vector
        self._vector_enabled = vec.enabled
        self._extension_path = vec.extension_path
        self.one_off = one_off
        self.dirty = True
        self._sync_lock = threading.Lock()
        self._last_sync_at: float | None = None
        self.last_error: str | None = None
        self._background: Background | None = None
        self._session_tracker: SessionDeltaTracker | None = None
        # seconds per embedded chunk, per provider, kept across syncs (sizes budgeted batches)
        self._embed_rates: dict[tuple[str, str, str], float] = {}
        self._query_cache: OrderedDict[tuple[str, str, str, str], np.ndarray] = OrderedDict()
        self._paths_cache: tuple[Store, tuple[int, int], _PathLookup] | None = None
        self._session_baselines: set[str] = set()
        # set before the store opens: opening may already replace a damaged file
        self.store: Store = self._open_store()
        self._bind_workspace(self.store)

    def _sessions(self) -> SessionDeltaTracker:
        """How much each transcript grew since its last sync (made on the first transcript seen)."""
        if self._session_tracker is None:
            from ..core.transcripts import SessionDeltaTracker

            self._session_tracker = SessionDeltaTracker(
                delta_bytes=self.cfg.sync.sessions.delta_bytes,
                delta_messages=self.cfg.sync.sessions.delta_messages,
            )
        return self._session_tracker

    def _open_store(self) -> Store:
        """The store `store.driver` names: a SQLite file at `self.path`, or this agent's tenant
        (agent id + workspace key, as the state folders are keyed) of the PostgreSQL database."""
        s = self.settings
        if s.store_driver == "postgres":
            assert s.store_url is not None  # ResolvedAgent.index_settings() requires it
            from ._pg_store import PgStore

            return PgStore(
                s.store_url,
                agent_id=s.agent_id,
                workspace=s.workspace_key,
                vector_enabled=s.vector.enabled,
            )
        return SqliteStore(
            self.path,
            vector_enabled=s.vector.enabled,
            extension_path=s.vector.extension_path,
            on_recovered=self._store_recovered,
            own_folder=s.own_db_folder,
        )

    @property
    def location(self) -> str:
        """Where the index lives, for status and messages: the file, or the database (its
        host, port, name and user: never the password) and the tenant's agent."""
        if self.settings.store_driver == "postgres" and self.settings.store_url is not None:
            from ._pg_store import describe_url

            return (
                f"postgres {describe_url(self.settings.store_url)} agent={self.settings.agent_id}"
            )
        return str(self.path)

    # ------------------------------------------------------------------ identity of the index

    def _bind_workspace(self, store: Store) -> None:
        """Record which workspace this index belongs to; refuse one built for another.

        An index is never re-synced to a different workspace (that silently mixed two users'
        memory): a user pointing `store.path` at one file for two workspaces gets this error.
        A read-only index is checked but not written.
        """
        mine = str(self.settings.workspace)
        meta = store.meta()
        recorded = meta.get("workspace")
        if recorded is None:
            foreign = [
                p for p in store.abs_paths("memory") if not _inside_any(p, self.settings.roots)
            ]
            if foreign:
                recorded = os.path.dirname(foreign[0])
            else:
                if store.read_only is None:
                    store.set_meta({"workspace": mine, "agentId": self.settings.agent_id})
                return
        if recorded != mine:
            raise WorkspaceMismatch(
                f"index {self.path} was built for workspace {recorded}, not {mine}; give each "
                "workspace its own store.path (e.g. with {workspaceKey}) or remove that file"
            )

    def _store_recovered(self, rec: Recovery, refill_now: bool) -> bool:
        """The store holds a fresh file in place of a damaged one: refill it from the Markdown.

        Inside a sync (or while the store is still opening) the sync does it; otherwise (a
        search hit the damage) the text and transcripts are indexed right here, so the retry
        the error asks for finds them. Vectors follow at the next sync.
        """
        self.dirty = True
        self._paths_cache = None
        self._session_baselines.clear()
        if not refill_now or self._sync_lock.locked() or "store" not in self.__dict__:
            return False
        try:
            self._bind_workspace(self.store)
            report = SyncReport()
            self._text_phase(self.store, report, None)
            self._sessions_phase(self.store, report, True)
        except MemorydError as err:
            log.warning("could not rebuild %s after moving it aside: %s", self.path, err)
            return False
        return True

    @property
    def chunking(self) -> ChunkingPlan:
        """Each memory file's chunk size: `chunking.tokens/overlap`, and `chunking.dailyNotes`
        for the daily notes when it is set."""
        c = self.cfg.chunking
        d = c.daily_notes
        return chunking_plan(c.tokens, c.overlap, (d.tokens, d.overlap) if d else None)

    def signature(self) -> dict[str, Any]:
        p = self.provider
        sig: dict[str, Any] = {
            "provider": p.id if p else "none",
            "model": p.model if p else "",
            "fingerprint": p.fingerprint() if p else "",
            "chunkTokens": self.cfg.chunking.tokens,
            "chunkOverlap": self.cfg.chunking.overlap,
        }
        # only when daily notes are chunked apart: other indexes keep the signature they had
        if (daily := self.chunking.fingerprint()) is not None:
            sig["chunkDailyNotes"] = daily
        if self.settings.redact_notes:  # likewise: only indexes that redact notes carry it
            sig["redactNotes"] = True
        return sig

    def _stored_signature(self) -> dict[str, Any] | None:
        raw = self.store.meta().get("signature")
        return json.loads(raw) if raw else None

    def reindex_reason(self) -> str | None:
        """Why the stored index no longer matches the configuration (None when it does)."""
        stored = self._stored_signature()
        if stored is None:
            return None
        current = self.signature()
        changed = [k for k in current if stored.get(k) != current[k]]
        if stored.get("redactNotes") and "redactNotes" not in current:
            current = {**current, "redactNotes": False}  # turned off: store the notes as written
            changed.append("redactNotes")
        if not changed:
            return None
        return "changed " + ", ".join(f"{k} ({stored.get(k)!r} → {current[k]!r})" for k in changed)

    def prefetch_query(self, query: str) -> None:
        """Let the provider start embedding `query` while the caller syncs and searches keywords.

        The search path calls this first (`AgentBackend.search`): the local model then embeds
        on another core while the index catches up and `search` runs its keyword side.
        Nothing happens without a usable provider or when the query's vector is cached; an
        unused prefetch is simply dropped.
        """
        query = query.strip()
        provider = self.provider
        if provider is None or self.unavailable or not query:
            return
        if (*self._provider_key(), query) in self._query_cache:
            return
        provider.prefetch_query(query)

    def _vectors_usable(self) -> bool:
        return (
            self.provider is not None
            and self.store.vector.available
            and self.reindex_reason() is None
        )

    # ------------------------------------------------------------------ sync

    def sync(
        self,
        *,
        force: bool = False,
        embed: bool = True,
        embed_budget_s: float | None = None,
        progress: ProgressFn | None = None,
        allow_reindex: bool = True,
        sessions: bool = True,
        lock_wait_s: float | None = None,
    ) -> SyncReport:
        """Bring the index up to date with the files; see the module docstring for the phases.

        `allow_reindex=False` (a search's pre-sync) skips the sync when a full rebuild is due,
        waits at most `sync.searchWaitMs` for another process's write lock, and never raises
        for the state: a read-only, full or busy index is recorded in `last_error` and the
        search answers from what is committed. A damaged file found on the way is moved aside
        and the index rebuilt from the Markdown files within this call. With `lock_wait_s`, a
        sync of another thread is waited for that long at most (then nothing is done), and
        the wait counts against `embed_budget_s`.
        """
        kw: dict[str, Any] = {
            "embed": embed,
            "progress": progress,
            "allow_reindex": allow_reindex,
            "sessions": sessions,
        }
        asked = time.monotonic()
        if not self._sync_lock.acquire(timeout=-1 if lock_wait_s is None else lock_wait_s):
            return SyncReport()  # the other sync's answer will do: searches read what it commits
        try:
            if embed_budget_s is not None:
                embed_budget_s = max(0.0, embed_budget_s - (time.monotonic() - asked))
            kw["embed_budget_s"] = embed_budget_s
            started = time.perf_counter()
            seen_recoveries = len(self.store.recovered)
            try:
                try:
                    report = self._sync_locked(force=force, **kw)
                except IndexCorrupt:
                    if len(self.store.recovered) == seen_recoveries:
                        raise
                    # the damaged file is aside and a fresh one in place: fill it now
                    self._bind_workspace(self.store)
                    report = self._sync_locked(force=False, **kw)
            except StateError as err:
                self._note_sync_failure(err)
                if not allow_reindex:
                    log.warning("searching without syncing first: %s", err)
                    return SyncReport()
                raise
            self._note_sync_success()
            report.seconds = time.perf_counter() - started
            self._last_sync_at = time.time()
            if report.wrote():
                # for the status of other processes; a sync that wrote nothing writes no time
                with contextlib.suppress(MemorydError):
                    if self.store.read_only is None:
                        self.store.set_meta({LAST_SYNC_META_KEY: str(self._last_sync_at)})
            return report
        finally:
            self._sync_lock.release()

    def catch_up(self, budget_s: float) -> None:
        """What a search does first: sync, embedding pending chunks for at most `budget_s`.

        While another thread's sync holds the index (the background work of `serve`, MCP or an
        open `MemoryService`), the search waits for it only when the chunks it is embedding
        could be done within FUTILE_BACKLOG_BUDGETS budgets; behind a long backlog it answers
        at once from what is embedded. Failures are the sync's (a `StateError` raises).
        """
        vectors = self.provider is not None and self.store.vector.available
        if not self.dirty and not (vectors and self.store.pending_count()):
            return  # nothing changed, nothing waits: the search needs no write
        if self._sync_lock.locked() and not self._backlog_fits(budget_s):
            return
        self.sync(embed_budget_s=budget_s, lock_wait_s=budget_s)

    def _backlog_fits(self, budget_s: float) -> bool:
        """Whether the pending chunks could be embedded within FUTILE_BACKLOG_BUDGETS budgets
        at the measured rate (the vector phase does not start a larger backlog under a budget)."""
        if self.provider is None or not self.store.vector.available:
            return True  # a text-only sync: quick
        rate = self._embed_rates.get(self._provider_key(), ASSUMED_SECONDS_PER_CHUNK)
        return self.store.pending_count() * rate <= FUTILE_BACKLOG_BUDGETS * budget_s

    def _sync_locked(
        self,
        *,
        force: bool,
        embed: bool,
        embed_budget_s: float | None,
        progress: ProgressFn | None,
        allow_reindex: bool,
        sessions: bool,
    ) -> SyncReport:
        if force:
            # a rebuild replaces every page anyway; a structurally damaged file is kept aside
            problem = self.store.verify()
            if problem is not None:
                self.store.recover(problem)
                self._bind_workspace(self.store)
        reason = "forced" if force else self.reindex_reason()
        if reason is not None and not allow_reindex:
            return SyncReport(reindex_reason=reason)
        if reason is not None:
            report = self._reindex(
                reason, embed=embed, embed_budget_s=embed_budget_s, progress=progress
            )
        else:
            report = SyncReport()
            wait_ms = None if allow_reindex else self.cfg.sync.search_wait_ms
            self.store.guard_signature = self.signature()
            self._text_phase(self.store, report, progress, wait_ms=wait_ms)
            self.dirty = False
            if sessions:
                self._sessions_phase(self.store, report, False, wait_ms=wait_ms)
            if embed:
                self._vector_phase(self.store, report, embed_budget_s, progress)
        report.vectors_pending = self.store.counts()["pending_vectors"] if self.provider else 0
        if embed and (
            report.files_changed
            or report.files_removed
            or report.vectors_embedded
            or report.vectors_from_cache
        ):
            self._store_reference(self.store)
        return report

    def _note_sync_failure(self, err: MemorydError) -> None:
        """Remember why the last sync failed, here and in the index (so every process's status
        shows it), best effort: on a full disk even that small write may be refused."""
        self.last_error = str(err)
        with contextlib.suppress(MemorydError):
            if self.store.read_only is None:
                self.store.set_meta(
                    {"last_sync_error": json.dumps({"message": str(err), "at": time.time()})}
                )

    def _note_sync_success(self) -> None:
        self.last_error = None
        with contextlib.suppress(MemorydError):
            if self.store.read_only is None and "last_sync_error" in self.store.meta():
                self.store.delete_meta("last_sync_error")

    def check(self) -> IndexCheck:
        """Verify the index file (`PRAGMA quick_check`, the FTS5 integrity checks, chunk counts).

        A damaged file is moved aside (`<name>.corrupt-<time>`, never deleted) and the index
        rebuilt from the Markdown files before this returns; vectors follow at the next sync.
        `status --deep` calls this. Raises `IndexCorrupt` when a damaged index is read-only.
        """
        started = time.perf_counter()
        with self._sync_lock:
            store = self.store
            problem = store.verify(deep=True)
            if problem is None:
                return IndexCheck(ok=True, seconds=time.perf_counter() - started)
            if store.read_only is not None:
                raise IndexCorrupt(
                    f"index {self.path} is damaged ({problem}) and cannot be replaced: it is "
                    f"read-only ({store.read_only})"
                )
            rec, _ = store.recover(problem)
            self._bind_workspace(store)
            self._sync_locked(
                force=False,
                embed=False,
                embed_budget_s=None,
                progress=None,
                allow_reindex=True,
                sessions=True,
            )
        return IndexCheck(
            ok=False,
            problem=problem,
            moved_to=str(rec.moved_to) if rec.moved_to else None,
            rebuilt=True,
            seconds=time.perf_counter() - started,
        )

    def _discover(self) -> list[MemoryFile]:
        return discover(self.settings.roots, self.settings.workspace)

    def _text_phase(
        self,
        store: Store,
        report: SyncReport,
        progress: ProgressFn | None,
        *,
        wait_ms: int | None = None,
    ) -> None:
        """Index new and changed memory files, drop removed ones: one transaction, so a failure
        (a full disk, a kill) leaves the index exactly as it was and readers never see half.

        A file that cannot be indexed (unreadable, binary, larger than `sync.maxFileBytes`) is
        left out and recorded with its reason (`LeftOut`), so status names it and it counts
        as changed again only when its size, modification or change time does."""
        found = discover_all(self.settings.roots, self.settings.workspace)
        files = found.files
        report.files_scanned = len(files)
        skipped = json.dumps(found.skipped, sort_keys=True)
        if not self._text_changed(store, files, skipped):
            return  # nothing to write: a read-only index syncs fine
        with store.transaction(wait_ms=wait_ms, doing="index the memory files"):
            meta = store.meta()
            if not store.signature_matches():
                log.info("index %s was rebuilt elsewhere with other settings", self.path)
                return
            known = store.files()
            undecodable: set[str] = set(json.loads(meta.get("undecodable") or "[]"))
            was_left_out = _left_out_from_meta(meta)
            left_out: dict[str, LeftOut] = {}
            seen: set[str] = set()
            plan = self.chunking
            for i, mf in enumerate(files, 1):
                prev = known.get(mf.rel_path)
                if prev is not None and prev[1] == mf.mtime_ns / 1e9 and prev[2] == mf.size:
                    seen.add(mf.rel_path)
                    continue
                before = was_left_out.get(mf.rel_path)
                if before is not None and before.same_file(mf):
                    left_out[mf.rel_path] = before
                    continue
                got, why = self._read_for_index(mf)
                if why is not None:
                    log.warning("not indexing %s: %s (%s)", mf.rel_path, why.reason, why.detail)
                    left_out[mf.rel_path] = why
                    continue
                if got is None:  # removed since discovery
                    continue
                seen.add(mf.rel_path)
                try:
                    text = got.data.decode("utf-8")
                    undecodable.discard(mf.rel_path)
                except UnicodeDecodeError:
                    text = got.data.decode("utf-8", errors="replace")
                    undecodable.add(mf.rel_path)
                mtime = got.mtime_ns / 1e9
                file_hash = content_hash(text)
                if prev is not None and prev[0] == file_hash:
                    store.touch_file(mf.rel_path, mtime, got.size)
                    continue
                size = plan.for_file(mf.rel_path)
                chunks = chunk_lines(text, tokens=size.tokens, overlap=size.overlap)
                if self.settings.redact_notes:
                    # imported here: a search that redacts nothing never loads the rules
                    from ..core.redact import redact_secrets

                    chunks = [dataclasses.replace(c, text=redact_secrets(c.text)) for c in chunks]
                store.replace_file(
                    mf.rel_path,
                    str(mf.abs_path),
                    mf.source,
                    file_hash,
                    mtime,
                    got.size,
                    [(c.start_line, c.end_line, c.hash, c.text, c.tokens) for c in chunks],
                )
                report.files_changed += 1
                report.chunks_written += len(chunks)
                if progress:
                    progress("files", i, len(files))
            undecodable &= seen
            wanted = {
                "undecodable": json.dumps(sorted(undecodable)),
                "skipped": skipped,
                LEFT_OUT_META_KEY: _left_out_to_json(left_out),
            }
            if meta.get("signature") is None:
                wanted["signature"] = json.dumps(self.signature())
            if changed := {k: v for k, v in wanted.items() if meta.get(k) != v}:
                store.set_meta(changed)
            for gone in set(known) - seen:
                if known[gone][3] == "memory":
                    store.remove_file(gone)
                    report.files_removed += 1

    def _read_for_index(self, mf: MemoryFile) -> tuple[FileRead | None, LeftOut | None]:
        """The file's bytes to index, or why it is left out (None, None: it vanished)."""
        limit = self.cfg.sync.max_file_bytes

        def too_large(size: int) -> LeftOut:
            return LeftOut.of(
                mf, "too_large", f"{size:,} bytes, over sync.maxFileBytes ({limit:,})", size
            )

        if mf.size > limit:
            return None, too_large(mf.size)
        try:
            got = read_memory(mf, self.settings.workspace, max_bytes=limit)
        except MemoryReadFailed as err:
            return None, LeftOut.of(mf, "read_failed", err.reason)
        except MemorydError as err:  # refused now (replaced by a symlink since discovery)
            return None, LeftOut.of(mf, "refused", str(err))
        if got is None:
            return None, None
        if got.truncated:  # grew past the limit since discovery
            return None, too_large(max(got.size, limit + 1))
        binary = binary_reason(got.data)
        if binary is not None:
            return None, LeftOut.of(mf, "binary", binary)
        return got, None

    def _changed_files(
        self, store: Store, files: Sequence[MemoryFile], meta: dict[str, str]
    ) -> int:
        """How many memory files were added, changed or removed since the last sync (a stat
        pass): a file left out counts only when it changed since it was left out."""
        known = {p: v for p, v in store.files().items() if v[3] == "memory"}
        left_out = _left_out_from_meta(meta)
        current = {mf.rel_path for mf in files}
        changed = 0
        for mf in files:
            prev = known.get(mf.rel_path)
            if prev is not None and prev[1] == mf.mtime_ns / 1e9 and prev[2] == mf.size:
                continue
            was = left_out.get(mf.rel_path)
            if prev is None and was is not None and was.same_file(mf):
                continue
            changed += 1
        changed += sum(1 for rel in known if rel not in current)
        return changed + sum(1 for rel in left_out if rel not in current)

    def _text_changed(self, store: Store, files: Sequence[MemoryFile], skipped: str) -> bool:
        """Whether the text phase has anything to write (a stat pass over the discovered files)."""
        meta = store.meta()
        if meta.get("signature") is None or meta.get("skipped") != skipped:
            return True
        return self._changed_files(store, files, meta) > 0

    def _sessions_phase(
        self, store: Store, report: SyncReport, force: bool, *, wait_ms: int | None = None
    ) -> None:
        """Index the agent's transcripts once enough new data accumulated (sync.sessions deltas),
        in one transaction like the text phase."""
        if self.settings.sessions_dir is None:
            return
        known = {p: v for p, v in store.files().items() if v[3] == "sessions"}
        seen: set[str] = set()
        due: list[tuple[Path, str, os.stat_result, int]] = []
        for path in list_transcripts(self.settings.sessions_dir):
            rel = transcript_display_path(path)
            seen.add(rel)
            try:
                st = path.stat()
            except OSError:
                continue
            prev = known.get(rel)
            if prev is not None and prev[1] == st.st_mtime and prev[2] == st.st_size:
                continue
            try:
                lines = _count_newlines(path)
            except OSError as err:  # gone, or a link swapped in after the listing
                log.warning("cannot read transcript %s: %s", path, err)
                continue
            if prev is not None and not force:
                if rel not in self._session_baselines:
                    self._session_baselines.add(rel)
                    self._sessions().mark_synced(rel, prev[2], _newlines_in_prefix(path, prev[2]))
                if not self._sessions().observe(rel, st.st_size, lines).due:
                    continue
            due.append((path, rel, st, lines))
        gone = set(known) - seen
        if not due and not gone:
            return
        chunking = self.cfg.chunking
        synced: list[tuple[str, int, int]] = []
        with store.transaction(wait_ms=wait_ms, doing="index the session transcripts"):
            if not store.signature_matches():
                return
            for path, rel, st, lines in due:
                try:
                    chunks = _transcript_chunks(path, chunking.tokens, chunking.overlap)
                    with open_private(path) as fh:
                        data = fh.read()
                except OSError as err:
                    log.warning("cannot read transcript %s: %s", path, err)
                    continue
                store.replace_file(
                    rel,
                    str(path),
                    "sessions",
                    content_hash(data.decode("utf-8", errors="replace")),
                    st.st_mtime,
                    st.st_size,
                    [(c.start_line, c.end_line, c.hash, c.text, c.tokens) for c in chunks],
                )
                synced.append((rel, st.st_size, lines))
                report.files_changed += 1
                report.chunks_written += len(chunks)
            for rel in gone:
                store.remove_file(rel)
                report.files_removed += 1
        # only what was committed counts as synced
        for rel, size, lines in synced:
            self._sessions().mark_synced(rel, size, lines)
            self._session_baselines.add(rel)
        for rel in gone:
            self._sessions().forget(rel)

    def _vector_phase(
        self, store: Store, report: SyncReport, budget_s: float | None, progress: ProgressFn | None
    ) -> None:
        """Embed pending chunks in batches; with `budget_s`, stop before the deadline.

        The deadline holds *within* a batch too: under a budget a batch only takes as many
        chunks as the measured embedding rate says fit in the time left (the first batch is
        one chunk, to measure it), so a search pays at most `searchWaitMs`, not a whole batch.
        A backlog beyond FUTILE_BACKLOG_BUDGETS budgets is not started at all.
        """
        if self.provider is None or not store.vector.available:
            return
        deadline = None if budget_s is None else time.monotonic() + budget_s
        total = store.counts()["pending_vectors"]
        done = 0
        key = self._provider_key()
        max_entries = self.cfg.cache.max_entries
        use_cache = self.cfg.cache.enabled
        skip: set[int] = set()
        rates = self._embed_rates
        fill = 0.7  # share of the time left a budgeted batch is sized to take
        if budget_s is not None:
            per_chunk = rates.get(key, ASSUMED_SECONDS_PER_CHUNK)
            if total * per_chunk > FUTILE_BACKLOG_BUDGETS * budget_s:
                return
        if progress and total:
            progress("vectors", 0, total)
        stopping = self._background.stopping if self._background is not None else None
        while not (stopping is not None and stopping.is_set()):  # closing: the rest can wait
            # shown progress gets a rate (and an ETA) from a first small batch, not after 16
            size = EMBED_BATCH if done or not progress else FIRST_SHOWN_BATCH
            if deadline is not None:
                left = deadline - time.monotonic()
                rate = rates.get(key)
                if rate is None:
                    size = 1 if left > 0 else 0
                else:
                    size = min(EMBED_BATCH, int(left * fill / rate))
                if size <= 0:
                    break
            batch = [row for row in store.pending_chunks(size + len(skip)) if row[0] not in skip][
                :size
            ]
            if not batch:
                break
            hashes = [h for _, h, _ in batch]
            cached = store.cache_get(key, hashes) if use_cache else {}
            todo = [(cid, h, text) for cid, h, text in batch if h not in cached]
            vectors: dict[int, np.ndarray] = {cid: cached[h] for cid, h, _ in batch if h in cached}
            report.vectors_from_cache += len(vectors)
            if todo:
                # a first call that loads the model would make the rate look several times
                # slower and stop a search's budget after one chunk
                measures = self.provider.documents_ready
                started = time.monotonic()
                try:
                    # a hard stop at the deadline too: the rate is an estimate, and the first
                    # chunk's cost is unknown
                    matrix = self.provider.embed_documents(
                        [t for _, _, t in todo], deadline=deadline
                    )
                except DeadlineReached:
                    spent = max((deadline or started) - started, 0.0)
                    rates[key] = max(rates.get(key, 0.0), spent / len(todo))
                    break
                except BatchPending:
                    # remote.batch.wait = false: the job keeps running; the next sync collects it
                    return
                except Exception as err:
                    self._on_embed_failure(err)
                    return
                per_chunk = (time.monotonic() - started) / len(todo)
                prev = rates.get(key)
                # the slower of the last batch and the running mean: the budget must not be
                # overrun because a previous batch happened to be fast
                if measures:
                    rates[key] = (
                        per_chunk if prev is None else max(per_chunk, 0.5 * (prev + per_chunk))
                    )
                new_items = []
                for (cid, h, _), vec in zip(todo, matrix, strict=True):
                    vectors[cid] = vec
                    new_items.append((h, vec))
                if use_cache:
                    store.cache_put(key, new_items, max_entries)
                report.vectors_embedded += len(todo)
            store.write_vectors(list(vectors.items()))
            skip.update(cid for cid, _, _ in batch if cid not in vectors)
            done += len(batch)
            if progress:
                progress("vectors", done, total)

    def _on_embed_failure(self, err: Exception) -> None:
        """Fallback provider, else unavailable (explicit) or keyword-only (auto). Never silent."""
        assert self.provider is not None
        failed = f"{self.provider.id} embedding failed: {err}"
        sel = self.selection
        if sel.fallback is not None and self.provider is sel.provider:
            self.provider = sel.fallback
            self._set_fallback(f"{failed}; using fallback provider {sel.fallback.id}")
            log.warning("%s; switching to fallback provider %s", failed, sel.fallback.id)
            return
        if sel.explicit:
            self.unavailable = failed
            raise ProviderUnavailable(failed) from err
        self.provider = None
        self._set_fallback(f"{failed}; keyword-only search")
        log.warning("%s; degrading to keyword-only search", failed)

    def _set_fallback(self, reason: str) -> None:
        self.fallback_reason = reason
        self.fallback_since = time.time()

    def _reindex(
        self, reason: str, *, embed: bool, embed_budget_s: float | None, progress: ProgressFn | None
    ) -> SyncReport:
        """Build a fresh index in a scratch file and publish it into the live one.

        The publish is one write transaction inside the live file (see `Store.publish`): other
        processes' readers switch from the complete old index to the complete new one and no
        file is pulled out from under them. Embeddings go into the live cache as they are
        computed, so a killed rebuild loses none. On any failure the old index stays, whole.
        """
        log.info("reindexing %s: %s", self.path, reason)
        report = SyncReport(reindexed=True, reindex_reason=reason)
        signature = self.signature()
        scratch = self._open_scratch()
        try:
            scratch.guard_signature = signature
            scratch.set_meta(
                {
                    "signature": json.dumps(signature),
                    "workspace": str(self.settings.workspace),
                    "agentId": self.settings.agent_id,
                }
            )
            self._text_phase(scratch, report, progress)
            self._sessions_phase(scratch, report, True)
            if embed:
                self._vector_phase(scratch, report, embed_budget_s, progress)
            self._publish(scratch)
        finally:
            scratch.discard()
        self.store.guard_signature = signature
        self.dirty = False
        return report

    def _open_scratch(self) -> Store:
        """A rebuild's store: a scratch file (SQLite) or a fresh tenant (PostgreSQL)."""
        return self.store.open_scratch()

    def _publish(self, scratch: Store) -> None:
        """Make a filled scratch store the live index (each driver publishes its own kind)."""
        live = self.store
        # two branches, not one `or`: each narrows both stores to one driver for the type check
        if isinstance(live, SqliteStore) and isinstance(scratch, SqliteStore):
            live.publish(scratch)
        elif not isinstance(live, SqliteStore) and not isinstance(scratch, SqliteStore):
            live.publish(scratch)  # both PostgreSQL tenants
        else:
            raise TypeError(
                f"cannot publish a {type(scratch).__name__} into a {type(live).__name__}"
            )

    # ------------------------------------------------------------------ search

    def _rank_params(self, max_results: int | None, min_score: float | None) -> RankParams:
        q = self.cfg.query
        h = q.hybrid
        return RankParams(
            max_results=max_results or q.max_results,
            min_score=q.min_score if min_score is None else min_score,
            vector_weight=h.vector_weight,
            text_weight=h.text_weight,
            fusion=h.fusion,
            mmr_enabled=h.mmr.enabled,
            mmr_lambda=h.mmr.lambda_,
            decay_enabled=h.temporal_decay.enabled,
            half_life_days=h.temporal_decay.half_life_days,
        )

    def search(
        self,
        request: SearchRequest | str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        now: datetime | None = None,
        mode: str | None = None,
    ) -> EngineAnswer:
        """Hybrid recall. `mode` ("hybrid"|"keyword"|"vector") overrides config, for evaluation.

        A plain string is a request with the keyword arguments as its limits.
        """
        if isinstance(request, str):
            request = SearchRequest(request, max_results, min_score)
        query = (request.query or "").strip()
        if not query:
            raise InvalidInput("query must not be empty")
        if self.unavailable:
            raise ProviderUnavailable(self.unavailable)
        if (mode or "hybrid") != "keyword":
            # the one place the query's embedding starts: on the provider's worker, while this
            # thread catches the index up and runs the keyword side; a vector not used after
            # all (vectors not usable in this index, a keyword-only config) is dropped
            self.prefetch_query(query)
        notes: list[str] = []
        if request.wait_s is not None:
            try:
                self.catch_up(request.wait_s)
            except StateError as err:  # full disk, read-only state: answer from the index as it is
                notes.append(f"index not updated ({err}); answering from it as it was")
        elif self.dirty and self.cfg.sync.on_search:
            self.sync(
                embed=False,
                allow_reindex=False,
                sessions=False,
                lock_wait_s=self.cfg.sync.search_wait_ms / 1000,
            )
        # from here on the search has the cores: background document embedding (serve) pauses
        # at its next yield point, not only while the query embeds, so the keyword side's and
        # the ranking's Python work does not queue for the GIL behind the embedding workers'
        priority = (
            self.provider.search_priority()
            if self.provider is not None
            else contextlib.nullcontext()
        )
        with priority:
            answer = self._search_synced(request, query, now, mode)
        answer.notes[:0] = notes
        if self._reference_to_save is not None:
            store, keys, reference = self._reference_to_save
            self._reference_to_save = None
            self._save_reference(store, keys, reference)
        return answer

    def _search_synced(
        self, request: SearchRequest, query: str, now: datetime | None, mode: str | None
    ) -> EngineAnswer:
        """`search` once the index is synced: both sides, the merge, ranking and snippets.

        The keyword side runs while the query embeds on the provider's worker; each side reads
        one snapshot of the index, and keyword hits of an index that changed in between are
        searched again. No snapshot is held while the query embeds (a remote API may take long).
        """
        params = self._rank_params(request.max_results, request.min_score)
        k = params.max_results * self.cfg.query.hybrid.candidate_multiplier
        # config: hybrid, or vector-first when hybrid is off; `mode` pins one side for evaluation
        effective = mode or ("hybrid" if self.cfg.query.hybrid.enabled else "vector")
        notes: list[str] = []
        vectors = effective in ("hybrid", "vector") and self._vectors_usable()
        # no chunk has a vector yet (a first search whose backlog was not started): the query's
        # would find nothing, so it is not embedded and the answer says it is by keywords
        no_vectors_yet = vectors and self.store.vec_dims is None
        vectors = vectors and not no_vectors_yet
        if not query_terms(query):
            # lone letters: every chunk holding an "x" would match it in full, and a model
            # places a one-letter query near any short chunk; only a file named so can answer
            notes.append("nothing to search for: the query has no word of two or more letters")
            vectors = no_vectors_yet = False
        store = self.store
        early = None
        if vectors and effective == "hybrid":
            with self._snapshot(store):
                early = self._keyword_side(store, query, k)
        qvec = self._query_vector(query, notes) if vectors else None
        want_kw = effective in ("hybrid", "keyword") or (qvec is None and mode is None)
        with self._snapshot(store):
            if early is not None and store.version != early.version:
                early = None  # the index changed while the query embedded: its ids may have too
            filled = self._candidates(store, request, query, k, qvec, want_kw, early)
            stats = self._corpus_stats(store, query if want_kw else "", qvec)
            pending = store.pending_count() if self.provider else 0
            # a few spare hits: a result whose lines earlier results already show gives its slot on
            ranked = rank(
                filled,
                query,
                dataclasses.replace(params, max_results=params.max_results + SPARE_RESULTS),
                now=now or datetime.now(UTC),
                stats=stats,
                partial_vectors=qvec is not None and pending > 0,
            )
            results = self._results(store, ranked, query, params, early.snippets if early else {})
        kw_used = want_kw and store.fts_available
        used_mode = (
            "hybrid"
            if qvec is not None and kw_used
            else ("vector" if qvec is not None else "keyword")
        )
        if pending and (qvec is not None or no_vectors_yet):
            counted = f"{pending} of {stats.chunks} chunks" if stats.chunks >= pending else None
            counted = counted or f"{pending} chunk{'' if pending == 1 else 's'}"
            notes.append(
                f"{counted} still waiting for embeddings "
                "(ranked by their keywords until then): "
                "`memoryd index` embeds them now; a running `memoryd serve` does it in the background"
            )
        degraded = None
        if self.fallback_reason:
            degraded = {"reason": self.fallback_reason, "since": self.fallback_since}
        return EngineAnswer(
            results=results,
            engine="builtin",
            provider=self.provider.id if self.provider else None,
            model=self.provider.model if self.provider else None,
            mode=used_mode,
            max_injected_chars=self.cfg.query.max_injected_chars,
            notes=notes,
            degraded=degraded,
            pending_vectors=pending,
        )

    @staticmethod
    def _snapshot(store: Store) -> contextlib.AbstractContextManager[None]:
        """Reads within see one index, whatever another process publishes meanwhile."""
        return store.snapshot() if isinstance(store, SqliteStore) else contextlib.nullcontext()

    def _keyword_side(self, store: Store, query: str, k: int) -> _KeywordSide:
        """Everything of the keyword side that needs no vector, done while the query embeds:
        its candidates, their rows, the query terms each holds (what ranking weighs), the
        query terms' chunk counts, and the best hits' snippets."""
        version = store.version
        hits: dict[int, Candidate] = {}
        self._keyword_candidates(store, query, k, hits)
        path_hits = self._path_candidates(store, query)
        rows_now = store.chunk_rows([*hits, *path_hits])
        terms = tuple(query_terms(query))
        rows = {cid: (row, frozenset(text_terms(terms, row.text))) for cid, row in rows_now.items()}
        self._term_chunks(store, query)
        snippets = self._snippets_while_embedding(query, hits, rows)
        return _KeywordSide(version, hits, path_hits, terms, rows, snippets)

    def _query_vector(self, query: str, notes: list[str]) -> np.ndarray | array[float] | None:
        """The query's vector (the prefetch's, when it started one), or None with a note why."""
        assert self.provider is not None
        qvec: np.ndarray | array[float] | None = None
        try:
            if self._lean(self.store):
                qvec = self.provider.embed_query_buffer(query)
            if qvec is None:
                qvec = self._embed_query(query)
        except Exception as err:
            if self.selection.explicit and self.selection.fallback is None:
                raise ProviderUnavailable(
                    f"{self.provider.id} query embedding failed: {err}"
                ) from err
            notes.append(f"query embedding failed ({err}); keyword results only")
            return None
        if not (any(qvec) if isinstance(qvec, array) else qvec.any()):
            notes.append("query embedding was a zero vector; keyword results only")
            return None
        return qvec

    def _candidates(
        self,
        store: Store,
        request: SearchRequest,
        query: str,
        k: int,
        qvec: np.ndarray | array[float] | None,
        want_kw: bool,
        early: _KeywordSide | None,
    ) -> list[Candidate]:
        """Both sides' candidates, merged, with their rows, from the sources asked for."""
        cands: dict[int, Candidate] = {}
        if qvec is not None:
            for rank_i, (cid, sim) in enumerate(store.vector_search(qvec, k)):
                cands[cid] = Candidate(cid, "", "", 0, 0, "", vector_score=sim, vector_rank=rank_i)
        if want_kw:
            if early is None:
                self._keyword_candidates(store, query, k, cands)
                path_hits = self._path_candidates(store, query)
            else:  # merged in the order the sequential search inserts them
                path_hits = early.path_hits
                for cid, kc in early.hits.items():
                    c = cands.setdefault(cid, kc)
                    c.text_rank, c.text_score = kc.text_rank, kc.text_score
            for cid in path_hits:
                cands.setdefault(cid, Candidate(cid, "", "", 0, 0, ""))
        early_rows = early.rows if early is not None else {}
        rows = store.chunk_rows(cid for cid in cands if cid not in early_rows)
        allowed_sources = set(self.cfg.sources)
        if request.corpus != "all":
            allowed_sources &= {request.corpus}
        filled = []
        for cid, c in cands.items():
            row = rows.get(cid)
            if row is None and early is not None and cid in early_rows:
                row, matched = early_rows[cid]
                c.matched = (early.terms, matched)
            if row is None or row.source not in allowed_sources:
                continue
            c.path, c.source, c.start_line, c.end_line, c.text, c.mtime = (
                row.path,
                row.source,
                row.start_line,
                row.end_line,
                row.text,
                row.mtime,
            )
            filled.append(c)
        return filled

    def _results(
        self,
        store: Store,
        ranked: Sequence[Candidate],
        query: str,
        params: RankParams,
        snippets: dict[int, tuple[str, int, int]],
    ) -> list[SearchResult]:
        """The ranked hits as results: a snippet each (`snippets` has those chosen already),
        the best hit's following lines as one more, no lines shown twice."""
        results: list[SearchResult] = []
        shown: dict[str, list[tuple[int, int]]] = {}

        def add(c: Candidate, snippet: str, first: int, last: int) -> None:
            kept = uncovered_window(snippet, first, last, shown.get(c.path, []))
            if kept is not None and len(results) < params.max_results:
                text, first, last = kept
                results.append(SearchResult(c.path, first, last, c.score, text, source=c.source))  # type: ignore[arg-type]
                shown.setdefault(c.path, []).append((first, last))

        continued = 0
        for c in ranked:
            if len(results) >= params.max_results:
                break
            snippet, first, last = snippets.get(c.chunk_id) or select_snippet(
                c.text, c.start_line, c.end_line, query, MAX_SNIPPET_CHARS
            )
            add(c, snippet, first, last)
            if continued < CONTINUE_BEST_HIT and params.max_results > 1:
                # the lines right after the best window, as a result of their own (each snippet
                # stays within the 700-character contract): the answer to a question often
                # comes a few lines after the line that names its topic
                text, end = self._with_following_lines(store, c, last)
                more = continue_snippet(text, c.start_line, end, last, MAX_SNIPPET_CHARS)
                continued += 1
                if more is not None:
                    add(c, *more)
        return results

    def _snippets_while_embedding(
        self,
        query: str,
        keyword_hits: dict[int, Candidate],
        rows: dict[int, tuple[ChunkRow, frozenset[str]]],
    ) -> dict[int, tuple[str, int, int]]:
        """The best keyword hits' snippets, chosen while the query still embeds on another
        thread: time the search would otherwise spend waiting for the vector. Stops once the
        vector is in (checked between snippets, ~0.06 ms each). The prefetch thread needs the
        GIL to hand the vector over, which this holds between checks, so the vector may wait
        for the last snippets: at most SPECULATIVE_SNIPPETS of them (~0.5 ms; letting go of
        the GIL between them measured no better, docs/performance.md round 11). What it did
        not reach is chosen after ranking, as before."""
        out: dict[int, tuple[str, int, int]] = {}
        provider = self.provider
        if provider is None or SPECULATIVE_SNIPPETS <= 0:
            return out
        for cid in keyword_hits:  # best first
            if len(out) >= SPECULATIVE_SNIPPETS or not provider.query_in_flight(query):
                break
            got = rows.get(cid)
            if got is not None:
                row = got[0]
                out[cid] = select_snippet(
                    row.text, row.start_line, row.end_line, query, MAX_SNIPPET_CHARS
                )
        return out

    @staticmethod
    def _with_following_lines(store: Store, c: Candidate, after_line: int) -> tuple[str, int]:
        """The chunk's text, and its last line, extended into the next chunks of its file when
        fewer than a snippet's worth of lines follow `after_line` inside it.

        A file's chunks are written in order in one transaction, so its next chunks have the
        next ids; `extend_chunk` keeps only rows of the same path that continue these lines, so
        a store that numbers otherwise only loses the extension.
        """
        lines = c.text.split("\n")
        rest = lines[max(0, after_line - c.start_line + 1) :]
        if sum(len(line) + 1 for line in rest) > MAX_SNIPPET_CHARS:
            return c.text, c.end_line
        rows = store.chunk_rows(range(c.chunk_id + 1, c.chunk_id + 1 + FOLLOWING_CHUNKS))
        following = sorted(
            (r.start_line, r.end_line, r.text)
            for r in rows.values()
            if r.path == c.path and r.start_line > c.start_line
        )
        return extend_chunk(
            c.text,
            c.start_line,
            c.end_line,
            [(text, start, end) for start, end, text in following],
            MAX_SNIPPET_CHARS,
        )

    def _search_engine(self) -> str:
        """What answers this process's KNN: the store's engine, or a one-off command's exact
        scan in SQL (`_lean`) where the store would hold the matrix in memory."""
        engine = self.store.search_engine
        if (
            engine == "numpy"
            and self.provider is not None
            and self.provider.query_buffer_available()
            and self._lean(self.store)
        ):
            return "sqlite-vec-scan"
        return engine

    def _lean(self, store: Store) -> bool:
        """Whether this search keeps numpy out: a one-off command (CLI) on a SQLite index whose
        connections compute cosines (sqlite-vec). Its query vector is then the engine's own
        float32 buffer (`EmbeddingProvider.embed_query_buffer`, when the provider has one), the
        KNN and the background cosines run in SQL, and the reference background is the one
        stored with the index (`_stored_reference`). Same candidates and ranking as the numpy
        path, cosines within float32 rounding (`tests/test_lean_search.py`)."""
        return self.one_off and isinstance(store, SqliteStore) and store.cosine_sql

    def _embed_query(self, query: str) -> np.ndarray:
        """Query embedding through a small LRU: agents often repeat a question within a session."""
        assert self.provider is not None
        key = (*self._provider_key(), query)
        hit = self._query_cache.get(key)
        if hit is not None:
            self._query_cache.move_to_end(key)
            return hit
        vec = self.provider.embed_query(query)
        self._query_cache[key] = vec
        if len(self._query_cache) > QUERY_CACHE_SIZE:
            self._query_cache.popitem(last=False)
        return vec

    def _keyword_candidates(
        self, store: Store, query: str, k: int, cands: dict[int, Candidate]
    ) -> None:
        terms = query_terms(query)
        match = fts_match_expression(terms)
        primary = store.keyword_search(match, k) if match else []
        for rank_i, (cid, strength) in enumerate(primary):
            c = cands.setdefault(cid, Candidate(cid, "", "", 0, 0, ""))
            c.text_rank, c.text_score = rank_i, strength
        tri = trigram_terms(query)
        if not tri or len(primary) >= k:
            # substring-only hits would rank after k whole-word hits anyway: skip the scan
            return
        tri_match = " OR ".join('"' + t.replace('"', '""') + '"' for t in tri)
        extra = [
            (cid, s)
            for cid, s in store.keyword_search(tri_match, k, trigram=True)
            if cid not in {p[0] for p in primary}
        ]
        if not extra:
            return
        # substring-only hits rank after whole-word hits, scaled below the weakest of those
        ceiling = 0.5 * min((s for _, s in primary), default=2.0)
        top = max(s for _, s in extra) or 1.0
        for j, (cid, strength) in enumerate(extra):
            c = cands.setdefault(cid, Candidate(cid, "", "", 0, 0, ""))
            c.text_rank = len(primary) + j
            c.text_score = ceiling * (strength / top)

    # Corpus statistics for calibrated scores (see `_corpus_stats`): per store version, and the
    # reference queries' vectors per provider. Class defaults rather than `__init__` fields:
    # the search path owns them and nothing else reads them.
    _stats_cache: _StatsCache | None = None
    _reference_to_save: (
        tuple[Store, list[tuple[int, str]], dict[tuple[Script, Script], tuple[float, float]]] | None
    ) = None
    _reference_vectors: tuple[tuple[str, str, str], dict[Script, np.ndarray]] | None = None

    def _corpus_stats(
        self, store: Store, query: str, qvec: np.ndarray | array[float] | None
    ) -> CorpusStats:
        """Chunk count, per-term chunk counts and the cosine backgrounds that `rank` calibrates by.

        Document frequencies make keyword evidence comparable across queries (a hit on a rare
        term means more than one on a word every note holds); the reference background makes a
        cosine comparable (e5 scores unrelated text 0.72–0.82 depending on the languages, other
        models near 0). Everything but the query's own cosines is cached per index version.
        """
        cache, term_chunks = self._term_chunks(store, query)
        if qvec is None:
            return CorpusStats(cache.chunks, term_chunks)
        if isinstance(qvec, array):
            assert isinstance(store, SqliteStore)
            lean = self._lean_background(store, qvec)
            if lean is not None:
                return CorpusStats(cache.chunks, term_chunks, *lean)
            # no reference stored for this sample (an index last written by an older memoryd,
            # or changed since): computed the numpy way, once, and stored for the next search
            import numpy as np

            qvec = np.frombuffer(qvec, dtype=np.float32)
        if cache.sample is None:
            cache.ids, cache.sample, cache.scripts, cache.keys = self._background_sample(store)
        sample = cache.sample
        if not sample.shape[0] or sample.shape[1] != qvec.shape[0]:
            return CorpusStats(cache.chunks, term_chunks)
        if cache.reference is None:
            refs = self._reference_query_vectors(store)
            cache.reference = _reference_background(refs, sample, cache.scripts)
            if refs and cache.keys is not None and self.one_off:
                # what makes the next one-off search lean (a long-lived process stores it when
                # a sync changes the index: `_store_reference`); written once the answer is
                # ready, not between the search's reads
                self._reference_to_save = (store, cache.keys, cache.reference)
        background = _Background(cache.ids, cache.scripts, sample, qvec)
        return CorpusStats(cache.chunks, term_chunks, cache.reference, background)

    def _lean_background(
        self, store: SqliteStore, qvec: array[float]
    ) -> (
        tuple[dict[tuple[Script, Script], tuple[float, float]], list[tuple[int, Script, float]]]
        | None
    ):
        """`_corpus_stats`' reference and background without numpy: the sample's cosines from
        SQL, the reference as stored for this very sample; None when none is stored for it."""
        if store.vec_dims != len(qvec):
            return {}, []  # as the numpy path: no background for vectors of another model
        rows = store.sample_cosines(BACKGROUND_SAMPLE, qvec)
        if not rows:
            return {}, []
        reference = self._stored_reference(store, [(cid, h) for cid, h, _, _ in rows])
        if reference is None:
            return None
        return reference, [(cid, script_of(text), cos) for cid, _, cos, text in rows]

    def _provider_key(self) -> tuple[str, str, str]:
        """What vectors are keyed by (embedding cache, query cache, reference vectors and
        background): the provider's id, model and fingerprint."""
        assert self.provider is not None
        return self.provider.id, self.provider.model, self.provider.fingerprint()

    def _stored_reference(
        self, store: SqliteStore, sample: Sequence[tuple[int, str]]
    ) -> dict[tuple[Script, Script], tuple[float, float]] | None:
        fingerprint = _reference_fingerprint(self._provider_key(), sample)
        return _reference_from_json(store.meta_value(REFERENCE_META_KEY), fingerprint)

    def _save_reference(
        self,
        store: Store,
        keys: list[tuple[int, str]],
        reference: dict[tuple[Script, Script], tuple[float, float]],
    ) -> None:
        """Keep `reference`, computed from the sample `keys` names, with the index for later
        processes; never waits for a lock, never fails the caller (a busy or read-only index
        only means the next search computes it)."""
        if not isinstance(store, SqliteStore) or store.read_only:
            return
        fingerprint = _reference_fingerprint(self._provider_key(), keys)
        with contextlib.suppress(Exception):
            store.set_meta(
                {REFERENCE_META_KEY: _reference_to_json(fingerprint, reference)}, wait_ms=0
            )

    def _store_reference(self, store: Store) -> None:
        """After a sync changed the index: its reference background, stored with it so that a
        one-off search needs no numpy (`_lean`). Only where the reference queries' vectors ship
        with memoryd (the local model): a sync embeds none of them."""
        if (
            self.provider is None
            or not isinstance(store, SqliteStore)
            or store.read_only
            or not store.cosine_sql
        ):
            return
        # cheapest first: a sync that stored no vector yet (a first search's) loads nothing
        keys = store.sample_keys(BACKGROUND_SAMPLE)
        if not keys or self._stored_reference(store, keys) is not None:
            return
        if not shipped_file(self.provider.id, self.provider.fingerprint()).exists():
            return
        _, sample, scripts, sampled = self._background_sample(store)
        refs = self._reference_query_vectors(store)
        if refs and sampled:
            self._save_reference(store, sampled, _reference_background(refs, sample, scripts))

    def _term_chunks(self, store: Store, query: str) -> tuple[_StatsCache, dict[str, int]]:
        """This index version's stats cache, and how many chunks hold each query term."""
        version = store.version
        cache = self._stats_cache
        if cache is None or cache.store is not store or cache.version != version:
            cache = _StatsCache(store, version, self._count_chunks(store))
            self._stats_cache = cache
        term_chunks: dict[str, int] = {}
        if store.fts_available:
            for term in query_terms(query):
                if term not in cache.df:
                    if len(cache.df) >= STATS_TERM_CACHE:
                        cache.df.clear()
                    cache.df[term] = self._count_term(store, term)
                term_chunks[term] = cache.df[term]
        return cache, term_chunks

    def _reference_query_vectors(self, store: Store) -> dict[Script, np.ndarray]:
        """REFERENCE_QUERIES embedded with the current provider: once, then from the cache table.

        Stored in the embedding cache under a tagged hash no chunk can have, so a later process
        (a one-shot CLI search) reads them instead of embedding 32 queries again. For the default
        local model they ship with memoryd (`embeddings.shipped`), so a new index embeds none. A
        provider that cannot embed them leaves the query's own background as the reference.
        """
        import numpy as np

        assert self.provider is not None
        key = self._provider_key()
        held = self._reference_vectors
        if held is not None and held[0] == key:
            return held[1]
        wanted = {
            reference_key(text): (script, text)
            for script, texts in REFERENCE_QUERIES.items()
            for text in texts
        }
        ship = shipped_vectors(self.provider.id, key[2])
        found = {h: ship[h] for h in wanted if h in ship}
        # a busy or read-only index file: embed, keep in memory only
        with contextlib.suppress(Exception):
            if len(found) < len(wanted):
                found.update(store.cache_get(key, [h for h in wanted if h not in found]))
        fresh: list[tuple[str, np.ndarray]] = []
        try:
            for h, (_, text) in wanted.items():
                if h not in found:
                    found[h] = self.provider.embed_query(text)
                    fresh.append((h, found[h]))
        except Exception as err:
            log.warning(
                "cannot embed the reference queries (%s); calibrating by the query alone", err
            )
            return {}
        if fresh and self.cfg.cache.enabled:
            with contextlib.suppress(Exception):
                store.cache_put(key, fresh, self.cfg.cache.max_entries)
        by_script: dict[Script, list[np.ndarray]] = {}
        for h, (script, _) in wanted.items():
            by_script.setdefault(script, []).append(np.asarray(found[h], dtype=np.float32))
        vectors = {script: np.stack(vs) for script, vs in by_script.items()}
        self._reference_vectors = (key, vectors)
        return vectors

    # The reads below use the store's own readers (a snapshot, never the writer), so a sync's
    # writes never hold a search up; both stores implement them.
    @staticmethod
    def _count_chunks(store: Store) -> int:
        return int(store.counts()["chunks"])

    @staticmethod
    def _count_term(store: Store, term: str) -> int:
        match = fts_match_expression([term])
        return 0 if match is None else store.count_matching(match)

    @staticmethod
    def _background_sample(
        store: Store,
    ) -> tuple[list[int], np.ndarray, list[Script], list[tuple[int, str]] | None]:
        """Up to BACKGROUND_SAMPLE stored vectors spread evenly over chunk ids: ids, vectors,
        scripts, and (SQLite) the chunks' (id, content hash) read in the same snapshot."""
        import numpy as np

        keys: list[tuple[int, str]] | None = None
        if isinstance(store, SqliteStore):
            keyed = store.vector_sample_keyed(BACKGROUND_SAMPLE)
            rows = [(cid, vec, text) for cid, vec, text, _ in keyed]
            keys = [(cid, h) for cid, _, _, h in keyed]
        else:
            rows = store.vector_sample(BACKGROUND_SAMPLE)
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32), [], keys
        ids = [r[0] for r in rows]
        return ids, np.stack([r[1] for r in rows]), [script_of(r[2]) for r in rows], keys

    def _path_candidates(self, store: Store, query: str) -> list[int]:
        version = store.version
        if (
            self._paths_cache is None
            or self._paths_cache[0] is not store
            or self._paths_cache[1] != version
        ):
            paths = store.paths()
            by_name: dict[str, list[int]] = {}
            by_stem: dict[str, list[int]] = {}
            for i, p in enumerate(paths):
                pp = PurePosixPath(p.lower())
                by_name.setdefault(pp.name, []).append(i)
                by_stem.setdefault(pp.stem, []).append(i)
            longest = max(map(len, by_name), default=0)
            self._paths_cache = (store, version, _PathLookup(paths, by_name, by_stem, longest))
        look = self._paths_cache[2]
        ql = query.strip().lower()
        # Screens by dictionary, not a scan of every path: path_match_level only accepts a file
        # whose name begins a token of the query (level 2: the name is a token; level 3: the
        # path follows a space, so its name follows "/" or that space) or whose stem is the
        # whole query (level 1). path_match_level has the exact rules.
        hits = set(look.by_stem.get(ql.strip("`'\" "), ()))
        for token in PATH_TOKEN.findall(ql.replace("`", " ")):
            for end in range(1, min(len(token), look.longest) + 1):
                hits.update(look.by_name.get(token[:end], ()))
        matched = [
            look.paths[i] for i in sorted(hits) if path_match_level(query, look.paths[i]) > 0
        ]
        return store.chunk_ids_for_paths(matched, limit_per_path=8) if matched else []

    # ------------------------------------------------------------------ get

    def get(self, path: str, from_line: int | None = None, lines: int | None = None) -> FileText:
        """Read a memory file or a line range of it (the policy is `core.layout.locate`)."""
        return read_memory_file(
            self.settings.roots, self.settings.workspace, path, from_line, lines
        )

    # ------------------------------------------------------------------ status

    def status(self) -> BuiltinStatus:
        # imported here: the status models are defined only by processes that report status
        from ..core.status import (
            BuiltinStatus,
            CacheInfo,
            DegradedInfo,
            FtsInfo,
            IndexRecovery,
            SkippedFile,
            VectorInfo,
        )

        try:
            counts = self.store.counts()
        except IndexCorrupt:
            # the damaged file was just moved aside: describe the fresh one (and the recovery)
            counts = self.store.counts()
        meta = self.store.meta()
        vec = self.store.vector
        sel = self.selection
        skipped: dict[str, int] = json.loads(meta.get("skipped") or "{}")
        left_out = _left_out_from_meta(meta)
        for e in left_out.values():
            skipped[e.reason] = skipped.get(e.reason, 0) + 1
        return BuiltinStatus(
            provider=self.provider.id if self.provider else "none",
            model=self.provider.model if self.provider else None,
            requested_provider=sel.requested,
            provider_reason=sel.reason,
            fallback=DegradedInfo(reason=self.fallback_reason, since=self.fallback_since)
            if self.fallback_reason
            else None,
            unavailable=self.unavailable,
            files=counts["files"],
            chunks=counts["chunks"],
            pending_vectors=counts["pending_vectors"] if self.provider else 0,
            dirty=self.dirty,
            needs_reindex=self.reindex_reason(),
            db_path=self.location,
            workspace_dir=str(self.settings.workspace),
            sources=list(self.cfg.sources),
            source_counts=counts["source_counts"],
            vector=VectorInfo(
                enabled=self._vector_enabled,
                available=vec.available and self.provider is not None,
                engine=vec.engine,
                search_engine=self._search_engine(),
                binding=vec.binding,
                dims=self.store.vec_dims,
                load_error=vec.load_error,
                query_engine=self.provider.query_engine() if self.provider else None,
                query_engine_problem=self.provider.query_engine_problem if self.provider else None,
            ),
            fts=FtsInfo(
                available=self.store.fts_available,
                error=self.store.fts_error,
                trigram=self.store.trigram_error is None,
                engine="tsvector" if self.settings.store_driver == "postgres" else "fts5",
            ),
            cache=CacheInfo(
                enabled=self.cfg.cache.enabled,
                entries=counts["cache_entries"],
                max_entries=self.cfg.cache.max_entries,
            ),
            last_sync_at=self._last_sync_at or _recorded_float(meta, LAST_SYNC_META_KEY),
            # another process's failed sync counts too: it is recorded in the index
            last_error=self.last_error or _recorded_error(meta),
            skipped=skipped,
            skipped_files=[
                SkippedFile(path=e.path, reason=e.reason, detail=e.detail, size=e.size)
                for e in left_out.values()
            ],
            undecodable=json.loads(meta.get("undecodable") or "[]"),
            read_only=self.store.read_only,
            recoveries=[
                IndexRecovery(moved_to=str(r.moved_to), at=r.at, reason=r.reason)
                for r in self.store.recoveries()
            ],
        )

    # ------------------------------------------------------------------ watch

    def watch_roots(self) -> list[Path]:
        """Folders to watch: the workspace, extra roots outside it, and the transcripts folder."""
        ws = self.settings.workspace
        roots = [ws]
        for root in self.settings.roots:
            p = Path(root.path)
            if p.exists() and not p.is_relative_to(ws) and p not in roots:
                roots.append(p)
        sessions = self.settings.sessions_dir
        if sessions is not None:
            private_dir(sessions)
            roots.append(sessions)
        return roots

    def watch(
        self,
        *,
        stop_event: threading.Event | None = None,
        on_synced: Callable[[SyncReport], None] | None = None,
    ) -> None:
        """Watch memory files; mark dirty on change and sync after the debounce, until
        `stop_event` is set."""
        from watchfiles import watch

        sessions_dir = self.settings.sessions_dir
        roots = self.settings.roots

        def relevant(_change: Any, raw: str) -> bool:
            p = Path(raw)
            if sessions_dir is not None and p.is_relative_to(sessions_dir):
                return p.name.endswith(".jsonl")
            if p.suffix and not is_markdown(p.name):
                return False
            # a folder event (no suffix) under a root may hide new files: let it through
            return _inside_any(str(p), roots) or any(Path(r.path).is_relative_to(p) for r in roots)

        for _changes in watch(
            *self.watch_roots(),
            watch_filter=relevant,
            debounce=self.cfg.sync.watch_debounce_ms,
            step=50,
            stop_event=stop_event,
            recursive=True,
            # how often the watcher checks `stop_event`: a close is seen within this
            rust_timeout=200,
        ):
            self.dirty = True
            report = self._sync_logged("background")
            if on_synced and report is not None:
                on_synced(report)

    # ------------------------------------------------------------------ engine lifecycle

    def start(self, background: Background | None = None) -> None:
        """With `background`: sync now, then keep fresh (watcher, `sync.intervalMinutes`)."""
        self._background = background
        if background is not None:
            background.spawn("index-sync", lambda: self._keep_fresh(background))

    def _keep_fresh(self, background: Background) -> None:
        self._sync_logged("built-in index")
        if self.cfg.sync.watch:
            background.spawn("index-watch", lambda: self.watch(stop_event=background.stopping))
        minutes = self.cfg.sync.interval_minutes
        if minutes > 0:
            background.every("index-periodic", minutes * 60, self._periodic_sync)

    def _periodic_sync(self) -> None:
        self.dirty = True
        self._sync_logged("periodic")

    def _sync_logged(self, what: str) -> SyncReport | None:
        try:
            return self.sync()
        except MemorydError as err:
            self.last_error = str(err)
            log.warning("%s sync failed for %s: %s", what, self.settings.agent_id, err)
            return None

    def pending_changes(self) -> int:
        """Memory files added, changed or removed since the last sync (a stat pass, no reads)."""
        return self._changed_files(self.store, self._discover(), self.store.meta())

    def notify_changed(self) -> None:
        """A memory file was written through memoryd: the next search syncs first."""
        self.dirty = True

    def close(self) -> None:
        self.store.close()
        for p in {
            id(x): x for x in (self.selection.provider, self.selection.fallback) if x
        }.values():
            p.close()


class _Background(Sequence[tuple[int, Script, float]]):
    """`CorpusStats.background` as the sample's arrays, its cosines computed and made into
    tuples only if read.

    Ranking reads it for few queries (a chunk in another script that no keyword matched):
    building 1,024 tuples for every search cost ~0.3 ms of it, and the product itself (1.5 MB,
    cold after the KNN) ~0.1 ms.
    """

    def __init__(
        self, ids: Sequence[int], scripts: Sequence[Script], sample: np.ndarray, query: np.ndarray
    ) -> None:
        if not len(ids) == len(scripts) == sample.shape[0]:
            raise ValueError("background: ids, scripts and vectors differ in length")
        self._ids, self._scripts = ids, scripts
        self._sample, self._query = sample, query
        self._cosines: np.ndarray | None = None

    @property
    def _sims(self) -> np.ndarray:
        import numpy as np

        if self._cosines is None:
            self._cosines = self._sample @ self._query.astype(np.float32)
        return self._cosines

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, i: int) -> tuple[int, Script, float]: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[tuple[int, Script, float]]: ...
    def __getitem__(
        self, i: int | slice
    ) -> tuple[int, Script, float] | Sequence[tuple[int, Script, float]]:
        if isinstance(i, slice):
            return list(self)[i]
        return self._ids[i], self._scripts[i], float(self._sims[i])

    def __iter__(self) -> Iterator[tuple[int, Script, float]]:
        return zip(self._ids, self._scripts, self._sims.tolist(), strict=True)


def _recorded_float(meta: dict[str, str], key: str) -> float | None:
    with contextlib.suppress(KeyError, ValueError, TypeError):
        return float(meta[key])
    return None


def _recorded_error(meta: dict[str, str]) -> str | None:
    raw = meta.get("last_sync_error")
    if not raw:
        return None
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return str(json.loads(raw)["message"])
    return None


def _inside_any(path: str, roots: Sequence[MemoryRoot]) -> bool:
    """Whether `path` lies under one of the roots (lexically)."""
    return any(path == r.path or path.startswith(r.path.rstrip(os.sep) + os.sep) for r in roots)
