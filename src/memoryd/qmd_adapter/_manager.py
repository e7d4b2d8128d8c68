"""`QmdManager`: one agent's qmd sidecar — home, collections, timed update/embed, search, reads.

The I/O shell around the pure parts (`_parse`, `_collections`, `_mapping`, `_paths`): it spawns
qmd through `run_qmd`, keeps per-agent state and serializes maintenance within and across
processes.
"""

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

from ..background import Background
from ..config import QmdSettings
from ..core.engine import EngineAnswer, ProgressFn, SearchRequest
from ..core.layout import SKIP_DIRS, MemoryRoot
from ..core.results import FileText, SearchResult, Source
from ..core.status import CollectionStatus, QmdStatus
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
from ..fsio import private_dir, private_file, read_file, read_private, write_private_atomic
from ..memfiles import read_memory_file
from ._collections import CollectionSpec, desired_collections, plan_collections
from ._home import QmdHome, default_shared_models_dir
from ._mapping import apply_limits, display_path, interleave, split_qmd_uri
from ._parse import (
    CollectionInfo,
    QmdHit,
    is_busy_error,
    is_collection_exists_error,
    is_missing_collection_error,
    parse_collection_list,
    parse_collection_show,
    parse_search_output,
)
from ._plan import SearchMode, plan_query
from ._runner import DEFAULT_MAX_OUTPUT_CHARS, QmdOutput, kill_group, resolve_command, run_qmd
from ._snippets import content_docid, file_lines, hit_windows, holds_enough, refind_line

__all__ = ["MAX_HIT_FILE_BYTES", "QmdManager", "SearchMode", "embed_backoff_s"]

log = logging.getLogger("memoryd.qmd")

_Unset = Literal["unset"]

#: Hits asked of qmd beyond `maxResults`, so a dropped hit (see `_read_hit`) leaves no gap.
SPARE_HITS: Final = 2
#: Candidates qmd keeps after fusing its lines' rankings unless `-C` says otherwise.
QMD_CANDIDATE_LIMIT: Final = 40
#: A hit's file is read whole to cut its window; a larger one is dropped (and counted).
MAX_HIT_FILE_BYTES: Final = 8 << 20


@dataclasses.dataclass
class _Found:
    results: list[SearchResult]
    vector: bool = False
    notes: list[str] = dataclasses.field(default_factory=list)


