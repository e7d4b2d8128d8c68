"""`QmdManager`: one agent's qmd sidecar: its home, the qmd calls, the collections, update and
embed (timed or requested, serialized across processes), search and reads."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

import filelock
from pydantic import BaseModel, ConfigDict, ValidationError

from ..background import Background
from ..config import QmdSettings
from ..core.engine import SearchOutput, SearchRequest
from ..core.layout import SKIP_DIRS, MemoryRoot, display_path
from ..core.results import SearchResult, Source
from ..core.status import CollectionStatus, QmdStatus
from ..core.text import plain_text
from ..errors import (
    MemorydError,
    PathNotAllowed,
    QmdBadOutput,
    QmdError,
    QmdExitError,
    QmdLocked,
    QmdTimeout,
    StateError,
)
from ..fsio import (
    private_dir,
    private_file,
    read_file,
    read_private,
    wipe_folder,
    write_private_atomic,
)
from ..rerank import RerankStage, Scorer
from ._collections import CollectionSpec, desired_collections, plan_collections
from ._home import QmdHome, default_shared_models_dir
from ._parse import (
    QmdHit,
    is_busy_error,
    is_collection_exists_error,
    is_missing_collection_error,
    parse_collection_list,
    parse_collection_show,
    parse_search_output,
    split_qmd_uri,
)
from ._plan import SearchMode, plan_query
from ._runner import kill_group, resolve_command, run_qmd
from ._snippets import (
    content_docid,
    file_lines,
    hit_windows,
    holds_enough,
    interleave,
    refind_line,
)

log = logging.getLogger("memoryd.qmd")

#: qmd's SQLite busy timeout (milliseconds), read once per qmd process.
BUSY_TIMEOUT_ENV: Final = "QMD_SQLITE_BUSY_TIMEOUT"
_BUSY_TRIES: Final = 4
#: Hits asked of qmd beyond `maxResults`, so a dropped hit (see `_read_hit`) leaves no gap.
SPARE_HITS: Final = 2
#: Candidates qmd keeps after fusing its lines' rankings unless `-C` says otherwise.
QMD_CANDIDATE_LIMIT: Final = 40
#: A hit's file is read whole to cut its window; a larger one is dropped (and counted).
MAX_HIT_FILE_BYTES: Final = 8 << 20
#: Reasons a qmd hit was dropped that mean qmd indexed what memoryd's rules refuse (a stale or
#: vanished hit is only an edit qmd has not indexed yet).
REFUSED_HITS: Final = frozenset(
    {"unknown_collection", "absolute_path", "traversal", "not_memory", "refused", "unresolvable"}
)

_VERSION_RE = re.compile(r"^qmd (\d+)\.(\d+)\.(\d+)\b")


def embed_backoff_s(failures: int) -> float:
    """Wait before the next embed after `failures` consecutive failures: 60 s doubling, ≤ 1 h."""
    return float(min(3600, 60 * 2 ** (failures - 1))) if failures > 0 else 0.0


def busy_timeout_ms(left_s: float, configured: str | None = None) -> int:
    """qmd's busy timeout for a call with `left_s` seconds left: a third, at least 50 ms."""
    ms = max(50, int(left_s * 1000 / 3))
    if configured is not None and configured.strip().isdigit():
        ms = min(ms, int(configured))
    return ms


def parse_version(text: str) -> str:
    """`qmd 2.8.3 (facd35e)` → `qmd 2.8.3 (facd35e)`; anything else is `QmdBadOutput`."""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not _VERSION_RE.match(line):
        shown = line[:80] or "nothing"
        raise QmdBadOutput(f"qmd --version printed {shown!r}, not 'qmd X.Y.Z'")
    return line


