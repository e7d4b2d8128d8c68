"""Embedding providers, each in its own module imported when selected (a keyword-only search
never loads httpx or numpy)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import BatchPending
from .base import ProviderSelection
from .hashing import HashingEmbedder

if TYPE_CHECKING:
    from ._http import ApiClient, RetryPolicy, merge_headers, parse_json

#: The HTTP client the rerank stage shares with the remote providers, imported on first use.
_HTTP = frozenset({"ApiClient", "RetryPolicy", "merge_headers", "parse_json"})


def __getattr__(name: str) -> Any:
    if name in _HTTP:
        from . import _http

        return getattr(_http, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ApiClient",
    "BatchPending",
    "HashingEmbedder",
    "ProviderSelection",
    "RetryPolicy",
    "merge_headers",
    "parse_json",
]
