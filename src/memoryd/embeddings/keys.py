"""Where a provider's API key, endpoint and headers come from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..config import ModelsConfig, RemoteConfig

ENV_KEYS: Mapping[str, str] = {
    "openai": "OPENAI_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "voyage": "VOYAGE_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "ollama": "OLLAMA_API_KEY",
}


@dataclass(frozen=True)
class ResolvedKey:
    """An API key and where it was found (`source` is shown in status; the key never is)."""

    value: str | None
    source: str | None

    def __bool__(self) -> bool:
        return self.value is not None


def _clean(value: str | None) -> str | None:
    value = (value or "").strip()
    return value or None


def resolve_api_key(
    provider: str, *, remote: RemoteConfig | None, models: ModelsConfig, env: Mapping[str, str]
) -> ResolvedKey:
    """The first non-empty key for `provider`; `remote` is passed only for the provider in use."""
    if remote is not None and (key := _clean(remote.api_key)):
        return ResolvedKey(key, "memorySearch.remote.apiKey")
    entry = models.providers.get(provider)
    if entry is not None and (key := _clean(entry.api_key)):
        return ResolvedKey(key, f"models.providers.{provider}.apiKey")
    var = ENV_KEYS.get(provider)
    if var and (key := _clean(env.get(var))):
        return ResolvedKey(key, var)
    return ResolvedKey(None, None)


def resolve_base_url(
    provider: str, *, remote: RemoteConfig | None, models: ModelsConfig
) -> str | None:
    if remote is not None and (url := _clean(remote.base_url)):
        return url
    entry = models.providers.get(provider)
    return _clean(entry.base_url) if entry is not None else None


def resolve_headers(
    provider: str, *, remote: RemoteConfig | None, models: ModelsConfig
) -> dict[str, str]:
    """Configured extra headers (provider config, then remote); auth defaults are added by the provider."""
    from .http import merge_headers

    entry = models.providers.get(provider)
    return merge_headers(entry.headers if entry else None, remote.headers if remote else None)
