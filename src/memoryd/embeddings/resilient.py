"""Embedding with the failure policy of the issue, for callers that want it in one object."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

from ..errors import EmbeddingError, ProviderUnavailable
from .base import EmbeddingProvider, Matrix, ProviderSelection, Vector

T = TypeVar("T")
State = Literal["primary", "fallback", "keyword-only", "unavailable"]


class ResilientEmbedder:
    """Primary → fallback → keyword-only (auto) or unavailable (explicit); see the module docstring."""

    def __init__(self, selection: ProviderSelection) -> None:
        self.selection = selection
        self.active: EmbeddingProvider | None = selection.provider
        self.state: State = "primary" if selection.provider else "keyword-only"
        self.reason = selection.reason
        #: Bumped on every switch of provider: vectors from an older generation must be redone.
        self.generation = 0
        self.events: list[str] = []

    def reset(self) -> None:
        """Go back to the selected primary provider (e.g. before a full sync)."""
        if self.active is not self.selection.provider:
            self.generation += 1
        self.active = self.selection.provider
        self.state = "primary" if self.active else "keyword-only"
        self.reason = self.selection.reason

    def _failed(self, provider: EmbeddingProvider, err: EmbeddingError) -> None:
        fallback = self.selection.fallback
        what = f"{provider.id} {provider.model} failed: {err}"
        self.generation += 1
        if self.state == "primary" and fallback is not None:
            self.active, self.state = fallback, "fallback"
            self.reason = f"{what}; switched to fallback {fallback.id} {fallback.model}"
        elif self.selection.explicit:
            self.active, self.state = None, "unavailable"
            self.reason = f"memory search unavailable: {what}"
        else:
            self.active, self.state = None, "keyword-only"
            self.reason = f"{what}; keyword-only search until reset"
        self.events.append(self.reason)

    def _call(self, fn: Callable[[EmbeddingProvider], T]) -> T | None:
        while self.active is not None:
            provider = self.active
            try:
                return fn(provider)
            except EmbeddingError as err:
                if provider is self.active:  # a concurrent call may already have switched
                    self._failed(provider, err)
        if self.state == "unavailable":
            raise ProviderUnavailable(self.reason)
        return None

    def embed_query(self, text: str) -> Vector | None:
        """The query vector, or None when search is keyword-only."""
        return self._call(lambda p: p.embed_query(text))

    def embed_documents(self, texts: Sequence[str]) -> Matrix | None:
        """Document vectors from `active` (check `generation` before storing), or None."""
        return self._call(lambda p: p.embed_documents(texts))

    def status(self) -> dict[str, object]:
        active = self.active
        return {
            "requested": self.selection.requested,
            "chosen": active.id if active else "none",
            "model": active.model if active else None,
            "state": self.state,
            "reason": self.reason,
            "notes": list(self.selection.notes),
            "events": list(self.events),
        }

    def close(self) -> None:
        for provider in (self.selection.provider, self.selection.fallback):
            if provider is not None:
                provider.close()
