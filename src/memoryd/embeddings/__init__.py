"""Embedding providers: the interface, the offline default, remote APIs and selection from config."""

from __future__ import annotations

from ._http import EmbeddingHTTPError, RetryPolicy
from .base import EmbeddingProvider, ProviderSelection, endpoint_fingerprint, l2_normalize
from .batch import BatchPending
from .gemini import GeminiProvider
from .hashing import HashingEmbedder
from .mistral import MistralProvider
from .ollama import OllamaProvider
from .openai import OpenAIProvider
from .resilient import ResilientEmbedder
from .selection import select_from_config, select_provider
from .voyage import VoyageProvider

__all__ = [
    "BatchPending",
    "EmbeddingHTTPError",
    "EmbeddingProvider",
    "GeminiProvider",
    "HashingEmbedder",
    "MistralProvider",
    "OllamaProvider",
    "OpenAIProvider",
    "ProviderSelection",
    "ResilientEmbedder",
    "RetryPolicy",
    "VoyageProvider",
    "endpoint_fingerprint",
    "l2_normalize",
    "select_from_config",
    "select_provider",
]
