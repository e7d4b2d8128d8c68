"""The indexer: the text phase (fast, before a search), the sessions phase, the vector phase
(in batches, never blocking searches), and rebuilds published in one transaction."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from ..core.chunking import chunk_lines, content_hash
from ..core.engine import IndexCheck, ProgressFn
from ..core.text import binary_reason
from ..embeddings.base import DeadlineReached
from ..errors import BatchPending, IndexCorrupt, MemorydError, MemoryReadFailed, StateError
from ..fsio import FileRead, open_private, read_file, read_private
from ..memfiles import (
    MemoryFile,
    discover,
    list_transcripts,
    transcript_display_path,
    unchanged_since,
)

if TYPE_CHECKING:
    import numpy as np

    from ..core.chunking import Chunk
    from ._engine import Engine, Store
    from ._stats import CorpusStatistics

log = logging.getLogger("memoryd.builtin_index")

EMBED_BATCH = 16
#: The first batch when progress is shown: small, so the rate and ETA appear within seconds.
FIRST_SHOWN_BATCH = 2
#: The share of the time left that a batch under a deadline is sized to take.
BUDGET_FILL = 0.7
#: A search embeds a backlog only when it would take at most this many of its budgets; behind a
#: longer one it answers by keywords at once and `memoryd index` or `serve` finishes it.
FUTILE_BACKLOG_BUDGETS = 4
#: The rate assumed before any chunk was embedded in this process.
ASSUMED_SECONDS_PER_CHUNK = 0.1
#: Where the files a sync left out are recorded (see `LeftOut`).
LEFT_OUT_META_KEY: Final = "left_out"
#: When the last sync that changed the index finished (for other processes' status).
LAST_SYNC_META_KEY: Final = "last_sync_at"
#: What the walk behind the memory files' rows found (`memfiles.unchanged_since`): written with
#: those rows, in the same transaction, so it vouches for them.
WALK_META_KEY: Final = "walk"


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

    def wrote(self) -> bool:
        """Whether this sync changed the index (files, chunks or vectors)."""
        return bool(
            self.files_changed
            or self.files_removed
            or self.vectors_embedded
            or self.vectors_from_cache
            or self.reindexed
        )


class LeftOut(NamedTuple):
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
        """Unchanged since left out (the change time too: a chmod makes it readable)."""
        return (self.size, self.mtime_ns, self.ctime_ns) == (mf.size, mf.mtime_ns, mf.ctime_ns)


def left_out_from_meta(meta: dict[str, str]) -> dict[str, LeftOut]:
    try:
        raw = json.loads(meta.get(LEFT_OUT_META_KEY) or "{}")
        return {
            p: LeftOut(p, str(r), str(d), int(size), int(mtime), int(ctime))
            for p, (r, d, size, mtime, ctime) in raw.items()
        }
    except (ValueError, TypeError, AttributeError):
        return {}


def _read_transcript(path: Path) -> tuple[bytes, float]:
    """A transcript's bytes and its mtime from before the read (a later append shows as a change)."""
    with open_private(path) as fh:  # transcripts are state: never read through a link
        mtime = os.fstat(fh.fileno()).st_mtime
        return fh.read(), mtime


def _transcript_chunks(path: Path, data: bytes, tokens: int, overlap: int) -> list[Chunk]:
    from ..core.forgotten import Tombstones, forgotten_path, scrub_messages
    from ..core.transcripts import chunk_transcript, parse_transcript_text

    messages, _malformed, _lines = parse_transcript_text(
        data.decode("utf-8", errors="replace"), sanitize=True
    )
    tombstones = Tombstones.from_json(read_private(forgotten_path(path.parent)))
    messages = scrub_messages(messages, tombstones)
    return chunk_transcript(messages, tokens=tokens, overlap=overlap)


def _bytes_hash(data: bytes) -> str:
    return content_hash(data.decode("utf-8", errors="replace"))


