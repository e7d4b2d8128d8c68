"""A deterministic, dependency-free embedder of hashed words (for tests and offline demos)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from memoryd.embeddings.base import (
    EmbeddingProvider,
    Matrix,
    Vector,
    endpoint_fingerprint,
    l2_normalize,
)

_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder(EmbeddingProvider):
    def __init__(self, dims: int = 256, *, model: str = "hashing-v1") -> None:
        self.id = "hashing"
        self.model = model
        self.dims = dims
        self._dims = dims
        self.calls = 0  # number of embed_documents batches, observable by tests
        self.embedded_texts = 0

    def fingerprint(self) -> str:
        return endpoint_fingerprint(self.id, None, dims=self.dims)

    def _one(self, text: str) -> Vector:
        import numpy as np

        vec = np.zeros(self._dims, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            # unsigned features: a non-empty text never hashes to the zero vector
            vec[int.from_bytes(digest[:4], "little") % self._dims] += 1.0
        return vec

    def embed_query(self, text: str) -> Vector:
        vec: Vector = l2_normalize(self._one(text)[None, :])[0]
        return vec

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        import numpy as np

        self.calls += 1
        self.embedded_texts += len(texts)
        if not texts:
            return np.zeros((0, self._dims), dtype=np.float32)
        return l2_normalize(np.stack([self._one(t) for t in texts]))
