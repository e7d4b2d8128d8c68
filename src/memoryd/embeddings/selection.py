"""Choose the embedding provider for an agent from its memorySearch config.

This first version knows `none` and `local`; remote providers plug in here (issue: embedding providers).
"""

from __future__ import annotations

from pathlib import Path

from ..config import ResolvedAgent
from ..errors import EmbeddingError, ProviderUnavailable
from .base import ProviderSelection


def select_provider(agent: ResolvedAgent) -> ProviderSelection:
    cfg = agent.memory_search
    requested = cfg.provider
    if requested == "none":
        return ProviderSelection(requested, None, "provider = none: keyword-only search by configuration", explicit=True)
    from .local import LocalE5Provider

    explicit = requested != "auto"
    if requested in ("auto", "local"):
        model_path = cfg.local.model_path
        if model_path and not Path(model_path).expanduser().exists():
            if explicit:
                raise ProviderUnavailable(f"local.modelPath {model_path} does not exist")
            model_path = None
        try:
            provider = LocalE5Provider(cfg.model if requested == "local" else None, model_path=model_path)
        except EmbeddingError as err:
            if explicit:
                raise ProviderUnavailable(str(err)) from None
            return ProviderSelection(requested, None, f"no embedding provider available ({err}); keyword-only search")
        why = "configured" if explicit else "auto: no remote API key found; offline local model"
        return ProviderSelection(requested, provider, why, explicit=explicit)
    raise ProviderUnavailable(f"embedding provider {requested!r} is not available in this build")
