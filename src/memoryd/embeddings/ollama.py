"""Ollama embeddings from a local (or proxied) Ollama server; `inputType` values are prefixes."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from ..errors import EmbeddingError
from ._remote import Kind, RemoteProvider
from .http import EmbeddingHTTPError

DEFAULT_OLLAMA_MODEL = "nomic-embed-text"
OLLAMA_BASE_URL = "http://127.0.0.1:11434"


class OllamaProvider(RemoteProvider):
    id = "ollama"
    default_base_url = OLLAMA_BASE_URL
    default_model = DEFAULT_OLLAMA_MODEL
    known_dims: ClassVar[dict[str, int]] = {}
    max_input_tokens = 2048
    max_batch_items = 64

    def __init__(
        self,
        model: str | None = None,
        *,
        api: Literal["auto", "embed", "embeddings"] = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        self.api = api

    def _prefixed(self, texts: list[str], kind: Kind) -> list[str]:
        prefix = (self.input_type or {}).get(kind, "")
        return [prefix + t for t in texts] if prefix else texts

    def _embed_batch(self, texts: list[str], kind: Kind, deadline: float | None) -> list[Any]:
        texts = self._prefixed(texts, kind)
        if self.api != "embeddings":
            try:
                body = self.client.post_json(
                    "api/embed", {"model": self.model, "input": texts}, deadline
                )
            except EmbeddingHTTPError as err:
                if (
                    self.api == "auto"
                    and err.status_code == 404
                    and "model" not in err.detail.lower()
                ):
                    self.api = "embeddings"
                else:
                    raise
            else:
                if not isinstance(body, dict) or not isinstance(body.get("embeddings"), list):
                    raise EmbeddingError("ollama: unexpected /api/embed response shape")
                self.api = "embed"
                return list(body["embeddings"])
        out: list[Any] = []
        for text in texts:
            body = self.client.post_json(
                "api/embeddings", {"model": self.model, "prompt": text}, deadline
            )
            if not isinstance(body, dict) or "embedding" not in body:
                raise EmbeddingError("ollama: unexpected /api/embeddings response shape")
            out.append(body["embedding"])
        return out
