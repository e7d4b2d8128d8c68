"""The embedding provider interface every backend (local, remote, test) implements."""

from __future__ import annotations

import abc
import contextlib
import hashlib
import json
from array import array
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]
    Matrix = npt.NDArray[np.float32]
else:  # the aliases only serve annotations: a keyword-only search never imports numpy
    Vector = Matrix = Any

#: Header names that carry credentials, never part of the endpoint fingerprint.
AUTH_HEADERS = frozenset(
    {"authorization", "x-api-key", "x-goog-api-key", "api-key", "proxy-authorization"}
)


def endpoint_fingerprint(
    provider: str, base_url: str | None, headers: Mapping[str, str] | None = None, **extra: object
) -> str:
    """Stable hash of what changes vectors: provider, endpoint, non-auth headers and options."""
    clean = {k.lower(): v for k, v in (headers or {}).items() if k.lower() not in AUTH_HEADERS}
    blob = json.dumps(
        {"p": provider, "u": base_url or "", "h": clean, "x": extra}, sort_keys=True, default=str
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def l2_normalize(matrix: Matrix) -> Matrix:
    """Row-normalize; zero rows stay zero (callers treat them as 'no vector')."""
    import numpy as np

    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Matrix = (matrix / norms).astype(np.float32, copy=False)
    return out


class DeadlineReached(Exception):
    """Raised by `embed_documents` when its `deadline` passed before it finished."""


class EmbeddingProvider(abc.ABC):
    """Turns text into L2-normalized float32 vectors."""

    id: str
    model: str
    #: Known dimensionality, or None until the first embedding is produced.
    dims: int | None = None
    #: Longest input (in model tokens) the model accepts; longer texts are truncated by the provider.
    max_input_tokens: int = 512

    @property
    def documents_ready(self) -> bool:
        """False while the next `embed_documents` would load a model first (its time is no rate)."""
        return True

    def fingerprint(self) -> str:
        return endpoint_fingerprint(self.id, None)

    def prefetch_query(self, text: str) -> None:  # noqa: B027 - optional hook
        """A hint that `embed_query(text)` comes soon; returns at once and never raises."""

    def query_in_flight(self, text: str) -> bool:
        """Whether a prefetched embedding of `text` is still being computed (False if none is)."""
        return False

    #: Why the provider's preferred query engine could not be used (status reports it).
    query_engine_problem: str | None = None

    def query_engine(self) -> str | None:
        """Which engine embeds this process's queries, for a provider that has several."""
        return None

    def search_priority(self) -> AbstractContextManager[object]:
        """Held by a search while it runs, so local document embedding pauses meanwhile."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def embed_query(self, text: str) -> Vector:
        """Embed one search query (asymmetric models use their query form)."""

    def query_buffer_available(self) -> bool:
        """Whether `embed_query_buffer` returns a vector in this process (not None)."""
        return False

    def embed_query_buffer(self, text: str) -> array[float] | None:
        """`text`'s float32 query vector made without numpy, or None (then `embed_query`)."""
        return None

    @abc.abstractmethod
    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        """Embed document chunks; returns shape (len(texts), dims)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients or models."""


@dataclass
class ProviderSelection:
    """What was asked for, what serves, and why: reported verbatim by status()."""

    requested: str
    provider: EmbeddingProvider | None
    reason: str
    fallback: EmbeddingProvider | None = None
    #: True when the user named the provider explicitly: failures make memory unavailable.
    explicit: bool = False
    notes: list[str] = field(default_factory=list)
