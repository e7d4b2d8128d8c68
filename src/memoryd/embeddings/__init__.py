"""Embedding providers, each in its own module imported when selected (a keyword-only search
never loads httpx or numpy)."""

from __future__ import annotations

from ..errors import BatchPending
from .base import ProviderSelection
from .hashing import HashingEmbedder

__all__ = ["BatchPending", "HashingEmbedder", "ProviderSelection"]
