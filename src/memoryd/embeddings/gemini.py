"""Gemini embeddings through the native Generative Language API (v1beta)."""

from __future__ import annotations

from typing import Any, ClassVar

from ..errors import EmbeddingError
from ._remote import BatchMode, JobStatus, Kind, RemoteProvider

_TASK_TYPES = {"query": "RETRIEVAL_QUERY", "document": "RETRIEVAL_DOCUMENT"}
_PREVIEW_DIMS = (768, 1536, 3072)
_FAILED_STATES = frozenset(
    "BATCH_STATE_FAILED BATCH_STATE_CANCELLED BATCH_STATE_EXPIRED JOB_STATE_FAILED".split()
)


class GeminiBatchMode(BatchMode):
    """Gemini's async batch embedding (`asyncBatchEmbedContent`) with inline requests."""

    max_job_inputs = 10_000
    provider: GeminiProvider

    def submit(self, texts: list[str]) -> str:
        p = self.provider
        body = {
            "batch": {
                "displayName": "memoryd-embeddings",
                "inputConfig": {
                    "requests": {
                        "requests": [
                            {
                                "request": p.content_request(t, "document", with_model=True),
                                "metadata": {"key": str(i)},
                            }
                            for i, t in enumerate(texts)
                        ]
                    }
                },
            }
        }
        op = p.client.post_json(f"models/{p.model}:asyncBatchEmbedContent", body)
        name = op.get("name") if isinstance(op, dict) else None
        if not name:
            raise EmbeddingError("gemini: asyncBatchEmbedContent returned no operation name")
        return str(name)

    def poll(self, job_id: str) -> JobStatus:
        op = self.provider.client.get_json(job_id)
        if not isinstance(op, dict):
            raise EmbeddingError(f"gemini: unexpected batch operation for {job_id}")
        meta = op.get("metadata") or {}
        state = str(
            meta.get("state")
            or ("BATCH_STATE_SUCCEEDED" if op.get("done") else "BATCH_STATE_PENDING")
        )
        error = None
        if isinstance(op.get("error"), dict):
            error = str(op["error"].get("message") or op["error"])
        elif state in _FAILED_STATES:
            error = state
        done = bool(op.get("done")) or error is not None
        return JobStatus(job_id, state, done, error, op)

    def results(self, status: JobStatus, count: int) -> list[Any]:
        response = status.raw.get("response") or {}
        output = response.get("output", response)
        inlined = output.get("inlinedResponses") or {}
        items = inlined.get("inlinedResponses", []) if isinstance(inlined, dict) else inlined
        if not items and output.get("responsesFile"):
            raise EmbeddingError(
                f"gemini batch {status.id}: file output is not supported (inline requests expected)"
            )
        vectors: list[Any] = [None] * count
        for position, item in enumerate(items):
            key = (item.get("metadata") or {}).get("key", position)
            try:
                index = int(key)
            except (TypeError, ValueError) as err:
                raise EmbeddingError(
                    f"gemini batch {status.id}: unexpected metadata key {key!r}"
                ) from err
            if item.get("error") or not 0 <= index < count:
                raise EmbeddingError(
                    f"gemini batch {status.id}: request {key} failed: {item.get('error')}"
                )
            try:
                vectors[index] = item["response"]["embedding"]["values"]
            except (KeyError, TypeError) as err:
                raise EmbeddingError(
                    f"gemini batch {status.id}: malformed response for request {key}"
                ) from err
        if any(v is None for v in vectors):
            raise EmbeddingError(f"gemini batch {status.id}: output is missing embeddings")
        return vectors

    def cancel(self, job_id: str) -> None:
        self.provider.client.request("POST", f"{job_id}:cancel")


class GeminiProvider(RemoteProvider):
    id = "gemini"
    batch_mode = GeminiBatchMode
    default_base_url = "https://generativelanguage.googleapis.com/v1beta"
    default_model = "gemini-embedding-001"
    known_dims: ClassVar[dict[str, int]] = {
        "gemini-embedding-001": 3072,
        "gemini-embedding-2-preview": 3072,
    }
    max_input_tokens = 2048
    max_batch_items = 100
    kind_defaults = _TASK_TYPES
    kind_fingerprint = "task"

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        if model:
            model = model.removeprefix("models/")
        super().__init__(model, **kwargs)
        dims = self.output_dimensionality
        if dims is not None:
            if self.model == "gemini-embedding-2-preview" and dims not in _PREVIEW_DIMS:
                raise EmbeddingError(
                    f"gemini: outputDimensionality for {self.model} must be 768, 1536 or 3072 (got {dims})"
                )
            if not 1 <= dims <= 3072:
                raise EmbeddingError(
                    f"gemini: outputDimensionality must be at most 3072 (got {dims})"
                )
        if self.model == "gemini-embedding-2-preview":
            self.max_input_tokens = 8192

    def default_headers(self, api_key: str | None) -> dict[str, str]:
        return {"x-goog-api-key": api_key} if api_key else {}

    def content_request(self, text: str, kind: Kind, *, with_model: bool) -> dict[str, Any]:
        req: dict[str, Any] = {
            "content": {"parts": [{"text": text}]},
            "taskType": self.kind_type(kind),
        }
        if with_model:
            req["model"] = f"models/{self.model}"
        if self.output_dimensionality:
            req["outputDimensionality"] = self.output_dimensionality
        return req

    def _embed_batch(self, texts: list[str], kind: Kind, deadline: float | None) -> list[Any]:
        path = f"models/{self.model}"
        if kind == "query" and len(texts) == 1:
            body = self.client.post_json(
                f"{path}:embedContent",
                self.content_request(texts[0], kind, with_model=False),
                deadline,
            )
            try:
                return [body["embedding"]["values"]]
            except (KeyError, TypeError) as err:
                raise EmbeddingError("gemini: unexpected embedContent response shape") from err
        requests = [self.content_request(t, kind, with_model=True) for t in texts]
        body = self.client.post_json(f"{path}:batchEmbedContents", {"requests": requests}, deadline)
        try:
            return [item["values"] for item in body["embeddings"]]
        except (KeyError, TypeError) as err:
            raise EmbeddingError("gemini: unexpected batchEmbedContents response shape") from err
