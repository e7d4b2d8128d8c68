"""Voyage AI embeddings."""

from __future__ import annotations

from typing import Any, ClassVar

from ._remote import Kind, RemoteProvider

DEFAULT_VOYAGE_MODEL = "voyage-4-large"
VOYAGE_BASE_URL = "https://api.voyageai.com/v1"


class VoyageProvider(RemoteProvider):
    id = "voyage"
    default_base_url = VOYAGE_BASE_URL
    default_model = DEFAULT_VOYAGE_MODEL
    known_dims: ClassVar[dict[str, int]] = dict.fromkeys(
        "voyage-4-large voyage-4 voyage-4-lite voyage-3-large voyage-3.5 voyage-3.5-lite"
        " voyage-code-3".split(),
        1024,
    )
    max_input_tokens = 32_000
    max_batch_items = 1000
    max_batch_tokens = 120_000

    def fingerprint_extra(self) -> dict[str, object]:
        return {"kinds": [self.voyage_input_type("query"), self.voyage_input_type("document")]}

    def voyage_input_type(self, kind: Kind) -> str:
        return (self.input_type or {}).get(kind) or kind

    def request_body(self, texts: list[str], kind: Kind) -> dict[str, Any]:
        body = super().request_body(texts, kind)
        body["input_type"] = self.voyage_input_type(kind)
        return body
