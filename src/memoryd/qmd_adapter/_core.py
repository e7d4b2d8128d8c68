"""`QmdCore`: one agent's qmd home, its environment, the qmd calls, the collections, and timed or
requested `qmd update`/`qmd embed` serialized across processes."""

from __future__ import annotations

import hashlib
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

import filelock

from ..config import QmdSettings
from ..core.engine import ProgressFn
from ..core.layout import MemoryRoot
from ..errors import QmdError, QmdExitError, QmdLocked, QmdTimeout, StateError
from ..fsio import private_dir, private_file, read_private, write_private_atomic
from ._collections import CollectionSpec, desired_collections, plan_collections
from ._home import QmdHome, default_shared_models_dir
from ._parse import (
    CollectionInfo,
    is_busy_error,
    is_collection_exists_error,
    is_missing_collection_error,
    parse_collection_list,
    parse_collection_show,
)
from ._plan import SearchMode
from ._rerank import rerank_stage
from ._runner import QmdOutput, resolve_command, run_qmd

log = logging.getLogger("memoryd.qmd")

_Unset = Literal["unset"]


#: qmd's SQLite busy timeout (milliseconds), read once per qmd process.
BUSY_TIMEOUT_ENV: Final = "QMD_SQLITE_BUSY_TIMEOUT"
_BUSY_TRIES: Final = 4


def embed_backoff_s(failures: int) -> float:
    """Wait before the next embed after `failures` consecutive failures: 60 s doubling, ≤ 1 h."""
    return float(min(3600, 60 * 2 ** (failures - 1))) if failures > 0 else 0.0


def busy_timeout_ms(left_s: float, configured: str | None = None) -> int:
    """qmd's busy timeout for a call with `left_s` seconds left: a third, at least 50 ms."""
    ms = max(50, int(left_s * 1000 / 3))
    if configured is not None and configured.strip().isdigit():
        ms = min(ms, int(configured))
    return ms


class QmdCore:
    """The state and qmd calls `QmdManager` searches with; update, embed, their timers, backoff
    and the file watcher."""

    def __init__(
        self,
        settings: QmdSettings,
        *,
        command: str | None = None,
        home: Path | None = None,
        shared_models_dir: Path | _Unset | None = "unset",
        env_overrides: Mapping[str, str | None] | None = None,
        rerank: bool | None = None,
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
        # the search reranks only if told here: `memory.qmd.rerank` is the rerank stage's
        self._rerank = bool(rerank)
        self.rerank_stage = rerank_stage(settings)
        self._clock = clock

        #: The configured search mode (`memory.qmd.searchMode`).
        self.search_mode: SearchMode = self.config.search_mode
        #: Where exported session Markdown lives (`sessions.exportDir`, or the qmd home's).
        self.sessions_dir = settings.exports_dir
        self._specs: list[CollectionSpec] = []
        self._active: dict[str, CollectionSpec] = {}
        self._waiting_for_dir: list[CollectionSpec] = []
        self._collections_lock = threading.RLock()
        self._maint_lock = threading.Lock()
        self._file_lock = filelock.FileLock(
            str(self.home.lock_path), thread_local=False, mode=0o600
        )
        self._version: str | None = None
        self._version_error: str | None = None
        self._started = False
        self._closed = False
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

    def set_event_hook(self, hook: Callable[[str, bool, str | None], None] | None) -> None:
        """`hook(kind, ok, detail)` after every update/embed/version outcome (the orchestrator persists them)."""
        self._event_hook = hook

    def _emit(self, kind: str, ok: bool, detail: str | None = None) -> None:
        if self._event_hook is not None:
            self._event_hook(kind, ok, detail)

    def known_collections(self) -> list[CollectionSpec]:
        """This process's collections, or before start those last verified if qmd's registry is
        unchanged."""
        if self._active or self._started:
            return list(self._active.values())
        present = [s for s in self._desired_now() if Path(s.path).is_dir()]
        return present if self._still_verified(present) else []

    def env(self) -> dict[str, str]:
        """The environment every qmd call of this agent gets."""
        return self.home.env(overrides=self._env_overrides)

    def _run(self, args: Sequence[str], timeout_ms: int, *, check: bool = True) -> QmdOutput:
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
                    check=check,
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

    @property
    def collections(self) -> dict[str, CollectionSpec]:
        """Collections present in qmd for this agent, by name."""
        return dict(self._active)

    def list_collections(self) -> dict[str, CollectionInfo]:
        """What qmd has now (`collection list`, then `show` for each)."""
        timeout = self.config.update.command_timeout_ms
        out = self._run(["collection", "list"], timeout)
        names = parse_collection_list(out.stdout)
        if not names:
            return {}
        bound = getattr(self._bound, "deadline", None)

        def show(name: str) -> CollectionInfo | None:
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
            self._specs = self._desired_now()
            if self.config.sessions.enabled:
                private_dir(self.sessions_dir)
            present = [s for s in self._specs if Path(s.path).is_dir()]
            self._waiting_for_dir = [s for s in self._specs if s not in present]
            if self._still_verified(present) and resolve_command(self.command, self.env()):
                # qmd's registry is byte for byte as last checked: asking qmd would find nothing
                # to do; a collection lost otherwise is re-created on a search's "not found"
                self._active = {s.name: s for s in present}
                return
            existing = self.list_collections()
            for action in plan_collections(present, existing):
                spec = action.spec
                if action.kind == "rebind" and spec is not None:
                    log.info("qmd: re-binding %s to %s (%s)", action.name, spec.path, spec.pattern)
                if action.kind != "add":
                    self._remove_collection(action.name)
                if spec is not None:
                    self._add_collection(spec)
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

    def _still_verified(self, present: Sequence[CollectionSpec]) -> bool:
        """qmd's registry and the collections memoryd wants are as they were last checked."""
        fingerprint = self._verified(present)
        try:
            record = (read_private(self.home.verified_path) or b"").decode("ascii").strip()
        except (StateError, UnicodeDecodeError):
            return False
        return fingerprint is not None and fingerprint == record

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
        specs = self._specs or self._desired_now()
        return [MemoryRoot(s.path, s.pattern, s.source, s.name) for s in specs]

    def _desired_now(self) -> list[CollectionSpec]:
        return desired_collections(
            self.config,
            agent_id=self.settings.agent_id,
            workspace=self.settings.workspace,
            sessions_dir=self.sessions_dir,
            extra_roots=self.settings.extra_roots,
        )

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
            self._acquire_file_lock()
            try:
                yield
            finally:
                self._file_lock.release()

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

    def _may_run(self, force: bool) -> bool:
        """False when a non-forced call should wait for the in-flight job, or is debounced."""
        if force:
            return True
        if self._maint_lock.locked():
            with self._maint_lock:  # the job in flight does what this call would
                return False
        return not self._debounced()

    def update(self, *, force: bool = False) -> bool:
        """Run `qmd update`. Returns whether it ran."""
        if not self._may_run(force):
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
        """Run `qmd embed`. Returns whether it ran; failures raise and start/extend the backoff."""
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
            delay = embed_backoff_s(self._embed_failures)
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
        """Update, then embed when due. An embed failure is backed off, never raised."""
        if not self._may_run(force):
            return False
        with self._maintenance():
            self._update_locked()
            if self.embed_blocked_reason() is None and self.embed_due():
                with suppress(QmdError):
                    self._embed_locked()
        return True

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
            self.sync(force=True)
        except QmdError as err:
            self.last_error = f"update failed: {err}"
            log.warning("qmd update failed: %s", err)
