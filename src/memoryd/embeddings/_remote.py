"""What every HTTP embedding provider shares: limits, long-text policy, vector checks, batch hand-off."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from ..config import BatchConfig
from ..errors import EmbeddingError
from ._http import ApiClient, RetryPolicy, merge_headers
from ._limits import estimate_tokens, pack, split_to_tokens, truncate_to_tokens
from .base import EmbeddingProvider, Matrix, Vector, endpoint_fingerprint, l2_normalize
from .batch import BatchMode, BatchRunner, run_batch

Kind = Literal["query", "document"]


class RemoteProvider(EmbeddingProvider):
    """Base of the HTTP providers (`openai`, `gemini`, `voyage`, `mistral`, `ollama`)."""

    default_base_url: ClassVar[str]
    default_model: ClassVar[str]
    #: Known output sizes of the provider's common models (others learn it from the first response).
    known_dims: ClassVar[Mapping[str, int]] = {}
    max_batch_items: int = 128
    max_batch_tokens: int | None = None
    #: The provider's asynchronous batch API, if it has one (used when remote.batch.enabled).
    batch_runner: ClassVar[type[BatchRunner] | None] = None

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        headers: Mapping[str, str] | None = None,
        input_type: Mapping[str, str] | None = None,
        output_dimensionality: int | None = None,
        retry: RetryPolicy | None = None,
        batch: BatchConfig | None = None,
    ) -> None:
        self.model = model or self.default_model
        self.api_key = api_key
        self.input_type = dict(input_type) if input_type else None
        self.output_dimensionality = output_dimensionality
        self.custom_endpoint = (
            base_url is not None and base_url.rstrip("/") != self.default_base_url
        )
        self.client = ApiClient(
            self.id,
            base_url or self.default_base_url,
            merge_headers(self.default_headers(api_key), headers),
            retry or RetryPolicy(),
        )
        self.dims = output_dimensionality or (
            None if self.custom_endpoint else self.known_dims.get(self.model)
        )
        self.batch: BatchMode | None = None
        if batch is not None and batch.enabled and self.batch_runner is not None:
            self.batch = BatchMode(self.batch_runner(self), batch)

    # ------------------------------------------------------------------ provider-specific hooks

    def default_headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def fingerprint_extra(self) -> dict[str, object]:
        return {}

    def request_body(self, texts: list[str], kind: Kind) -> dict[str, Any]:
        """The body of an OpenAI-shaped `POST embeddings` request (OpenAI, Voyage, Mistral)."""
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.output_dimensionality:
            body["output_dimension"] = self.output_dimensionality
        return body

    def _embed_batch(self, texts: list[str], kind: Kind, deadline: float | None) -> list[Any]:
        """Send one request (within limits, and `deadline`); one raw vector per text, in order."""
        body = self.client.post_json("embeddings", self.request_body(texts, kind), deadline)
        return parse_embeddings_response(body, self.id)

    # ------------------------------------------------------------------ shared behaviour

    @property
    def base_url(self) -> str:
        return self.client.base_url

    def fingerprint(self) -> str:
        """Covers endpoint, non-auth headers, model, dimensions and input types; never the key."""
        return endpoint_fingerprint(
            self.id,
            self.client.base_url,
            self.client.headers,
            model=self.model,
            dims=self.output_dimensionality,
            input_type=self.input_type,
            **self.fingerprint_extra(),
        )

    def to_matrix(self, raw: Sequence[Any], expected: int) -> Matrix:
        """Validate an API's vectors (count, shape, finite) and L2-normalize them."""
        if len(raw) != expected:
            raise EmbeddingError(f"{self.id}: asked for {expected} embeddings, got {len(raw)}")
        rows = [_decode_vector(v, self.id) for v in raw]
        sizes = {len(r) for r in rows}
        if len(sizes) > 1 or 0 in sizes:
            raise EmbeddingError(f"{self.id}: embeddings of inconsistent size {sorted(sizes)}")
        if not rows:
            return np.zeros((0, self.dims or 0), dtype=np.float32)
        matrix = np.asarray(rows, dtype=np.float32)
        if not np.isfinite(matrix).all():
            raise EmbeddingError(f"{self.id}: response contains non-finite values")
        # The first response settles dims when no table or setting knew it (custom endpoints).
        self.dims = matrix.shape[1]
        return l2_normalize(matrix)

    def embed_online(self, texts: list[str], kind: Kind, deadline: float | None = None) -> Matrix:
        parts: list[Matrix] = []
        for start, stop in pack(
            texts, max_items=self.max_batch_items, max_tokens=self.max_batch_tokens
        ):
            chunk = texts[start:stop]
            parts.append(self.to_matrix(self._embed_batch(chunk, kind, deadline), len(chunk)))
        if not parts:
            return np.zeros((0, self.dims or 0), dtype=np.float32)
        return np.concatenate(parts).astype(np.float32, copy=False)

    def embed_query(self, text: str) -> Vector:
        matrix = self.embed_online([truncate_to_tokens(text, self.max_input_tokens)], "query")
        vector: Vector = matrix[0]
        return vector

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        if not texts:
            return np.zeros((0, self.dims or 0), dtype=np.float32)
        pieces: list[str] = []
        owner: list[int] = []
        for i, text in enumerate(texts):
            for piece in split_to_tokens(text, self.max_input_tokens):
                pieces.append(piece)
                owner.append(i)
        vectors = self._embed_pieces(pieces, deadline)
        if len(pieces) == len(texts):
            return vectors
        weights = np.asarray([max(estimate_tokens(p), 1) for p in pieces], dtype=np.float32)
        out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
        np.add.at(out, np.asarray(owner), vectors * weights[:, None])
        return l2_normalize(out)

    def _embed_pieces(self, pieces: list[str], deadline: float | None) -> Matrix:
        if self.batch is not None and self.batch.active:
            return run_batch(self, self.batch, pieces, deadline)
        return self.embed_online(pieces, "document", deadline)

    def close(self) -> None:
        self.client.close()


def parse_embeddings_response(body: Any, provider: str) -> list[Any]:
    """`{data: [{index, embedding}]}` → embeddings in input order (the OpenAI-shaped APIs)."""
    try:
        data = sorted(body["data"], key=lambda item: item.get("index", 0))
        return [item["embedding"] for item in data]
    except (KeyError, TypeError, AttributeError) as err:
        raise EmbeddingError(f"{provider}: unexpected embeddings response shape") from err


def _decode_vector(value: Any, provider: str) -> list[float]:
    if isinstance(value, str):  # OpenAI-compatible servers may answer encoding_format=base64
        try:
            decoded: list[float] = (
                np.frombuffer(base64.b64decode(value), dtype="<f4").astype(float).tolist()
            )
            return decoded
        except ValueError as err:
            raise EmbeddingError(f"{provider}: undecodable base64 embedding") from err
    if not isinstance(value, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in value
    ):
        raise EmbeddingError(f"{provider}: malformed embedding in response")
    return [float(x) for x in value]
