"""Embedding providers: the interface, the offline default, remote APIs and selection from config."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import EmbeddingProvider, ProviderSelection, endpoint_fingerprint, l2_normalize
from .hashing import HashingEmbedder

if TYPE_CHECKING:
    from ..errors import BatchPending
    from ._http import ApiClient, EmbeddingHTTPError, RetryPolicy, merge_headers, parse_json
    from .gemini import GeminiProvider
    from .mistral import MistralProvider
    from .ollama import OllamaProvider
    from .openai import OpenAIProvider
    from .selection import select_from_config, select_provider
    from .voyage import VoyageProvider

_LAZY = {
    "ApiClient": "._http",
    "merge_headers": "._http",
    "parse_json": "._http",
    "EmbeddingHTTPError": "._http",
    "RetryPolicy": "._http",
    "BatchPending": "..errors",
    "GeminiProvider": ".gemini",
    "MistralProvider": ".mistral",
    "OllamaProvider": ".ollama",
    "OpenAIProvider": ".openai",
    "select_from_config": ".selection",
    "select_provider": ".selection",
    "VoyageProvider": ".voyage",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


__all__ = [
    "ApiClient",
    "BatchPending",
    "EmbeddingHTTPError",
    "EmbeddingProvider",
    "GeminiProvider",
    "HashingEmbedder",
    "MistralProvider",
    "OllamaProvider",
    "OpenAIProvider",
    "ProviderSelection",
    "RetryPolicy",
    "VoyageProvider",
    "endpoint_fingerprint",
    "l2_normalize",
    "merge_headers",
    "parse_json",
    "select_from_config",
    "select_provider",
]