class Indexer:
    """Syncs one engine's store with its memory files and transcripts, one sync at a time."""

    def __init__(self, engine: Engine, stats: CorpusStatistics) -> None:
        self.engine = engine
        self.stats = stats
        self.lock = threading.Lock()
        self.last_sync_at: float | None = None
        self.last_error: str | None = None
        # seconds per embedded chunk, per provider, kept across syncs (sizes budgeted batches)
        self._embed_rates: dict[tuple[str, str, str], float] = {}

    def sync(
        self,
        *,
        force: bool = False,
        embed: bool = True,
        embed_budget_s: float | None = None,
        progress: ProgressFn | None = None,
        before_search: bool = False,
        lock_wait_s: float | None = None,
    ) -> SyncReport:
        """Bring the index up to date with the files (`MemoryIndex.sync`). `before_search` (a
        search's pre-sync) indexes only the memory files, skips a due rebuild, waits at most
        `sync.searchWaitMs` for a write lock and never raises for the state; another thread's sync
        is waited for `lock_wait_s` at most, counted against `embed_budget_s`."""
        asked = time.monotonic()
        if not self.lock.acquire(timeout=-1 if lock_wait_s is None else lock_wait_s):
            return SyncReport()  # the other sync's answer will do: searches read what it commits
        store = self.engine.store
        try:
            if embed_budget_s is not None:
                embed_budget_s = max(0.0, embed_budget_s - (time.monotonic() - asked))
            run = functools.partial(
                self.sync_locked,
                embed=embed,
                embed_budget_s=embed_budget_s,
                progress=progress,
                before_search=before_search,
            )
            started = time.perf_counter()
            seen_recoveries = len(store.recovered)
            try:
                try:
                    report = run(force=force)
                except IndexCorrupt:
                    if len(store.recovered) == seen_recoveries:
                        raise
                    # the damaged file is aside and a fresh one in place: fill it now
                    self.engine.bind_workspace(store)
                    report = run(force=False)
            except StateError as err:
                self.last_error = str(err)
                _record(
                    store, "last_sync_error", json.dumps({"message": str(err), "at": time.time()})
                )
                if before_search:
                    log.warning("searching without syncing first: %s", err)
                    return SyncReport()
                raise
            self.last_error = None
            _record(store, "last_sync_error", None)
            report.seconds = time.perf_counter() - started
            self.last_sync_at = time.time()
            if report.wrote():  # a sync that wrote nothing writes no time
                _record(store, LAST_SYNC_META_KEY, str(self.last_sync_at))
            return report
        finally:
            self.lock.release()

    def backlog_fits(self, budget_s: float, store: Store) -> bool:
        """Whether embedding the pending chunks would take at most `FUTILE_BACKLOG_BUDGETS`."""
        eng = self.engine
        if eng.provider is None or not store.vector.available:
            return True  # a text-only sync: quick
        rate = self._embed_rates.get(eng.provider_key(), ASSUMED_SECONDS_PER_CHUNK)
        return store.pending_count() * rate <= FUTILE_BACKLOG_BUDGETS * budget_s

    def sync_locked(
        self,
        *,
        force: bool,
        embed: bool = False,
        embed_budget_s: float | None = None,
        progress: ProgressFn | None = None,
        before_search: bool = False,
    ) -> SyncReport:
        eng = self.engine
        store = eng.store
        if force:
            # a rebuild replaces every page anyway; a structurally damaged file is kept aside
            problem = store.verify()
            if problem is not None:
                store.recover(problem)
                eng.bind_workspace(store)
        reason = "forced" if force else eng.reindex_reason()
        if reason is not None and before_search:
            return SyncReport(reindex_reason=reason)
        if reason is not None:
            report = self._reindex(reason, embed, embed_budget_s, progress)
        else:
            report = SyncReport()
            wait_ms = eng.cfg.sync.search_wait_ms if before_search else None
            store.guard_signature = eng.signature()
            self.text_phase(store, report, progress, wait_ms=wait_ms)
            eng.dirty = False
            if not before_search:
                self.sessions_phase(store, report, False, wait_ms=wait_ms)
            if embed:
                self._vector_phase(store, report, embed_budget_s, progress)
        report.vectors_pending = store.counts()["pending_vectors"] if eng.provider else 0
        if embed and report.wrote():
            self.stats.store_reference(store)
        return report

    def check(self) -> IndexCheck:
        """Verify the index (`MemoryIndex.check`); a damaged one is moved aside and rebuilt."""
        eng = self.engine
        started = time.perf_counter()
        with self.lock:
            store = eng.store
            problem = store.verify(deep=True)
            if problem is None:
                return IndexCheck(ok=True, seconds=time.perf_counter() - started)
            if store.read_only is not None:
                raise IndexCorrupt(
                    f"index {eng.path} is damaged ({problem}) and cannot be replaced: it is "
                    f"read-only ({store.read_only})"
                )
            rec, _ = store.recover(problem)
            eng.bind_workspace(store)
            self.sync_locked(force=False)
        return IndexCheck(
            ok=False,
            problem=problem,
            moved_to=str(rec.moved_to) if rec.moved_to else None,
            rebuilt=True,
            seconds=time.perf_counter() - started,
        )

    # ------------------------------------------------------------------ text phase

    def text_phase(
        self,
        store: Store,
        report: SyncReport,
        progress: ProgressFn | None,
        *,
        wait_ms: int | None = None,
    ) -> None:
        """Index changed memory files in one transaction: a failure leaves the index as it was."""
        cfg = self.engine.cfg
        stamp = store.meta_value(WALK_META_KEY)
        same = unchanged_since(stamp, cfg.roots, cfg.workspace)
        if same is not None:
            report.files_scanned = same  # as the walk behind the rows found them: nothing to do
            return
        found = discover(cfg.roots, cfg.workspace)
        files = found.files
        report.files_scanned = len(files)
        skipped = json.dumps(found.skipped, sort_keys=True)
        if not self._text_changed(store, files, skipped):
            if found.stamp != stamp and store.read_only is None:
                self._save_stamp(store, files, skipped, found.stamp)
            return  # nothing to write: a read-only index syncs fine
        with store.transaction(wait_ms=wait_ms, doing="index the memory files"):
            meta = store.meta()
            if not store.signature_matches():
                log.info("index %s was rebuilt elsewhere with other settings", self.engine.path)
                return
            known = store.files()
            undecodable: set[str] = set(json.loads(meta.get("undecodable") or "[]"))
            was_left_out = left_out_from_meta(meta)
            left_out: dict[str, LeftOut] = {}
            seen: set[str] = set()
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
                written = self._write_file(store, mf, got, prev, undecodable)
                if written is None:
                    continue
                report.files_changed += 1
                report.chunks_written += written
                if progress:
                    progress("files", i, len(files))
            undecodable &= seen
            wanted = {
                "undecodable": json.dumps(sorted(undecodable)),
                "skipped": skipped,
                LEFT_OUT_META_KEY: json.dumps({p: e[1:] for p, e in sorted(left_out.items())}),
            }
            if meta.get("signature") is None:
                wanted["signature"] = json.dumps(self.engine.signature())
            if changed := {k: v for k, v in wanted.items() if meta.get(k) != v}:
                store.set_meta(changed)
            for gone in set(known) - seen:
                if known[gone][3] == "memory":
                    store.remove_file(gone)
                    report.files_removed += 1
            _set_meta(store, WALK_META_KEY, found.stamp, meta.get(WALK_META_KEY))

    def _save_stamp(
        self, store: Store, files: Sequence[MemoryFile], skipped: str, stamp: str | None
    ) -> None:
        """Record the walk of an unchanged index, if no other sync changed it meanwhile; never
        waits for the write lock (the next search walks again instead)."""
        try:
            with store.transaction(wait_ms=0, doing="record the memory files' state"):
                if not self._text_changed(store, files, skipped):
                    _set_meta(store, WALK_META_KEY, stamp, store.meta_value(WALK_META_KEY))
        except IndexCorrupt:
            raise
        except StateError as err:
            log.debug("memory files' state not recorded: %s", err)

    def _write_file(
        self,
        store: Store,
        mf: MemoryFile,
        got: FileRead,
        prev: tuple[Any, ...] | None,
        undecodable: set[str],
    ) -> int | None:
        """Store a read file's chunks (how many rows it wrote); None when its text is unchanged."""
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
            return None
        tokens, overlap = self.engine.chunking.for_file(mf.rel_path)
        chunks = chunk_lines(text, tokens=tokens, overlap=overlap)
        if self.engine.cfg.redact_notes:
            # imported here: a search that redacts nothing never loads the rules
            from ..core.redact import redact_secrets

            chunks = [dataclasses.replace(c, text=redact_secrets(c.text)) for c in chunks]
        return store.replace_file(
            mf.rel_path,
            str(mf.abs_path),
            "memory",
            file_hash,
            mtime,
            got.size,
            [(c.start_line, c.end_line, c.hash, c.text, c.tokens) for c in chunks],
        )

    def _read_for_index(self, mf: MemoryFile) -> tuple[FileRead | None, LeftOut | None]:
        """The file's bytes to index, or why it is left out (None, None: it vanished)."""
        cfg = self.engine.cfg
        limit = cfg.sync.max_file_bytes

        def too_large(size: int) -> LeftOut:
            return LeftOut.of(
                mf, "too_large", f"{size:,} bytes, over sync.maxFileBytes ({limit:,})", size
            )

        if mf.size > limit:
            return None, too_large(mf.size)
        try:
            got = read_file(mf.root, mf.rel, anchor=cfg.workspace, max_bytes=limit)
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

    @staticmethod
    def changed_files(store: Store, files: Sequence[MemoryFile], meta: dict[str, str]) -> int:
        """Memory files added, changed or removed since the last sync (a stat pass, no reads)."""
        known = {p: v for p, v in store.files().items() if v[3] == "memory"}
        left_out = left_out_from_meta(meta)
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
        meta = store.meta()
        if meta.get("signature") is None or meta.get("skipped") != skipped:
            return True
        return self.changed_files(store, files, meta) > 0

    # ------------------------------------------------------------------ sessions phase

    def _due_transcripts(
        self, sessions_dir: Path, known: dict[str, tuple[Any, ...]], force: bool
    ) -> tuple[list[tuple[Path, str]], set[str]]:
        """The transcripts to index (new, edited, or grown by the sync.sessions deltas) and the
        ones the index keeps; one idle past `retentionDays` is in neither, so it leaves."""
        days = self.engine.cfg.session_retention_days
        cutoff = None if days is None else time.time() - days * 86_400
        seen: set[str] = set()
        due: list[tuple[Path, str]] = []
        for path in list_transcripts(sessions_dir):
            rel = transcript_display_path(path)
            try:
                st = path.stat()
            except OSError:
                seen.add(rel)  # a passing failure does not drop it from the index
                continue
            if cutoff is not None and st.st_mtime < cutoff:
                continue
            seen.add(rel)
            prev = known.get(rel)
            if prev is not None and prev[1] == st.st_mtime and prev[2] == st.st_size:
                continue
            if prev is not None and not force and not self._grown_enough(path, prev):
                continue
            due.append((path, rel))
        return due, seen

    def _grown_enough(self, path: Path, prev: tuple[Any, ...]) -> bool:
        """Whether an indexed transcript that changed is due: edited, or grown past a delta."""
        from ..core.transcripts import transcript_due

        try:
            data, _ = _read_transcript(path)
        except OSError as err:  # gone, or a link swapped in after the listing
            log.warning("cannot read transcript %s: %s", path, err)
            return False
        size = int(prev[2])
        indexed = data[:size]
        if len(data) < size or _bytes_hash(indexed) != prev[0]:
            return True  # edited: due at once
        grew_lines = data.count(b"\n") - indexed.count(b"\n")
        deltas = self.engine.cfg.sync.sessions
        return transcript_due(
            len(data) - size, grew_lines, deltas.delta_bytes, deltas.delta_messages
        )

    def sessions_phase(
        self, store: Store, report: SyncReport, force: bool, *, wait_ms: int | None = None
    ) -> None:
        """Index new and changed transcripts (a changed one writes only the chunks it did not
        have) and drop deleted ones and those past `memory.qmd.sessions.retentionDays`."""
        cfg = self.engine.cfg
        if cfg.sessions_dir is None:
            return
        known = {p: v for p, v in store.files().items() if v[3] == "sessions"}
        due, seen = self._due_transcripts(cfg.sessions_dir, known, force)
        gone = set(known) - seen
        if not due and not gone:
            return
        with store.transaction(wait_ms=wait_ms, doing="index the session transcripts"):
            if not store.signature_matches():
                return
            for path, rel in due:
                try:
                    data, mtime = _read_transcript(path)
                except OSError as err:
                    log.warning("cannot read transcript %s: %s", path, err)
                    continue
                chunks = _transcript_chunks(path, data, cfg.chunking.tokens, cfg.chunking.overlap)
                report.chunks_written += store.replace_file(
                    rel,
                    str(path),
                    "sessions",
                    _bytes_hash(data),
                    mtime,
                    len(data),
                    [(c.start_line, c.end_line, c.hash, c.text, c.tokens) for c in chunks],
                )
                report.files_changed += 1
            for rel in gone:
                store.remove_file(rel)
                report.files_removed += 1

    # ------------------------------------------------------------------ vector phase

    def _vector_phase(
        self, store: Store, report: SyncReport, budget_s: float | None, progress: ProgressFn | None
    ) -> None:
        """Embed pending chunks; with `budget_s`, stop by the deadline (a search pays no more)."""
        eng = self.engine
        if eng.provider is None or not store.vector.available:
            return
        if budget_s is not None and not self.backlog_fits(budget_s, store):
            return
        deadline = None if budget_s is None else time.monotonic() + budget_s
        total = store.pending_count()
        done = 0
        key = eng.provider_key()
        if progress and total:
            progress("vectors", 0, total)
        stopping = eng.background.stopping if eng.background is not None else None
        while not (stopping is not None and stopping.is_set()):  # closing: the rest can wait
            size = self._batch_size(deadline, key, first=bool(progress) and not done)
            if size <= 0:
                break
            batch = store.pending_chunks(size)
            if not batch:
                break
            vectors = self._embed_batch(store, report, batch, key, deadline)
            if vectors is None:
                return
            store.write_vectors(list(vectors.items()))
            done += len(batch)
            if progress:
                progress("vectors", done, total)

    def _embed_batch(
        self,
        store: Store,
        report: SyncReport,
        batch: list[tuple[int, str, str]],
        key: tuple[str, str, str],
        deadline: float | None,
    ) -> dict[int, np.ndarray] | None:
        """One batch's vectors (cache, then provider); None: the phase stops here."""
        provider = self.engine.provider
        assert provider is not None
        cache = self.engine.cfg.cache
        cached = store.cache_get(key, [h for _, h, _ in batch]) if cache.enabled else {}
        todo = [(cid, h, text) for cid, h, text in batch if h not in cached]
        vectors: dict[int, np.ndarray] = {cid: cached[h] for cid, h, _ in batch if h in cached}
        report.vectors_from_cache += len(vectors)
        if not todo:
            return vectors
        # a first call that loads the model would make the rate look slower than it is
        measures = provider.documents_ready
        started = time.monotonic()
        rates = self._embed_rates
        try:
            # a hard stop at the deadline too: the rate is an estimate
            matrix = provider.embed_documents([t for _, _, t in todo], deadline=deadline)
        except DeadlineReached:
            spent = max((deadline or started) - started, 0.0)
            rates[key] = max(rates.get(key, 0.0), spent / len(todo))
            return None
        except BatchPending:  # remote.batch.wait = false: the next sync collects the job
            return None
        except Exception as err:
            self.engine.provider_failed(err)
            return None
        per_chunk = (time.monotonic() - started) / len(todo)
        prev = rates.get(key)
        # the slower of the last batch and the running mean: one fast batch must not overrun
        if measures:
            rates[key] = per_chunk if prev is None else max(per_chunk, 0.5 * (prev + per_chunk))
        new_items = []
        for (cid, h, _), vec in zip(todo, matrix, strict=True):
            vectors[cid] = vec
            new_items.append((h, vec))
        if cache.enabled:
            store.cache_put(key, new_items, cache.max_entries)
        report.vectors_embedded += len(todo)
        return vectors

    def _batch_size(self, deadline: float | None, key: tuple[str, str, str], first: bool) -> int:
        """Under a deadline, what the measured rate fits (one chunk, to measure, before any)."""
        size = FIRST_SHOWN_BATCH if first else EMBED_BATCH
        if deadline is None:
            return size
        left = deadline - time.monotonic()
        rate = self._embed_rates.get(key)
        if rate is None:
            return 1 if left > 0 else 0
        return min(EMBED_BATCH, int(left * BUDGET_FILL / rate))

    # ------------------------------------------------------------------ rebuild

    def _reindex(
        self, reason: str, embed: bool, embed_budget_s: float | None, progress: ProgressFn | None
    ) -> SyncReport:
        """Build a scratch index and publish it whole; on any failure the old one stays."""
        eng = self.engine
        log.info("reindexing %s: %s", eng.path, reason)
        report = SyncReport(reindexed=True, reindex_reason=reason)
        signature = eng.signature()
        scratch = eng.store.open_scratch()
        try:
            scratch.guard_signature = signature
            scratch.set_meta(
                {
                    "signature": json.dumps(signature),
                    "workspace": str(eng.cfg.workspace),
                    "agentId": eng.cfg.agent_id,
                }
            )
            self.text_phase(scratch, report, progress)
            self.sessions_phase(scratch, report, True)
            if embed:
                self._vector_phase(scratch, report, embed_budget_s, progress)
            eng.store.publish(scratch)
        finally:
            scratch.discard()
        eng.store.guard_signature = signature
        eng.dirty = False
        return report


def _record(store: Store, key: str, value: str | None) -> None:
    """Record `key` (None: remove it) for other processes' status, as far as the index can be."""
    with contextlib.suppress(MemorydError):
        if store.read_only is None:
            _set_meta(store, key, value, None if value is not None else store.meta_value(key))


def _set_meta(store: Store, key: str, value: str | None, old: str | None) -> None:
    """Set `key` to `value` (None: remove it) unless it already holds it (`old`)."""
    if value is not None and value != old:
        store.set_meta({key: value})
    elif value is None and old is not None:
        store.delete_meta(key)
