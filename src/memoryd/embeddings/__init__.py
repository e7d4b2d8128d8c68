"""Embedding providers: the interface, the offline default, remote APIs and selection from config.

Providers live in their own modules (`local`, `openai`, …), imported when selected, so that a
keyword-only search never loads httpx or numpy.
"""

from __future__ import annotations

from ..errors import BatchPending
from .base import EmbeddingProvider, ProviderSelection, endpoint_fingerprint, l2_normalize
from .hashing import HashingEmbedder

__all__ = [
    "BatchPending",
    "EmbeddingProvider",
    "HashingEmbedder",
    "ProviderSelection",
    "endpoint_fingerprint",
    "l2_normalize",
]
