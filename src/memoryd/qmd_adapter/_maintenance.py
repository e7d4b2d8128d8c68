"""`QmdMaintained`: timed and requested `qmd update`/`qmd embed`, serialized across processes."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath
from typing import Any

import filelock

from ..core.engine import ProgressFn
from ..errors import QmdError, QmdTimeout
from ..fsio import private_dir, private_file
from ._core import QmdCore

log = logging.getLogger("memoryd.qmd")


def embed_backoff_s(failures: int) -> float:
    """Wait before the next embed after `failures` consecutive failures: 60 s doubling, ≤ 1 h."""
    return float(min(3600, 60 * 2 ** (failures - 1))) if failures > 0 else 0.0


class QmdMaintained(QmdCore):
    """Update and embed, their timers, backoff and the file watcher."""

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

    def _may_run(self, force: bool) -> bool:
        """False when a non-forced call should wait for the in-flight job, or is debounced."""
        if force:
            return True
        if self._maint_lock.locked():
            self._maint_idle.wait()
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
