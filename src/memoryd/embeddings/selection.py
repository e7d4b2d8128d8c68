"""Choose the embedding provider (and its fallback) for an agent from its memorySearch config,
and where each provider's API key, endpoint and headers come from."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import MemorySearchConfig, ModelsConfig, RemoteConfig
from ..errors import EmbeddingError, ProviderUnavailable
from .base import EmbeddingProvider, ProviderSelection

if TYPE_CHECKING:
    from ._remote import RemoteProvider
    from .http import RetryPolicy

#: Each remote provider's API key variable (its class is `<Name>Provider`).
ENV_KEYS: Mapping[str, str] = {
    "openai": "OPENAI_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "voyage": "VOYAGE_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "ollama": "OLLAMA_API_KEY",
}
_CLASSES = {"openai": "OpenAI"}


def _clean(value: str | None) -> str | None:
    return (value or "").strip() or None


def resolve_api_key(
    provider: str, *, remote: RemoteConfig | None, models: ModelsConfig, env: Mapping[str, str]
) -> tuple[str, str] | tuple[None, None]:
    """(key, where it was found) for `provider`; `remote` is passed only for the provider in use."""
    if remote is not None and (key := _clean(remote.api_key)):
        return key, "memorySearch.remote.apiKey"
    entry = models.providers.get(provider)
    if entry is not None and (key := _clean(entry.api_key)):
        return key, f"models.providers.{provider}.apiKey"
    var = ENV_KEYS.get(provider)
    if var and (key := _clean(env.get(var))):
        return key, var
    return None, None


def remote_provider_class(name: str) -> type[RemoteProvider] | None:
    """The remote provider class for `name`, imported on demand (httpx loads only when needed)."""
    if name not in ENV_KEYS:
        return None
    # the providers with a batch API have a module of their own
    module = importlib.import_module(
        f".{name if name in ('openai', 'gemini') else '_remote'}", __package__
    )
    cls: type[RemoteProvider] = getattr(module, f"{_CLASSES.get(name, name.title())}Provider")
    return cls


#: Remote providers `auto` considers, in order of preference.
AUTO_ORDER = ("openai", "gemini", "voyage", "mistral")


def build_provider(
    name: str,
    cfg: MemorySearchConfig,
    models: ModelsConfig,
    *,
    env: Mapping[str, str],
    primary: bool,
    retry: RetryPolicy | None = None,
    notes: list[str],
    one_off: bool = False,
) -> EmbeddingProvider:
    """Construct provider `name` (`primary` applies `model` and `remote.*`) or raise `EmbeddingError`."""
    if name == "local":
        from .local import LocalE5Provider

        model_path = cfg.local.model_path if primary else None
        if model_path and not Path(model_path).expanduser().exists():
            raise EmbeddingError(f"local.modelPath {model_path} does not exist")
        local_model = cfg.model if primary and cfg.provider == "local" else None
        return LocalE5Provider(
            local_model,
            model_path=str(Path(model_path).expanduser()) if model_path else None,
            threads=cfg.local.threads,
            one_off=one_off,
        )
    from .http import merge_headers

    cls = remote_provider_class(name)
    if cls is None:
        raise EmbeddingError(f"unknown embedding provider {name!r}")
    remote = cfg.remote if primary else None
    key, source = resolve_api_key(name, remote=remote, models=models, env=env)
    entry = models.providers.get(name)
    base_url = _clean(remote.base_url if remote else None) or _clean(
        entry.base_url if entry else None
    )
    custom = base_url is not None and base_url.rstrip("/") != cls.default_base_url
    if not key and name != "ollama" and not custom:
        hint = f"memorySearch.remote.apiKey, models.providers.{name}.apiKey or {ENV_KEYS[name]}"
        raise EmbeddingError(f"{name}: no API key (set {hint})")
    if key:
        notes.append(f"{name}: API key from {source}")
    elif name != "ollama":
        notes.append(f"{name}: no API key; custom endpoint {base_url} is called without one")
    if remote is not None and remote.batch.enabled:
        notes.append(
            f"{name}: batch mode on (concurrency {remote.batch.concurrency})"
            if cls.batch_mode is not None
            else f"{name}: remote.batch ignored (only openai and gemini have a batch API)"
        )
    provider = cls(
        cfg.model if primary else None,
        api_key=key,
        base_url=base_url,
        # the provider's configured headers, then remote's (the class adds its auth defaults)
        headers=merge_headers(entry.headers if entry else None, remote.headers if remote else None),
        retry=retry,
        input_type=remote.input_type if remote else None,
        output_dimensionality=remote.output_dimensionality if remote else None,
        batch=remote.batch if remote else None,
    )
    if remote is not None and remote.headers:
        notes.append(
            f"{name}: remote.headers merged over defaults ({', '.join(sorted(remote.headers))})"
        )
    return provider


def _describe(provider: EmbeddingProvider) -> str:
    where = (
        f" at {getattr(provider, 'base_url', '')}"
        if getattr(provider, "custom_endpoint", False)
        else ""
    )
    return f"{provider.id} {provider.model}{where}"


def _auto_primary(
    cfg: MemorySearchConfig, models: ModelsConfig, env: Mapping[str, str]
) -> tuple[str, str, list[str]]:
    """(provider name, why, notes) for `auto`."""
    notes: list[str] = []
    model_path = cfg.local.model_path
    if model_path:
        if Path(model_path).expanduser().exists():
            return "local", f"auto: local.modelPath {model_path} exists", notes
        notes.append(f"auto: local.modelPath {model_path} does not exist; skipped")
    if cfg.remote.api_key or cfg.remote.base_url:
        which = "remote.apiKey" if cfg.remote.api_key else "remote.baseUrl"
        return "openai", f"auto: memorySearch.{which} set (OpenAI-compatible)", notes
    for name in AUTO_ORDER:
        key, source = resolve_api_key(name, remote=None, models=models, env=env)
        if key:
            return name, f"auto: {source} set", notes
    return "local", "auto: no remote API key found; offline local model", notes


def select_provider(
    cfg: MemorySearchConfig,
    models: ModelsConfig,
    *,
    env: Mapping[str, str] | None = None,
    retry: RetryPolicy | None = None,
    one_off: bool = False,
) -> ProviderSelection:
    """The provider and fallback for an agent's memorySearch and models config and `env`."""
    env = os.environ if env is None else env
    requested = cfg.provider
    if requested == "none":
        return ProviderSelection(
            requested, None, "provider = none: keyword-only search by configuration", explicit=True
        )
    explicit = requested != "auto"
    notes: list[str]
    name, why, notes = (
        (requested, "configured", []) if explicit else _auto_primary(cfg, models, env)
    )

    def build(name: str, primary: bool) -> EmbeddingProvider:
        return build_provider(
            name, cfg, models, env=env, primary=primary, retry=retry, notes=notes, one_off=one_off
        )

    def fallback(primary_id: str) -> EmbeddingProvider | None:
        if cfg.fallback == "none":
            return None
        if cfg.fallback == primary_id:
            notes.append(f"fallback {primary_id} is the primary provider; no fallback")
            return None
        try:
            spare = build(cfg.fallback, False)
        except EmbeddingError as err:
            notes.append(f"fallback {cfg.fallback} unavailable: {err}")
            return None
        notes.append(f"fallback ready: {_describe(spare)} (used only if the primary fails)")
        return spare

    try:
        provider = build(name, True)
    except EmbeddingError as err:
        failure = f"{name} unavailable: {err}"
    else:
        reason = f"{why} → {_describe(provider)}"
        return ProviderSelection(
            requested, provider, reason, fallback(provider.id), explicit, notes
        )

    spare = fallback(name)
    if spare is not None:
        reason = f"{why}: {failure}; using fallback {_describe(spare)}"
        return ProviderSelection(requested, spare, reason, None, explicit, notes)
    if explicit:
        raise ProviderUnavailable(f"memory search unavailable: {failure}")
    if name != "local":  # auto picked a remote that cannot be built: the offline default still can
        try:
            provider = build("local", False)
        except EmbeddingError as err:
            failure = f"{failure}; local unavailable: {err}"
        else:
            reason = f"{why}: {failure}; offline local model instead → {_describe(provider)}"
            return ProviderSelection(requested, provider, reason, None, explicit, notes)
    return ProviderSelection(
        requested, None, f"{why}: {failure}; keyword-only search", None, explicit, notes
    )