class QmdState(BaseModel):
    """What every process learns of this agent's qmd, kept in its home (`QmdHome.state_path`)."""

    model_config = ConfigDict(extra="ignore")

    version: str | None = None
    version_error: str | None = None
    last_update_at: float | None = None
    last_embed_at: float | None = None
    #: qmd hits memoryd refused to serve, by reason, and the last one (see `QmdStatus`)
    dropped_hits: dict[str, int] = {}
    last_dropped: str | None = None
    last_refused_at: float | None = None


class _Dropped(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


class QmdManager:
    """Drives qmd for one agent. Create, `start()`, use, `close()`."""

    name: Final = "qmd"

    def __init__(
        self,
        settings: QmdSettings,
        *,
        command: str | None = None,
        home: Path | None = None,
        shared_models_dir: Path | Literal["unset"] | None = "unset",
        env_overrides: Mapping[str, str | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.config = settings.qmd
        self.command = command or self.config.command
        self.home = QmdHome(home if home is not None else settings.home)
        self._shared_models = (
            default_shared_models_dir() if shared_models_dir == "unset" else shared_models_dir
        )
        self._env_overrides = dict(env_overrides or {})
        cfg = settings.rerank
        self.rerank_stage = None if cfg.provider == "none" else RerankStage(cfg, settings.state_dir)
        self._clock = clock

        #: The configured search mode (`memory.qmd.searchMode`).
        self.search_mode: SearchMode = self.config.search_mode
        #: The collections this agent wants, in search order.
        self._specs = desired_collections(
            self.config,
            agent_id=settings.agent_id,
            workspace=settings.workspace,
            sessions_dir=settings.exports_dir,
            extra_roots=settings.extra_roots,
        )
        self._active: dict[str, CollectionSpec] = {}
        self._waiting_for_dir: list[CollectionSpec] = []
        self._collections_lock = threading.RLock()
        self._maint_lock = threading.Lock()
        self._file_lock = filelock.FileLock(
            str(self.home.lock_path), thread_local=False, mode=0o600
        )
        self._started = False
        self._closed = False
        self._running: set[subprocess.Popen[bytes]] = set()
        self._bound = threading.local()  # this thread's deadline for every qmd call (`bounded`)
        self._wake = threading.Event()
        self._update_requested_at: float | None = None

        self._state = QmdState()
        self._embed_failures = 0
        self._embed_retry_at: float | None = None
        self.last_error: str | None = None

    # ------------------------------------------------------------------ state every process shares

    def state(self) -> QmdState:
        """The state as the last process left it (this one's when none could be written)."""
        try:
            return QmdState.model_validate_json(read_private(self.home.state_path) or b"")
        except (StateError, ValidationError):
            return self._state.model_copy(deep=True)

    def _record(self, **changes: Any) -> None:
        self._state = self.state().model_copy(update=changes)
        with suppress(StateError):  # a read-only state dir only loses the write
            private_dir(self.home.root)
            write_private_atomic(self.home.state_path, self._state.model_dump_json().encode())

    # ------------------------------------------------------------------ lifecycle

    def start(self, background: Background | None = None) -> None:
        """Prepare the agent's qmd home and collections; boot-sync and timers per config."""
        self._prepare()
        self._started = True
        update = self.config.update
        if update.on_boot and update.wait_for_boot_sync:
            self.sync()
        if background is not None:
            background.spawn("qmd-maintenance", lambda: self.run_maintenance(background.stopping))
            background.spawn("qmd-watch", lambda: self._watch_files(background.stopping))

    def close(self) -> None:
        """Stop timers; an in-flight qmd call is killed with its process group."""
        self._closed = True
        self._wake.set()
        for process in list(self._running):
            kill_group(process)
        if self.rerank_stage is not None:
            self.rerank_stage.close()

    def reset(self) -> list[str]:
        """`memoryd reset`: wipe the home but the held lock and models, then make it again."""
        with self._maintenance():
            keep = {self.home.lock_path, self.home.cache_home / "qmd" / "models"}
            removed = [str(e) for e in wipe_folder(self.home.root, keep)]
            self._active = {}
            self._state = QmdState()
            self._prepare()
        return removed

    def _prepare(self) -> None:
        models = {k: v for k, v in dataclasses.asdict(self.config.models).items() if v}
        self.home.ensure(models=models, shared_models_dir=self._shared_models)
        self.ensure_collections()

    def probe(self) -> None:
        """Check that qmd starts and answers `qmd X.Y.Z`; a `QmdError` says why not."""
        try:
            out = self._run(["--version"], self.config.update.command_timeout_ms)
            version = parse_version(out.stdout or out.stderr)
        except QmdError as err:
            self.last_error = str(err)
            bad = str(err) if isinstance(err, QmdBadOutput) else None
            self._record(version=None, version_error=bad)
            raise
        self._record(version=version, version_error=None)

    def status(self) -> QmdStatus:
        """What this and every other process know of the sidecar."""
        retry_in = None
        if self._embed_retry_at is not None:
            retry_in = max(0.0, self._embed_retry_at - self._clock())
        return QmdStatus(
            **self.state().model_dump(),
            command=self.command,
            home=str(self.home.root),
            search_mode=self.search_mode,
            collections=[
                CollectionStatus(name=s.name, path=s.path, pattern=s.pattern, source=s.source)
                for s in self.known_collections()
            ],
            waiting_for_folder=[s.path for s in self._waiting_for_dir],
            embed_failures=self._embed_failures,
            embed_retry_in_s=retry_in,
            last_error=self.last_error,
        )

    @contextmanager
    def bounded(self, deadline: float | None) -> Iterator[None]:
        """Within, every qmd call of this thread ends by `deadline` (`time.monotonic()`)."""
        before = getattr(self._bound, "deadline", None)
        if deadline is not None and before is not None:
            deadline = min(deadline, before)
        self._bound.deadline = deadline if deadline is not None else before
        try:
            yield
        finally:
            self._bound.deadline = before

    def env(self) -> dict[str, str]:
        """The environment every qmd call of this agent gets."""
        return self.home.env(overrides=self._env_overrides)

    def _run(self, args: Sequence[str], timeout_ms: int) -> subprocess.CompletedProcess[str]:
        """One qmd call within `timeout_ms` in all, retries on a locked index included."""
        env = self.env()
        if not self.home.neutral_cwd.is_dir():  # `--version` may run before start()
            private_dir(self.home.neutral_cwd)
        configured = env.get(BUSY_TIMEOUT_ENV)  # the user's own setting, if smaller, wins
        budget_s = timeout_ms / 1000
        deadline = time.monotonic() + budget_s
        bound = getattr(self._bound, "deadline", None)
        if bound is not None and bound < deadline:
            deadline, budget_s = bound, max(bound - time.monotonic(), 0.0)
        label = f"qmd {args[0]}" if args else "qmd"
        locked: QmdExitError | None = None
        tries = 0
        while True:
            left_s = deadline - time.monotonic()
            env[BUSY_TIMEOUT_ENV] = str(busy_timeout_ms(left_s, configured))
            try:
                return run_qmd(
                    self.command,
                    args,
                    env=env,
                    cwd=str(self.home.neutral_cwd),
                    timeout_s=max(left_s, 0.001),
                    running=self._running,
                )
            except QmdTimeout:
                if locked is None:
                    raise
            except QmdExitError as err:
                if not is_busy_error(err.stderr):
                    raise
                locked, tries = err, tries + 1
                pause_s = min(2.0, 0.25 * 2 ** (tries - 1))
                # retry a lock that was reported quickly; one that took qmd its whole busy
                # timeout would most likely just run into our timeout the second time
                if tries < _BUSY_TRIES and deadline - time.monotonic() - pause_s >= budget_s / 2:
                    time.sleep(pause_s)
                    continue
            assert locked is not None
            raise QmdLocked(
                f"{label}: its index is locked by another process (database is locked); "
                f"gave up after {tries} {'try' if tries == 1 else 'tries'}",
                returncode=locked.returncode,
                stderr=locked.stderr,
            ) from None

    # ------------------------------------------------------------------ collections

    def known_collections(self) -> list[CollectionSpec]:
        """This process's collections, or before start those last verified if qmd's registry is
        unchanged."""
        if self._active or self._started:
            return list(self._active.values())
        present = [s for s in self._specs if Path(s.path).is_dir()]
        return present if self._still_verified(present) else []

    def list_collections(self) -> dict[str, CollectionSpec]:
        """What qmd has now (`collection list`, then `show` for each)."""
        timeout = self.config.update.command_timeout_ms
        out = self._run(["collection", "list"], timeout)
        names = parse_collection_list(out.stdout)
        if not names:
            return {}
        bound = getattr(self._bound, "deadline", None)

        def show(name: str) -> CollectionSpec | None:
            with self.bounded(bound):  # the caller's deadline holds on the pool's threads too
                return parse_collection_show(
                    self._run(["collection", "show", name], timeout).stdout
                )

        with ThreadPoolExecutor(min(len(names), 4), "qmd-show") as pool:
            shown = list(pool.map(show, names))
        return {name: info for name, info in zip(names, shown, strict=True) if info is not None}

    def ensure_collections(self) -> None:
        """Add missing collections, re-bind changed ones, drop matching legacy names."""
        with self._collections_lock:
            if self.config.sessions.enabled:
                private_dir(self.settings.exports_dir)
            present = [s for s in self._specs if Path(s.path).is_dir()]
            self._waiting_for_dir = [s for s in self._specs if s not in present]
            if self._still_verified(present) and resolve_command(self.command, self.env()):
                # qmd's registry is byte for byte as last checked: asking qmd would find nothing
                # to do; a collection lost otherwise is re-created on a search's "not found"
                self._active = {s.name: s for s in present}
                return
            removes, adds = plan_collections(present, self.list_collections())
            for name in removes:
                self._remove_collection(name)
            for spec in adds:
                self._add_collection(spec)
            self._active = {s.name: s for s in present}
            fingerprint = self._verified(present)
            if fingerprint is not None:
                with suppress(StateError):  # only a cache: the next start checks with qmd again
                    write_private_atomic(self.home.verified_path, fingerprint.encode("ascii"))

    def _verified(self, present: Sequence[CollectionSpec]) -> str | None:
        """A fingerprint of qmd's registry (index.yml) and the collections memoryd wants."""
        registry = read_private(self.home.index_yml)
        if registry is None:
            return None
        digest = hashlib.sha256(registry)
        for spec in present:
            digest.update(f"\0{spec.name}\0{spec.path}\0{spec.pattern}".encode())
        return digest.hexdigest()

    def _still_verified(self, present: Sequence[CollectionSpec]) -> bool:
        """qmd's registry and the collections memoryd wants are as they were last checked."""
        fingerprint = self._verified(present)
        try:
            record = read_private(self.home.verified_path)
        except StateError:
            return False
        return fingerprint is not None and record == fingerprint.encode()

    def _remove_collection(self, name: str) -> None:
        try:
            self._run(["collection", "remove", name], self.config.update.command_timeout_ms)
        except QmdExitError as err:
            if not is_missing_collection_error(err.stderr):
                raise

    def _add_collection(self, spec: CollectionSpec) -> None:
        args = ["collection", "add", spec.path, "--name", spec.name, "--mask", spec.pattern]
        timeout = self.config.update.update_timeout_ms  # add indexes the folder at once
        try:
            self._run(args, timeout)
            return
        except QmdExitError as err:
            if not is_collection_exists_error(err.stderr):
                raise
        # Lost a race with another process, or a leftover holds the name or the path+mask.
        existing = self.list_collections()
        current = existing.get(spec.name)
        if current is not None and spec.matches(current):
            return
        for info in existing.values():
            if info.name == spec.name or spec.matches(info):
                self._remove_collection(info.name)
        self._run(args, timeout)

    def roots(self) -> list[MemoryRoot]:
        """Every collection as a memory root (what `memory_get` may serve, by the same rule)."""
        return [MemoryRoot(s.path, s.pattern, s.source, s.name) for s in self._specs]

    # ------------------------------------------------------------------ update and embed

    def _watch_files(self, stop: threading.Event) -> None:
        """Changes under any memory collection ask for a debounced update (`update.debounceMs`)."""
        from watchfiles import watch

        roots = [r for r in self.roots() if r.source == "memory"]
        folders = sorted({r.path for r in roots if Path(r.path).is_dir()})
        if not folders:
            return

        def relevant(_change: Any, raw: str) -> bool:
            return raw.lower().endswith(".md") or not PurePosixPath(raw).suffix

        for _changes in watch(
            *folders,
            watch_filter=relevant,
            debounce=200,
            step=50,
            recursive=True,
            rust_timeout=200,
            stop_event=stop,
        ):
            self.notify_changed()

    @contextmanager
    def _maintenance(self) -> Iterator[None]:
        with self._maint_lock:
            # polled so that a close ends the wait; another process may hold it for a whole embed
            private_dir(self.home.root)
            private_file(self.home.lock_path)  # filelock opens it by name: no link there
            while True:
                try:
                    self._file_lock.acquire(timeout=0)
                    break
                except filelock.Timeout:
                    if self._closed:
                        raise QmdTimeout(
                            "qmd is closing: its maintenance lock was not taken"
                        ) from None
                    time.sleep(0.1)
            try:
                yield
            finally:
                self._file_lock.release()

    def update(self) -> None:
        """Run `qmd update` now (after a job in flight)."""
        with self._maintenance():
            self._update_locked()

    def _update_locked(self) -> None:
        if self._waiting_for_dir and any(Path(s.path).is_dir() for s in self._waiting_for_dir):
            self.ensure_collections()
        self._run(["update"], self.config.update.update_timeout_ms)
        self._record(last_update_at=time.time())

    def embed(self) -> None:
        """Run `qmd embed` now; a failure raises and starts/extends the backoff."""
        with self._maintenance():
            self._embed_locked()

    def _embed_locked(self) -> None:
        try:
            self._run(["embed"], self.config.update.embed_timeout_ms)
        except QmdError as err:
            self._embed_failures += 1
            delay = embed_backoff_s(self._embed_failures)
            self._embed_retry_at = self._clock() + delay
            self.last_error = f"embed failed: {err}"
            log.warning("qmd embed failed (%s); next try in %.0fs", err, delay)
            raise
        self._embed_failures = 0
        self._embed_retry_at = None
        self._record(last_embed_at=time.time())

    def sync(self) -> None:
        """Update, then embed when the timer (`update.embedInterval`, after any process's embed)
        says so, unless BM25 only needs no vectors; an embed failure is backed off, never raised."""
        with self._maintenance():
            self._update_locked()
            last = self.state().last_embed_at
            interval_s = self.config.update.embed_interval_ms / 1000
            due = last is None or (interval_s > 0 and time.time() - last >= interval_s)
            backing_off = self._embed_retry_at is not None and self._clock() < self._embed_retry_at
            if due and self.search_mode != "search" and not backing_off:
                with suppress(QmdError):
                    self._embed_locked()

    def notify_changed(self) -> None:
        """A memory file changed: ask for a debounced sync (needs the maintenance loop)."""
        if self._update_requested_at is None:
            self._update_requested_at = self._clock()
        self._wake.set()

    def run_maintenance(self, stop: threading.Event) -> None:
        """Timers until `stop` is set or `close()`: boot refresh, `update.interval`, debounced
        `notify_changed`."""
        update = self.config.update
        if update.on_boot and not update.wait_for_boot_sync:
            self._sync_logged()
        interval_s = update.interval_ms / 1000
        next_periodic = self._clock() + interval_s if interval_s > 0 else None
        while not (stop.is_set() or self._closed):
            now = self._clock()
            due = [t for t in (next_periodic,) if t is not None]
            if self._update_requested_at is not None:
                due.append(self._update_requested_at + update.debounce_ms / 1000)
            wait_s = max(0.0, min(due) - now) if due else None
            if self._wake.wait(wait_s):
                self._wake.clear()
                continue
            if stop.is_set() or self._closed:
                return
            self._update_requested_at = None
            self._sync_logged()
            if interval_s > 0:
                next_periodic = self._clock() + interval_s

    def _sync_logged(self) -> None:
        try:
            self.sync()
        except QmdError as err:
            self.last_error = f"update failed: {err}"
            log.warning("qmd update failed: %s", err)

    # ------------------------------------------------------------------ search and reads

    def search(
        self,
        request: SearchRequest | str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        mode: SearchMode | None = None,
        timeout_ms: int | None = None,
    ) -> SearchOutput:
        """Search this agent's collections in one `qmd query` call (see `plan_query`); a str is
        the query, with the limits given here."""
        if isinstance(request, str):
            request = SearchRequest(request, max_results, min_score)
        limits, query, mode = self.config.limits, request.query, mode or self.search_mode
        answer = SearchOutput([], "qmd", "qmd", None, mode, limits.max_injected_chars)
        names = [s.name for s in self._active.values() if request.corpus in ("all", s.source)]
        vectors = bool(names) and mode != "search" and self.has_vectors(names)
        plan = plan_query(query, mode=mode, vectors=vectors) if names else None
        if plan is None:
            return answer
        if mode != "search" and not vectors and not plan.verbatim:
            answer.notes.append(
                "qmd has no embeddings for these collections yet: answered by keywords "
                "(`memoryd index` embeds them)"
            )
        # as many hits whatever maxResults asks: a larger one then only adds results
        pool = limits.max_results + SPARE_HITS
        hits = self._query(plan.document, names, pool, timeout_ms or limits.timeout_ms)
        results = self._results_from_hits(hits, plan.snippet_query, plan.words)
        floor = limits.min_score if request.min_score is None else request.min_score
        passed = [r for r in results if r.score >= floor]
        # the rerank stage over what passed minScore; `explain` says what qmd was sent
        sent = {"query": plan.document.split("\n"), "minScore": floor} if request.explain else None
        if self.rerank_stage is not None and passed:
            argv = self.search_argv(plan.document, names, pool, rerank=True)
            passed = self._reranked(self.rerank_stage, query, passed, answer.notes, sent, argv)
        elif sent is not None:
            passed = [r.with_(explain=_explained(r, sent, None)) for r in passed]
        n = request.max_results or limits.max_results
        model = self.config.models.embed if plan.vector else None
        return dataclasses.replace(answer, results=passed[:n], model=model)

    def search_argv(
        self, document: str, names: Sequence[str], n: int, *, rerank: bool = False
    ) -> list[str]:
        """`qmd query` argv for every collection in one call; only the rerank stage reranks."""
        args = ["query", document, "--json", "-n", str(n)]
        if n > QMD_CANDIDATE_LIMIT:  # qmd fuses only this many candidates unless told more
            args += ["-C", str(n)]
        if not rerank:
            args.append("--no-rerank")
        for name in names:
            args += ["-c", name]
        return args

    def _reranked(
        self,
        stage: RerankStage,
        query: str,
        results: list[SearchResult],
        notes: list[str],
        sent: dict[str, Any] | None,
        argv: list[str],
    ) -> list[SearchResult]:
        """The first `candidates` results in the order of qmd's reranker (asked with `argv`) or
        the remote one, the rest after; it only reorders, as qmd's reranked scores stay high for
        an off-topic query. With `sent`, each result's `explain` says how."""
        paths = [r.path for r in results[: stage.cfg.candidates]]
        scorer = self._qmd_scorer(argv, paths) if stage.cfg.provider == "qmd" else None
        reordered = stage.reorder(query, results, lambda r: r.snippet, notes, scorer=scorer)
        if sent is None:
            return [r for r, _ in reordered]
        return [r.with_(explain=_explained(r, sent, rerank)) for r, rerank in reordered]

    def _qmd_scorer(self, argv: list[str], paths: Sequence[str]) -> Scorer:
        """A scorer giving each path qmd's reranked score for its file (-1 when no longer listed)."""
        by_name = {root.name: root for root in self.roots()}
        workspace = str(self.settings.workspace)

        def score(query: str, documents: Sequence[str], deadline: float) -> list[float]:
            left_ms = max(1, int((deadline - time.monotonic()) * 1000))
            by_path: dict[str, float] = {}
            for hit in parse_search_output(self._run(argv, left_ms).stdout):
                collection, rel = split_qmd_uri(hit.file or "") or ("", "")
                if collection in by_name:
                    path = display_path(
                        by_name[collection], PurePosixPath(rel), workspace=workspace
                    )
                    by_path.setdefault(path, hit.score)
            return [by_path.get(p, -1.0) for p in paths]

        return score

    def _query(self, document: str, names: list[str], n: int, timeout_ms: int) -> list[QmdHit]:
        try:
            out = self._run(self.search_argv(document, names, n), timeout_ms)
        except QmdExitError as err:
            if not is_missing_collection_error(err.stderr):
                raise
            log.warning("qmd lost a collection; re-creating collections and retrying")
            with suppress(FileNotFoundError):  # make `ensure_collections` ask qmd
                self.home.verified_path.unlink()
            self.ensure_collections()
            names = [nm for nm in names if nm in self._active]
            if not names:
                return []
            out = self._run(self.search_argv(document, names, n), timeout_ms)
        return parse_search_output(out.stdout)

    def has_vectors(self, names: Sequence[str]) -> bool:
        """Whether qmd's index holds embeddings for a document of these collections (read-only)."""
        if (
            not names
            or self._index_row(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vectors_vec'", ()
            )
            is None
        ):
            return False
        marks = ",".join("?" * len(names))
        row = self._index_row(
            "SELECT 1 FROM documents d JOIN content_vectors v ON v.hash = d.hash "
            f"WHERE d.active = 1 AND d.collection IN ({marks}) LIMIT 1",
            tuple(names),
        )
        return row is not None

    def _index_row(self, sql: str, params: tuple[str, ...]) -> tuple[Any, ...] | None:
        """One row of qmd's own index, read-only; None when it is missing or unreadable."""
        db = self.home.index_db
        if not db.exists():
            return None
        try:
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
            try:
                row: tuple[Any, ...] | None = conn.execute(sql, params).fetchone()
                return row
            finally:
                conn.close()
        except sqlite3.Error as err:
            log.warning("cannot read qmd's index: %s", err)
            return None

    def _results_from_hits(
        self, hits: list[QmdHit], query: str, words: Sequence[str]
    ) -> list[SearchResult]:
        """qmd's hits as windows cut from the files, interleaved by source, without those too
        few of `words` hold."""
        groups: dict[Source, list[list[SearchResult]]] = {}
        for hit in hits:
            windows = self._hit_windows(hit, query, words, continuation=not groups)
            if windows:
                groups.setdefault(windows[0].source, []).append(windows)
        return interleave(*groups.values())

    def _hit_windows(
        self, hit: QmdHit, query: str, words: Sequence[str], *, continuation: bool
    ) -> list[SearchResult]:
        # qmd names every hit's file (`qmd://<collection>/<path>`); its docid only dates the text
        located = split_qmd_uri(hit.file) if hit.file else None
        if located is None:
            self._drop("unresolvable", hit.file or hit.docid or "?", "qmd named no file")
            return []
        collection, rel = located
        shown = f"qmd/{collection}/{rel}"
        spec = self._active.get(collection)
        if spec is None:
            self._drop("unknown_collection", shown, f"{collection!r} is not one of this agent's")
            return []
        root = MemoryRoot(spec.path, spec.pattern, spec.source, spec.name)
        try:
            read = self._read_hit(root, rel)
        except _Dropped as dropped:
            self._drop(dropped.reason, shown, dropped.detail)
            return []
        if read is None:
            self._drop("missing", shown, "the file is gone")
            return []
        data, lines = read
        line = hit.line or 1
        docid = (hit.docid or "").lstrip("#").lower()
        if (docid and content_docid(data) != docid[:6]) or line > len(lines):
            # edited since qmd indexed it: qmd's line is the old file's
            moved = refind_line(lines, line, hit.snippet)
            if moved is None:
                self._drop("stale", shown, "changed since qmd indexed it; its text is gone")
                return []
            line = moved
        if words and not holds_enough(words, "\n".join(lines)):
            return []  # about something else (not a refusal: nothing is counted)
        path = display_path(root, PurePosixPath(rel), workspace=str(self.settings.workspace))
        return [
            SearchResult(path, first, last, hit.score, text, source=spec.source)
            for text, first, last in hit_windows(
                lines, line, query, self.config.limits.max_snippet_chars, continuation=continuation
            )
        ]

    def _read_hit(self, root: MemoryRoot, rel: str) -> tuple[bytes, list[str]] | None:
        """The hit's file, read only if memoryd's own rules and `fsio`'s checks allow it."""
        if rel.startswith("/"):
            raise _Dropped("absolute_path", "qmd named an absolute path")
        parts = PurePosixPath(rel).parts
        if any(p in ("", ".", "..") for p in parts):
            raise _Dropped("traversal", "the path leaves its collection")
        skipped = next((p for p in parts[:-1] if p in SKIP_DIRS), None)
        if skipped is not None:
            raise _Dropped("not_memory", f"in {skipped}/, a folder memoryd never reads")
        if not root.accepts(PurePosixPath(rel)):
            raise _Dropped("not_memory", f"not a Markdown file {root.pattern!r} selects")
        try:
            got = read_file(root, rel, anchor=self.settings.workspace, max_bytes=MAX_HIT_FILE_BYTES)
        except PathNotAllowed as err:
            raise _Dropped("refused", str(err)) from None
        except MemorydError as err:
            raise _Dropped("unreadable", str(err)) from None
        if got is None:
            return None
        if got.truncated:
            raise _Dropped("too_large", f"larger than {MAX_HIT_FILE_BYTES} bytes")
        return got.data, file_lines(got.data.decode("utf-8", errors="replace"))

    def _drop(self, reason: str, path: str, detail: str) -> None:
        """Count a hit memoryd will not serve, for every process's status."""
        last = " ".join(plain_text(f"{path}: {reason} ({detail})").split())[:300]
        log.warning("qmd hit dropped: %s", last)
        state = self.state()
        counts = {**state.dropped_hits, reason: state.dropped_hits.get(reason, 0) + 1}
        refused_at = time.time() if reason in REFUSED_HITS else state.last_refused_at
        self._record(dropped_hits=counts, last_dropped=last, last_refused_at=refused_at)


def _explained(
    r: SearchResult, qmd: dict[str, Any], rerank: dict[str, Any] | None
) -> dict[str, Any]:
    """A qmd result's `explain` object: the query document qmd was sent, its own score."""
    return {
        "engine": "qmd",
        "qmd": {**qmd, "score": r.score},
        "rerank": rerank,
        "minScore": qmd.get("minScore"),
        "score": r.score,
    }
