"""Mistral embeddings (`mistral-embed`, 1024 dimensions)."""

from __future__ import annotations

from typing import ClassVar

from ._remote import RemoteProvider

DEFAULT_MISTRAL_MODEL = "mistral-embed"
MISTRAL_BASE_URL = "https://api.mistral.ai/v1"


class MistralProvider(RemoteProvider):
    id = "mistral"
    default_base_url = MISTRAL_BASE_URL
    default_model = DEFAULT_MISTRAL_MODEL
    known_dims: ClassVar[dict[str, int]] = {"mistral-embed": 1024, "codestral-embed": 1536}
    max_input_tokens = 8000
    max_batch_items = 128
    max_batch_tokens = 16_000
