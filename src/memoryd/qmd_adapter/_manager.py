"""`QmdManager`: one agent's qmd sidecar: start-up, validation, status, search and reads."""

from __future__ import annotations

import dataclasses
import logging
import re
import sqlite3
import time
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any, Final

from ..background import Background
from ..core.engine import Corpus, SearchOutput, SearchRequest
from ..core.layout import SKIP_DIRS, MemoryRoot, display_path
from ..core.results import FileText, SearchResult, Source
from ..core.status import CollectionStatus, QmdStatus
from ..errors import MemorydError, PathNotAllowed, QmdBadOutput, QmdError, QmdExitError
from ..fsio import read_file, wipe_folder
from ..memfiles import read_memory_file
from ._core import QmdCore
from ._parse import QmdHit, is_missing_collection_error, parse_search_output, split_qmd_uri
from ._plan import SearchMode, plan_query
from ._rerank import explained, qmd_scorer, reranked
from ._runner import kill_group
from ._snippets import (
    content_docid,
    file_lines,
    hit_windows,
    holds_enough,
    interleave,
    refind_line,
)

log = logging.getLogger("memoryd.qmd")

#: Hits asked of qmd beyond `maxResults`, so a dropped hit (see `_read_hit`) leaves no gap.
SPARE_HITS: Final = 2
#: Candidates qmd keeps after fusing its lines' rankings unless `-C` says otherwise.
QMD_CANDIDATE_LIMIT: Final = 40
#: A hit's file is read whole to cut its window; a larger one is dropped (and counted).
MAX_HIT_FILE_BYTES: Final = 8 << 20


class _Dropped(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


_VERSION_RE = re.compile(r"^qmd (\d+)\.(\d+)\.(\d+)\b")


def parse_version(text: str) -> str:
    """`qmd 2.8.3 (facd35e)` → `qmd 2.8.3 (facd35e)`; anything else is `QmdBadOutput`."""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not _VERSION_RE.match(line):
        shown = line[:80] or "nothing"
        raise QmdBadOutput(f"qmd --version printed {shown!r}, not 'qmd X.Y.Z'")
    return line


class QmdManager(QmdCore):
    """Drives qmd for one agent. Create, `start()`, use, `close()`."""

    name: Final = "qmd"

    def start(self, background: Background | None = None) -> None:
        """Prepare the agent's qmd home and collections; boot-sync and timers per config."""
        self._prepare()
        self._started = True
        update = self.config.update
        if update.on_boot and update.wait_for_boot_sync:
            self.sync(force=True)
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
            self._active, self._specs = {}, []
            self.last_update_at = self.last_embed_at = None
            self._last_update_mono = self._last_embed_mono = None
            self._prepare()
        return removed

    def _prepare(self) -> None:
        models = {k: v for k, v in dataclasses.asdict(self.config.models).items() if v}
        self.home.ensure(models=models, shared_models_dir=self._shared_models)
        self.ensure_collections()

    def probe(self) -> bool:
        """True when qmd starts and answers `qmd X.Y.Z`; never raises a `QmdError`."""
        self._version = None
        try:
            out = self._run(["--version"], self.config.update.command_timeout_ms)
            version = parse_version(out.stdout or out.stderr)
        except QmdError as err:
            if isinstance(err, QmdBadOutput):
                self._version_error = str(err)
            self.last_error = str(err)
            self.last_probe_error = err
            self._emit("version", False, f"{type(err).__name__}: {err}")
            return False
        self._version, self._version_error, self.last_probe_error = version, None, None
        self._emit("version", True, version)
        return True

    def seed_from_health(
        self,
        last_update_at: float | None,
        last_embed_at: float | None,
        version: str | None = None,
        version_error: str | None = None,
    ) -> None:
        """Start from another process's recorded update, embed and `qmd --version` validation."""
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

    def search(
        self,
        request: SearchRequest | str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        corpus: Corpus = "all",
        mode: SearchMode | None = None,
        timeout_ms: int | None = None,
        rerank: bool | None = None,
    ) -> SearchOutput:
        """Search this agent's collections in one `qmd query` call (see `plan_query`); a str is
        the query, with the limits given here."""
        if isinstance(request, str):
            request = SearchRequest(request, max_results, min_score, corpus)
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
        rerank = self._rerank if rerank is None else rerank
        # as many hits whatever maxResults asks: a larger one then only adds results
        pool = limits.max_results + SPARE_HITS
        hits = self._query(plan.document, names, pool, timeout_ms or limits.timeout_ms, rerank)
        results = self._results_from_hits(hits, plan.snippet_query, plan.words)
        floor = limits.min_score if request.min_score is None else request.min_score
        passed = [r for r in results if r.score >= floor]
        # the rerank stage over what passed minScore; `explain` says what qmd was sent
        sent = {"query": plan.document.split("\n"), "minScore": floor} if request.explain else None
        stage = self.rerank_stage
        if stage is not None and passed:
            scorer = None
            if stage.provider == "qmd":
                argv = self.search_argv(plan.document, names, pool, rerank=True)
                paths = [r.path for r in passed[: stage.candidates]]
                scorer = qmd_scorer(self._run, argv, paths, self.roots(), self.settings.workspace)
            passed = reranked(stage, query, passed, answer.notes, scorer, sent)
        elif sent is not None:
            passed = [r.with_(explain=explained(r, sent, None)) for r in passed]
        n = request.max_results or limits.max_results
        model = self.config.models.embed if plan.vector else None
        return dataclasses.replace(answer, results=passed[:n], model=model)

    def search_argv(
        self, document: str, names: Sequence[str], n: int, *, rerank: bool | None = None
    ) -> list[str]:
        """`qmd query` argv for every collection in one call."""
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
        self._dropped[reason] = self._dropped.get(reason, 0) + 1
        self.last_dropped = f"{path}: {reason} ({detail})"
        log.warning("qmd hit dropped: %s", self.last_dropped)
        self._emit("dropped", False, f"{reason}\t{self.last_dropped}")

    def _lookup_docid(self, docid: str) -> tuple[str, str] | None:
        """Resolve `#abc123` through qmd's `documents` table."""
        prefix = docid.lstrip("#").lower()
        if not prefix or not all(c in "0123456789abcdef" for c in prefix):
            return None
        row = self._index_row(
            "SELECT collection, path FROM documents WHERE hash LIKE ? AND active = 1 "
            "ORDER BY collection, path LIMIT 1",
            (prefix + "%",),
        )
        return (str(row[0]), str(row[1])) if row else None

    def get(self, path: str, from_line: int | None = None, lines: int | None = None) -> FileText:
        """Read a memory file by a path search returned; missing files give empty text."""
        got = read_memory_file(self.roots(), self.settings.workspace, path, from_line, lines)
        return got if not path.startswith("qmd/") else dataclasses.replace(got, path=path)
