"""Choose the embedding provider (and its fallback) for an agent from its memorySearch config."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import MemorySearchConfig, ModelsConfig, ResolvedAgent
from ..errors import EmbeddingError, ProviderUnavailable
from .base import EmbeddingProvider, ProviderSelection
from .keys import ENV_KEYS, resolve_api_key, resolve_base_url, resolve_headers

if TYPE_CHECKING:
    from ._remote import RemoteProvider
    from .http import RetryPolicy

_REMOTE_MODULES = {
    "openai": "OpenAIProvider",
    "gemini": "GeminiProvider",
    "voyage": "VoyageProvider",
    "mistral": "MistralProvider",
    "ollama": "OllamaProvider",
}


def remote_provider_class(name: str) -> type[RemoteProvider] | None:
    """The remote provider class for `name`, imported on demand (httpx loads only when needed)."""
    cls_name = _REMOTE_MODULES.get(name)
    if cls_name is None:
        return None
    module = importlib.import_module(f".{name}", __package__)
    cls: type[RemoteProvider] = getattr(module, cls_name)
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
    notes: list[str] | None = None,
    one_off: bool = False,
) -> EmbeddingProvider:
    """Construct provider `name` (`primary` applies `model` and `remote.*`) or raise `EmbeddingError`."""
    notes = notes if notes is not None else []
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
    cls = remote_provider_class(name)
    if cls is None:
        raise EmbeddingError(f"unknown embedding provider {name!r}")
    remote = cfg.remote if primary else None
    key = resolve_api_key(name, remote=remote, models=models, env=env)
    base_url = resolve_base_url(name, remote=remote, models=models)
    custom = base_url is not None and base_url.rstrip("/") != cls.default_base_url
    if not key and name != "ollama" and not custom:
        hint = f"memorySearch.remote.apiKey, models.providers.{name}.apiKey or {ENV_KEYS[name]}"
        raise EmbeddingError(f"{name}: no API key (set {hint})")
    if key:
        notes.append(f"{name}: API key from {key.source}")
    elif name != "ollama":
        notes.append(f"{name}: no API key; custom endpoint {base_url} is called without one")
    kwargs: dict[str, Any] = {
        "api_key": key.value,
        "base_url": base_url,
        "headers": resolve_headers(name, remote=remote, models=models),
        "retry": retry,
    }
    if remote is not None:
        kwargs["input_type"] = remote.input_type
        kwargs["output_dimensionality"] = remote.output_dimensionality
        if cls.batch_runner is not None:
            kwargs["batch"] = remote.batch
            if remote.batch.enabled:
                notes.append(f"{name}: batch mode on (concurrency {remote.batch.concurrency})")
        elif remote.batch.enabled:
            notes.append(f"{name}: remote.batch ignored (only openai and gemini have a batch API)")
    provider = cls(cfg.model if primary else None, **kwargs)
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
        key = resolve_api_key(name, remote=None, models=models, env=env)
        if key:
            return name, f"auto: {key.source} set", notes
    return "local", "auto: no remote API key found; offline local model", notes


def _fallback(
    cfg: MemorySearchConfig,
    models: ModelsConfig,
    primary_id: str | None,
    env: Mapping[str, str],
    retry: RetryPolicy | None,
    notes: list[str],
    one_off: bool,
) -> EmbeddingProvider | None:
    name = cfg.fallback
    if name == "none":
        return None
    if name == primary_id:
        notes.append(f"fallback {name} is the primary provider; no fallback")
        return None
    try:
        provider = build_provider(
            name, cfg, models, env=env, primary=False, retry=retry, notes=notes, one_off=one_off
        )
    except EmbeddingError as err:
        notes.append(f"fallback {name} unavailable: {err}")
        return None
    notes.append(f"fallback ready: {_describe(provider)} (used only if the primary fails)")
    return provider


def select_provider(
    agent: ResolvedAgent,
    *,
    env: Mapping[str, str] | None = None,
    retry: RetryPolicy | None = None,
    one_off: bool = False,
) -> ProviderSelection:
    """The provider and fallback for `agent`. `env` defaults to `os.environ` (tests pass a dict)."""
    return select_from_config(
        agent.memory_search, agent.models, env=env, retry=retry, one_off=one_off
    )


def select_from_config(
    cfg: MemorySearchConfig,
    models: ModelsConfig,
    *,
    env: Mapping[str, str] | None = None,
    retry: RetryPolicy | None = None,
    one_off: bool = False,
) -> ProviderSelection:
    """`select_provider` on bare config objects."""
    env = os.environ if env is None else env
    requested = cfg.provider
    if requested == "none":
        return ProviderSelection(
            requested, None, "provider = none: keyword-only search by configuration", explicit=True
        )
    explicit = requested != "auto"
    notes: list[str] = []
    name: str
    if explicit:
        name, why = requested, "configured"
    else:
        name, why, notes = _auto_primary(cfg, models, env)
    try:
        provider = build_provider(
            name, cfg, models, env=env, primary=True, retry=retry, notes=notes, one_off=one_off
        )
    except EmbeddingError as err:
        failure = f"{name} unavailable: {err}"
    else:
        fallback = _fallback(cfg, models, provider.id, env, retry, notes, one_off)
        return ProviderSelection(
            requested, provider, f"{why} → {_describe(provider)}", fallback, explicit, notes
        )

    fallback = _fallback(cfg, models, name, env, retry, notes, one_off)
    if fallback is not None:
        reason = f"{why}: {failure}; using fallback {_describe(fallback)}"
        return ProviderSelection(requested, fallback, reason, None, explicit, notes)
    if explicit:
        raise ProviderUnavailable(f"memory search unavailable: {failure}")
    if name != "local":  # auto picked a remote that cannot be built: the offline default still can
        try:
            provider = build_provider(
                "local", cfg, models, env=env, primary=False, notes=notes, one_off=one_off
            )
        except EmbeddingError as err:
            failure = f"{failure}; local unavailable: {err}"
        else:
            reason = f"{why}: {failure}; offline local model instead → {_describe(provider)}"
            return ProviderSelection(requested, provider, reason, None, explicit, notes)
    return ProviderSelection(
        requested, None, f"{why}: {failure}; keyword-only search", None, explicit, notes
    )
