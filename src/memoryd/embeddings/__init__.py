"""Embedding providers: the interface, the offline default, and selection from config."""

from __future__ import annotations

from .base import EmbeddingProvider, ProviderSelection, endpoint_fingerprint, l2_normalize
from .hashing import HashingEmbedder
from .selection import select_provider

__all__ = [
    "EmbeddingProvider",
    "HashingEmbedder",
    "ProviderSelection",
    "endpoint_fingerprint",
    "l2_normalize",
    "select_provider",
]