class _Dropped(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def embed_backoff_s(failures: int, *, base_s: float = 60.0, cap_s: float = 3600.0) -> float:
    """Wait before the next embed after `failures` consecutive failures: 60 s doubling, ≤ 1 h."""
    if failures <= 0:
        return 0.0
    return float(min(cap_s, base_s * 2 ** (failures - 1)))


def _busy(err: BaseException) -> bool:
    return isinstance(err, QmdExitError) and is_busy_error(err.stderr)


#: qmd's SQLite busy timeout (milliseconds), read once per qmd process.
BUSY_TIMEOUT_ENV: Final = "QMD_SQLITE_BUSY_TIMEOUT"
_BUSY_TRIES: Final = 4


def busy_timeout_ms(left_s: float, configured: str | None = None) -> int:
    """qmd's busy timeout for a call with `left_s` seconds left: a third, at least 50 ms.

    A third leaves the rest for node to start (≈1 s, more on a loaded machine) and to print. A
    smaller whole number of milliseconds already in qmd's environment (`configured`) is kept.
    """
    ms = max(50, int(left_s * 1000 / 3))
    if configured is not None and configured.strip().isdigit():
        ms = min(ms, int(configured))
    return ms


_VERSION_RE = re.compile(r"^qmd (\d+)\.(\d+)\.(\d+)\b")


def parse_version(text: str) -> str:
    """`qmd 2.8.3 (facd35e)` → `qmd 2.8.3 (facd35e)`; anything else is `QmdBadOutput`."""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not _VERSION_RE.match(line):
        shown = line[:80] or "nothing"
        raise QmdBadOutput(f"qmd --version printed {shown!r}, not 'qmd X.Y.Z'")
    return line


class QmdManager:
    """Drives qmd for one agent. Create, `start()`, use, `close()`.

    `command` overrides `memory.qmd.command`; `home` overrides `<state>/agents/<id>/qmd`;
    `env_overrides` adjusts qmd's environment (a `None` value removes the variable — tests drop
    `CI`, which disables qmd's model calls); `rerank` overrides `memory.qmd.rerank` (off: every
    query carries `--no-rerank`); `shared_models_dir=None` disables the shared models link.
    """

    name: Final = "qmd"

    def __init__(
        self,
        settings: QmdSettings,
        *,
        command: str | None = None,
        home: Path | None = None,
        shared_models_dir: Path | _Unset | None = "unset",
        env_overrides: Mapping[str, str | None] | None = None,
        rerank: bool | None = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        embed_backoff: tuple[float, float] = (60.0, 3600.0),
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
        self._rerank = self.config.rerank if rerank is None else rerank
        self._max_output = max_output_chars
        self._backoff_base, self._backoff_cap = embed_backoff
        self._clock = clock

        self._mode: SearchMode = self.config.search_mode
        self._specs: list[CollectionSpec] = []
        self._active: dict[str, CollectionSpec] = {}
        self._waiting_for_dir: list[CollectionSpec] = []
        self._collections_lock = threading.RLock()
        self._maint_lock = threading.Lock()
        self._maint_idle = threading.Event()
        self._maint_idle.set()
        self._file_lock = filelock.FileLock(
            str(self.home.lock_path), thread_local=False, mode=0o600
        )
        self._version: str | None = None
        self._version_error: str | None = None
        self._started = False
        self._closed = False
        self._background: Background | None = None
        self._running: set[subprocess.Popen[bytes]] = set()
        self._bound = threading.local()  # this thread's deadline for every qmd call (`bounded`)
        self._wake = threading.Event()
        self._update_requested_at: float | None = None

        self.last_update_at: float | None = None  # wall clock (time.time())
        self.last_embed_at: float | None = None
        self._last_update_mono: float | None = None
        self._last_embed_mono: float | None = None
        self._embed_failures = 0
        self._embed_retry_at: float | None = None
        self.last_error: str | None = None
        self.last_probe_error: QmdError | None = None
        self._dropped: dict[str, int] = {}
        self.last_dropped: str | None = None
        self._event_hook: Callable[[str, bool, str | None], None] | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def search_mode(self) -> SearchMode:
        """The configured search mode (`memory.qmd.searchMode`)."""
        return self._mode

    def start(self, background: Background | None = None) -> None:
        """Prepare the agent's qmd home and collections; boot-sync and timers per config.

        With `background`, the maintenance loop (boot refresh unless it was waited for,
        periodic update/embed, debounced requests) and the file watcher run on its threads
        until `close()`.
        """
        models = {k: v for k, v in dataclasses.asdict(self.config.models).items() if v}
        self.home.ensure(models=models, shared_models_dir=self._shared_models)
        self.ensure_collections()
        self._started = True
        update = self.config.update
        if update.on_boot and update.wait_for_boot_sync:
            self.sync(force=True)
        if background is not None:
            self._background = background
            background.spawn("qmd-maintenance", lambda: self.run_maintenance(background.stopping))
            background.spawn("qmd-watch", lambda: self._watch_files(background.stopping))

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
            self.request_update()

    def close(self) -> None:
        """Stop timers; an in-flight qmd call is killed with its process group."""
        self._closed = True
        self._wake.set()
        for process in list(self._running):
            kill_group(process)

    def __enter__(self) -> QmdManager:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def bounded(self, deadline: float | None) -> Iterator[None]:
        """Within, every qmd call of this thread ends by `deadline` (`time.monotonic()`) at the
        latest: a one-off search gives its start-up and refresh no more than its own limit."""
        before = getattr(self._bound, "deadline", None)
        if deadline is not None and before is not None:
            deadline = min(deadline, before)
        self._bound.deadline = deadline if deadline is not None else before
        try:
            yield
        finally:
            self._bound.deadline = before

    def version(self) -> str:
        """`qmd --version` (cached), validated: e.g. `qmd 2.8.3 (facd35e)`; else `QmdBadOutput`."""
        if self._version is None:
            out = self._run(["--version"], self.config.update.command_timeout_ms)
            try:
                self._version = parse_version(out.stdout or out.stderr)
            except QmdBadOutput as err:
                self._version_error = str(err)
                raise
            self._version_error = None
        return self._version

    def probe(self) -> bool:
        """True when qmd starts and answers `qmd X.Y.Z`; never raises a `QmdError`.

        The failure is kept in `last_probe_error`; either way the outcome is reported to the
        event hook (`version`), which the orchestrator persists as the last validation.
        """
        try:
            self._version = None
            version = self.version()
        except QmdError as err:
            self.last_error = str(err)
            self.last_probe_error = err
            self._emit("version", False, f"{type(err).__name__}: {err}")
            return False
        self.last_probe_error = None
        self._emit("version", True, version)
        return True

    # ------------------------------------------------------------------ health events

    def set_event_hook(self, hook: Callable[[str, bool, str | None], None] | None) -> None:
        """`hook(kind, ok, detail)` after every update/embed/version outcome (the orchestrator persists them)."""
        self._event_hook = hook

    def _emit(self, kind: str, ok: bool, detail: str | None = None) -> None:
        if self._event_hook is not None:
            self._event_hook(kind, ok, detail)

    def seed_from_health(
        self,
        last_update_at: float | None,
        last_embed_at: float | None,
        version: str | None = None,
        version_error: str | None = None,
    ) -> None:
        """Start from what another process recorded (status and the embed timer see it): the
        last update and embed, and the last validation of `qmd --version`."""
        now_wall, now_mono = time.time(), self._clock()
        if last_update_at is not None and self.last_update_at is None:
            self.last_update_at = last_update_at
        if last_embed_at is not None and self.last_embed_at is None:
            self.last_embed_at = last_embed_at
            self._last_embed_mono = now_mono - max(0.0, now_wall - last_embed_at)
        if self._version is None and self._version_error is None:
            self._version, self._version_error = version, version_error

    def status(self) -> QmdStatus:
        """What this process knows of the sidecar (persisted health is the orchestrator's)."""
        retry_in = None
        if self._embed_retry_at is not None:
            retry_in = max(0.0, self._embed_retry_at - self._clock())
        return QmdStatus(
            command=self.command,
            version=self._version,
            version_error=self._version_error,
            home=str(self.home.root),
            search_mode=self.search_mode,
            collections=[
                CollectionStatus(name=s.name, path=s.path, pattern=s.pattern, source=s.source)
                for s in self.known_collections()
            ],
            waiting_for_folder=[s.path for s in self._waiting_for_dir],
            last_update_at=self.last_update_at,
            last_embed_at=self.last_embed_at,
            embed_failures=self._embed_failures,
            embed_retry_in_s=retry_in,
            last_error=self.last_error,
            dropped_hits=dict(self._dropped),
            last_dropped=self.last_dropped,
        )

    def known_collections(self) -> list[CollectionSpec]:
        """The collections qmd has for this agent: this process's, or before it started, the
        ones the home last verified, while qmd's registry is unchanged since (no qmd call)."""
        if self._active or self._started:
            return list(self._active.values())
        present = [s for s in self._desired_now() if Path(s.path).is_dir()]
        fingerprint = self._verified(present)
        if fingerprint is not None and fingerprint == self._verified_record():
            return present
        return []

    # ------------------------------------------------------------------ running qmd

    def env(self) -> dict[str, str]:
        """The environment every qmd call of this agent gets."""
        return self.home.env(overrides=self._env_overrides)

    def _run(self, args: Sequence[str], timeout_ms: int, *, check: bool = True) -> QmdOutput:
        """One qmd call within `timeout_ms` in all, retries on a locked index included.

        qmd waits `QMD_SQLITE_BUSY_TIMEOUT` (120 s by default) for a lock before it says
        "database is locked". Left at that, a locked index would surface as our `QmdTimeout`,
        so each try gets a busy timeout of a third of the time left (`busy_timeout_ms`): qmd
        reports the lock itself. A lock that outlasts the tries is raised as `QmdLocked`, and so
        is a retry that times out (the index was locked, that is the news).
        """
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
                    max_output_chars=self._max_output,
                    check=check,
                    running=self._running,
                )
            except QmdTimeout:
                if locked is None:
                    raise
            except QmdExitError as err:
                if not _busy(err):
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

    @property
    def collections(self) -> dict[str, CollectionSpec]:
        """Collections present in qmd for this agent, by name."""
        return dict(self._active)

    def list_collections(self) -> dict[str, CollectionInfo]:
        """What qmd has now (`collection list`, then `show` for each)."""
        timeout = self.config.update.command_timeout_ms
        out = self._run(["collection", "list"], timeout)
        names = parse_collection_list(out.stdout)
        found: dict[str, CollectionInfo] = {}

        bound = getattr(self._bound, "deadline", None)

        def show(name: str) -> None:
            with self.bounded(bound):  # the caller's deadline holds on the pool's threads too
                shown = self._run(["collection", "show", name], timeout)
            info = parse_collection_show(shown.stdout)
            if info is not None:
                found[name] = info

        if names:
            with ThreadPoolExecutor(min(len(names), 4), "qmd-show") as pool:
                for done in [pool.submit(show, name) for name in names]:
                    done.result()
        return found

    def ensure_collections(self) -> None:
        """Add missing collections, re-bind changed ones, drop matching legacy names.

        Collections whose folder does not exist yet are skipped and retried on the next sync.
        """
        with self._collections_lock:
            self._specs = self._desired_now()
            if self.config.sessions.enabled:
                private_dir(self._sessions_dir())
            present = [s for s in self._specs if Path(s.path).is_dir()]
            self._waiting_for_dir = [s for s in self._specs if s not in present]
            fingerprint = self._verified(present)
            if (
                fingerprint is not None
                and fingerprint == self._verified_record()
                and resolve_command(self.command, self.env()) is not None
            ):
                # index.yml (qmd's own collection registry) is byte for byte what it was when
                # these collections were last checked: `collection list` + one `show` each
                # would cost four node processes and find nothing to do. Anything that changes
                # the registry (`qmd collection remove`, another agent config) changes the bytes;
                # a collection lost otherwise is re-created on the search's "not found".
                self._active = {s.name: s for s in present}
                return
            existing = self.list_collections()
            for action in plan_collections(present, existing):
                if action.kind == "remove":
                    self._remove_collection(action.name)
                elif action.kind == "rebind":
                    assert action.spec is not None
                    log.info(
                        "qmd: re-binding collection %s to %s (%s)",
                        action.name,
                        action.spec.path,
                        action.spec.pattern,
                    )
                    self._remove_collection(action.name)
                    self._add_collection(action.spec)
                else:
                    assert action.spec is not None
                    self._add_collection(action.spec)
            self._active = {s.name: s for s in present}
            self._record_verified(present)

    def _verified(self, present: Sequence[CollectionSpec]) -> str | None:
        """A fingerprint of qmd's registry (index.yml) and the collections memoryd wants."""
        registry = read_private(self.home.index_yml)
        if registry is None:
            return None
        digest = hashlib.sha256(registry)
        for spec in present:
            digest.update(f"\0{spec.name}\0{spec.path}\0{spec.pattern}".encode())
        return digest.hexdigest()

    def _verified_record(self) -> str | None:
        try:
            data = read_private(self.home.verified_path)
            return (data or b"").decode("ascii").strip() or None
        except (StateError, UnicodeDecodeError):
            return None

    def _record_verified(self, present: Sequence[CollectionSpec]) -> None:
        fingerprint = self._verified(present)
        if fingerprint is None:
            return
        with suppress(StateError):  # only a cache: the next start checks with qmd again
            write_private_atomic(self.home.verified_path, fingerprint.encode("ascii"))

    def forget_verified(self) -> None:
        """Make the next `ensure_collections` ask qmd (a search found a collection missing)."""
        with suppress(FileNotFoundError):
            self.home.verified_path.unlink()

    @property
    def sessions_dir(self) -> Path:
        """Where exported session Markdown lives (`sessions.exportDir`, or the qmd home's)."""
        return self.settings.exports_dir

    def _sessions_dir(self) -> Path:
        return self.sessions_dir

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

    # ------------------------------------------------------------------ update / embed

    @contextmanager
    def _maintenance(self) -> Iterator[None]:
        with self._maint_lock:
            self._maint_idle.clear()
            try:
                self._acquire_file_lock()
                try:
                    yield
                finally:
                    self._file_lock.release()
            finally:
                self._maint_idle.set()

    def _acquire_file_lock(self) -> None:
        # Polled so that a close ends the wait; another process may hold it for a whole embed.
        private_dir(self.home.root)
        private_file(self.home.lock_path)  # filelock opens it by name: no link there
        while True:
            try:
                self._file_lock.acquire(timeout=0)
                return
            except filelock.Timeout:
                if self._closed:
                    raise QmdTimeout("qmd is closing: its maintenance lock was not taken") from None
                time.sleep(0.1)

    def _join_or_lock(self, force: bool) -> bool:
        """False when a non-forced call should just wait for the in-flight job instead."""
        if not force and self._maint_lock.locked():
            self._maint_idle.wait()
            return False
        return True

    def update(self, *, force: bool = False) -> bool:
        """Run `qmd update`. Returns whether it ran.

        A non-forced call joins an in-flight maintenance job, and is skipped within
        `update.debounceMs` of the last update; a forced one queues behind the in-flight job.
        """
        if not self._join_or_lock(force):
            return False
        if not force and self._debounced():
            return False
        with self._maintenance():
            self._update_locked()
        return True

    def _update_locked(self) -> None:
        if self._waiting_for_dir and any(Path(s.path).is_dir() for s in self._waiting_for_dir):
            self.ensure_collections()
        try:
            self._run(["update"], self.config.update.update_timeout_ms)
        except QmdError as err:
            self._emit("update", False, str(err))
            raise
        self.last_update_at = time.time()
        self._last_update_mono = self._clock()
        self._emit("update", True)

    def _debounced(self) -> bool:
        last = self._last_update_mono
        return last is not None and self._clock() - last < self.config.update.debounce_ms / 1000

    def embed_due(self) -> bool:
        """Whether the embed timer says it is time (ignores backoff and mode)."""
        interval_ms = self.config.update.embed_interval_ms
        if self._last_embed_mono is None:
            return True
        return interval_ms > 0 and self._clock() - self._last_embed_mono >= interval_ms / 1000

    def embed_blocked_reason(self) -> str | None:
        """Why a non-forced embed would be skipped now, or None."""
        if self.search_mode == "search":
            return "searchMode is 'search' (BM25 only): no vectors needed"
        if self._embed_retry_at is not None and self._clock() < self._embed_retry_at:
            return f"backing off after {self._embed_failures} failed embed(s)"
        return None

    def embed(self, *, force: bool = False) -> bool:
        """Run `qmd embed`. Returns whether it ran; failures raise and start/extend the backoff.

        Without `force`, skipped in `search` mode and while backing off.
        """
        if not force and self.embed_blocked_reason() is not None:
            return False
        with self._maintenance():
            self._embed_locked()
        return True

    def _embed_locked(self) -> None:
        try:
            self._run(["embed"], self.config.update.embed_timeout_ms)
        except QmdError as err:
            self._embed_failures += 1
            delay = embed_backoff_s(
                self._embed_failures, base_s=self._backoff_base, cap_s=self._backoff_cap
            )
            self._embed_retry_at = self._clock() + delay
            self.last_error = f"embed failed: {err}"
            log.warning("qmd embed failed (%s); next try in %.0fs", err, delay)
            self._emit("embed", False, str(err))
            raise
        self._embed_failures = 0
        self._embed_retry_at = None
        self.last_embed_at = time.time()
        self._last_embed_mono = self._clock()
        self._emit("embed", True)

    def sync(self, *, force: bool = False, progress: ProgressFn | None = None) -> bool:
        """Update, then embed when due. An embed failure is backed off, never raised.

        Returns whether an update ran (False when joined or debounced).
        """
        if not self._join_or_lock(force):
            return False
        if not force and self._debounced():
            return False
        with self._maintenance():
            self._update_locked()
            if self.embed_blocked_reason() is None and self.embed_due():
                with suppress(QmdError):
                    self._embed_locked()
        return True

    def request_update(self) -> None:
        """Ask for a debounced sync (e.g. a memory file changed); needs the maintenance loop."""
        if self._update_requested_at is None:
            self._update_requested_at = self._clock()
        self._wake.set()

    def run_maintenance(self, stop: threading.Event) -> None:
        """Timers until `stop` is set or `close()`: boot refresh, `update.interval`, debounced
        `request_update`."""
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
            self.sync(force=True)
        except QmdError as err:
            self.last_error = f"update failed: {err}"
            log.warning("qmd update failed: %s", err)

    # ------------------------------------------------------------------ search

    def search(
        self,
        request: SearchRequest | str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        mode: SearchMode | None = None,
    ) -> EngineAnswer:
        """The engine contract's search: ranked hits with their provenance (see `search_hits`)."""
        if isinstance(request, str):
            request = SearchRequest(request, max_results, min_score)
        found = self._search(
            request.query,
            max_results=request.max_results,
            min_score=request.min_score,
            mode=mode,
            corpus=request.corpus,
        )
        return EngineAnswer(
            results=found.results,
            engine="qmd",
            provider="qmd",
            model=self.config.models.embed if found.vector else None,
            mode=mode or self.search_mode,
            max_injected_chars=self.config.limits.max_injected_chars,
            notes=found.notes,
        )

    def search_hits(
        self,
        query: str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        timeout_ms: int | None = None,
        rerank: bool | None = None,
        mode: SearchMode | None = None,
        corpus: str = "all",
    ) -> list[SearchResult]:
        """Search this agent's collections in one `qmd query` call (see `plan_query`).

        Each hit becomes the snippet window memoryd cuts from the file itself, read by the same
        rules as `memory_get` (see `_snippets`); a hit that fails them is dropped and counted
        (`status().dropped_hits`). Memory and session hits are interleaved. `mode` overrides the
        configured search mode for this call (warm-up uses it). Applies `limits.maxResults`,
        `minScore` and `maxSnippetChars`; the injected-characters budget is the orchestrator's.
        Raises a `QmdError` subclass on failure (never silently returns nothing).
        """
        found = self._search(
            query,
            max_results=max_results,
            min_score=min_score,
            timeout_ms=timeout_ms,
            rerank=rerank,
            mode=mode,
            corpus=corpus,
        )
        return found.results

    def _search(
        self,
        query: str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        timeout_ms: int | None = None,
        rerank: bool | None = None,
        mode: SearchMode | None = None,
        corpus: str = "all",
    ) -> _Found:
        limits = self.config.limits
        n = max_results or limits.max_results
        names = [s.name for s in self._active.values() if corpus in ("all", s.source)]
        if not names:
            return _Found([])
        mode = mode or self.search_mode
        vectors = mode != "search" and self.has_vectors(names)
        plan = plan_query(query, mode=mode, vectors=vectors)
        if plan is None:
            return _Found([])
        notes = []
        if mode != "search" and not vectors and not plan.verbatim:
            notes.append(
                "qmd has no embeddings for these collections yet: answered by keywords "
                "(`memoryd index` embeds them)"
            )
        use_rerank = self._rerank if rerank is None else rerank
        hits = self._query(
            plan.document, names, n + SPARE_HITS, timeout_ms or limits.timeout_ms, use_rerank
        )
        results = self._results_from_hits(hits, plan.snippet_query, plan.words)
        kept = apply_limits(
            results,
            max_results=n,
            min_score=limits.min_score if min_score is None else min_score,
        )
        return _Found(kept, plan.vector, notes)

    def search_argv(
        self, document: str, names: Sequence[str], n: int, *, rerank: bool | None = None
    ) -> list[str]:
        """`[query, document, --json, -n, N, (-C N), (--no-rerank), -c, coll…]`: one call for
        every collection."""
        args = ["query", document, "--json", "-n", str(n)]
        if n > QMD_CANDIDATE_LIMIT:  # qmd fuses only this many candidates unless told more
            args += ["-C", str(n)]
        if not (self._rerank if rerank is None else rerank):
            args.append("--no-rerank")
        for name in names:
            args += ["-c", name]
        return args

    def _query(
        self, document: str, names: list[str], n: int, timeout_ms: int, rerank: bool
    ) -> list[QmdHit]:
        recreated = False
        while True:
            try:
                out = self._run(self.search_argv(document, names, n, rerank=rerank), timeout_ms)
            except QmdExitError as err:
                if not recreated and is_missing_collection_error(err.stderr):
                    recreated = True
                    log.warning("qmd lost a collection; re-creating collections and retrying")
                    self.forget_verified()
                    self.ensure_collections()
                    names = [nm for nm in names if nm in self._active]
                    if not names:
                        return []
                    continue
                raise
            return parse_search_output(out.stdout)

    def has_vectors(self, names: Sequence[str]) -> bool:
        """Whether qmd's index holds embeddings for a document of these collections (read-only)."""
        db = self.home.index_db
        if not names or not db.exists():
            return False
        try:
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
        except sqlite3.Error:
            return False
        try:
            table = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vectors_vec'"
            ).fetchone()
            if table is None:
                return False
            marks = ",".join("?" * len(names))
            row = conn.execute(
                "SELECT 1 FROM documents d JOIN content_vectors v ON v.hash = d.hash "
                f"WHERE d.active = 1 AND d.collection IN ({marks}) LIMIT 1",
                tuple(names),
            ).fetchone()
        except sqlite3.Error as err:
            log.warning("cannot read qmd's vectors: %s", err)
            return False
        finally:
            conn.close()
        return row is not None

    # ------------------------------------------------------------------ hits → results

    def _results_from_hits(
        self, hits: list[QmdHit], query: str, words: Sequence[str]
    ) -> list[SearchResult]:
        """qmd's hits, in its order, as windows memoryd cut from the files (interleaved by
        source); a hit holding too few of `words` is left out (`holds_enough`)."""
        groups: dict[Source, list[list[SearchResult]]] = {}
        for hit in hits:
            windows = self._hit_windows(hit, query, words, continuation=not groups)
            if windows:
                groups.setdefault(windows[0].source, []).append(windows)
        return interleave(*groups.values())

    def _hit_windows(
        self, hit: QmdHit, query: str, words: Sequence[str], *, continuation: bool
    ) -> list[SearchResult]:
        located = split_qmd_uri(hit.file) if hit.file else None
        if located is None and hit.docid:
            located = self._lookup_docid(hit.docid)
        if located is None:
            self._drop("unresolvable", hit.file or hit.docid or "?", "qmd named no file")
            return []
        collection, rel = located
        shown = f"qmd/{collection}/{rel}"
        spec = self._active.get(collection)
        if spec is None:
            self._drop("unknown_collection", shown, f"{collection!r} is not one of this agent's")
            return []
        try:
            read = self._read_hit(spec, rel)
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
        roots = {s.name: s.path for s in self._specs}
        path = display_path(collection, rel, roots=roots, workspace=str(self.settings.workspace))
        return [
            SearchResult(path, first, last, hit.score, text, source=spec.source)
            for text, first, last in hit_windows(
                lines,
                line,
                query,
                self.config.limits.max_snippet_chars,
                continuation=continuation,
            )
        ]

    def _read_hit(self, spec: CollectionSpec, rel: str) -> tuple[bytes, list[str]] | None:
        """The hit's file by memoryd's own rules: its collection's root and pattern, the skip
        list, and `fsio`'s descriptor checks (no symlink, one hard link, a regular file)."""
        if rel.startswith("/"):
            raise _Dropped("absolute_path", "qmd named an absolute path")
        parts = PurePosixPath(rel).parts
        if any(p in ("", ".", "..") for p in parts):
            raise _Dropped("traversal", "the path leaves its collection")
        skipped = next((p for p in parts[:-1] if p in SKIP_DIRS), None)
        if skipped is not None:
            raise _Dropped("not_memory", f"in {skipped}/, a folder memoryd never reads")
        root = MemoryRoot(spec.path, spec.pattern, spec.source, spec.name)
        if not root.accepts(PurePosixPath(rel)):
            raise _Dropped("not_memory", f"not a Markdown file {spec.pattern!r} selects")
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
        self._dropped[reason] = self._dropped.get(reason, 0) + 1
        self.last_dropped = f"{path}: {reason} ({detail})"
        log.warning("qmd hit dropped: %s", self.last_dropped)
        self._emit("dropped", False, f"{reason}\t{self.last_dropped}")

    def _lookup_docid(self, docid: str) -> tuple[str, str] | None:
        """Resolve `#abc123` through qmd's `documents` table (read-only, with a busy timeout)."""
        prefix = docid.lstrip("#").lower()
        if not prefix or not all(c in "0123456789abcdef" for c in prefix):
            return None
        db = self.home.index_db
        if not db.exists():
            return None
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
        try:
            row = conn.execute(
                "SELECT collection, path FROM documents WHERE hash LIKE ? AND active = 1 "
                "ORDER BY collection, path LIMIT 1",
                (prefix + "%",),
            ).fetchone()
        except sqlite3.Error as err:
            log.warning("cannot read qmd's documents table: %s", err)
            return None
        finally:
            conn.close()
        return (str(row[0]), str(row[1])) if row else None

    # ------------------------------------------------------------------ memory_get

    def roots(self) -> list[MemoryRoot]:
        """Every collection as a memory root (what `memory_get` may serve, by the same rule)."""
        specs = self._specs or self._desired_now()
        return [MemoryRoot(s.path, s.pattern, s.source, s.name) for s in specs]

    def get(self, path: str, from_line: int | None = None, lines: int | None = None) -> FileText:
        """Read a memory file by a path search returned; missing files give empty text.

        `qmd/<collection>/<rel>` reads from that collection's root; other paths are
        workspace-relative. Either way the file must match its collection's pattern (the rule
        is `core.layout.locate`, the same as the built-in index's); exported transcripts are
        never served.
        """
        got = read_memory_file(self.roots(), self.settings.workspace, path, from_line, lines)
        return got if not path.startswith("qmd/") else dataclasses.replace(got, path=path)

    read_file = get

    def notify_changed(self) -> None:
        """A memory file changed: ask for a debounced `qmd update` (needs the maintenance loop)."""
        self.request_update()

    def _desired_now(self) -> list[CollectionSpec]:
        return desired_collections(
            self.config,
            agent_id=self.settings.agent_id,
            workspace=self.settings.workspace,
            sessions_dir=self._sessions_dir(),
            extra_roots=self.settings.extra_roots,
        )
