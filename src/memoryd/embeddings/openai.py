"""OpenAI embeddings, and any OpenAI-compatible endpoint (OpenRouter, vLLM, LM Studio, proxies)."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from ..errors import EmbeddingError
from ._limits import pack
from ._remote import BatchMode, JobStatus, Kind, RemoteProvider, parse_embeddings_response
from .http import parse_json

_BATCH_FAILED = {"failed", "expired", "cancelling", "cancelled"}


class OpenAIBatchMode(BatchMode):
    """OpenAI Batch API for `/v1/embeddings`; one JSONL line per online-sized request."""

    provider: OpenAIProvider

    def submit(self, texts: list[str]) -> str:
        p = self.provider
        lines = [
            json.dumps(
                {
                    "custom_id": f"memoryd-{start}-{stop}",
                    "method": "POST",
                    "url": "/v1/embeddings",
                    "body": self.provider.request_body(texts[start:stop], "document"),
                }
            )
            for start, stop in pack(
                texts, max_items=p.max_batch_items, max_tokens=p.max_batch_tokens
            )
        ]
        client = self.provider.client
        upload = client.request(
            "POST",
            "files",
            data={"purpose": "batch"},
            files={
                "file": (
                    "memoryd-embeddings.jsonl",
                    ("\n".join(lines) + "\n").encode(),
                    "application/jsonl",
                )
            },
        )
        file_id = _field(parse_json(upload, "openai"), "id")
        job = client.post_json(
            "batches",
            {
                "input_file_id": file_id,
                "endpoint": "/v1/embeddings",
                "completion_window": "24h",
                "metadata": {"source": "memoryd"},
            },
        )
        return str(_field(job, "id"))

    def poll(self, job_id: str) -> JobStatus:
        job = self.provider.client.get_json(f"batches/{job_id}")
        if not isinstance(job, dict):
            raise EmbeddingError(f"openai: unexpected batch response for {job_id}")
        state = str(job.get("status", "unknown"))
        error = None
        if state in _BATCH_FAILED:
            messages = [
                e.get("message", "")
                for e in (job.get("errors") or {}).get("data", [])
                if isinstance(e, dict)
            ]
            error = "; ".join(m for m in messages if m) or state
        return JobStatus(job_id, state, state == "completed" or state in _BATCH_FAILED, error, job)

    def results(self, status: JobStatus, count: int) -> list[Any]:
        output = status.raw.get("output_file_id")
        if not output:
            raise EmbeddingError(
                f"openai batch {status.id} completed without an output file (all requests failed?)"
            )
        response = self.provider.client.request("GET", f"files/{output}/content")
        vectors: list[Any] = [None] * count
        for line in response.text.splitlines():
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                start, stop = (
                    int(x)
                    for x in str(item.get("custom_id", "")).removeprefix("memoryd-").split("-")
                )
            except (ValueError, AttributeError) as err:
                raise EmbeddingError(
                    f"openai batch {status.id}: unreadable output line {line[:120]!r}"
                ) from err
            reply = item.get("response") or {}
            if item.get("error") or reply.get("status_code") != 200:
                detail = (
                    item.get("error")
                    or (reply.get("body") or {}).get("error")
                    or reply.get("status_code")
                )
                raise EmbeddingError(
                    f"openai batch {status.id}: request {start}-{stop} failed: {detail}"
                )
            got = parse_embeddings_response(reply.get("body"), "openai")
            if len(got) != stop - start or stop > count:
                raise EmbeddingError(
                    f"openai batch {status.id}: request {start}-{stop} returned {len(got)} embeddings"
                )
            vectors[start:stop] = got
        if any(v is None for v in vectors):
            raise EmbeddingError(f"openai batch {status.id}: output is missing embeddings")
        return vectors

    def cancel(self, job_id: str) -> None:
        self.provider.client.request("POST", f"batches/{job_id}/cancel")


class OpenAIProvider(RemoteProvider):
    id = "openai"
    batch_mode = OpenAIBatchMode
    default_base_url = "https://api.openai.com/v1"
    default_model = "text-embedding-3-small"
    known_dims: ClassVar[dict[str, int]] = {
        "text-embedding-3-small": 1536,
        "text-embedding-3-large": 3072,
        "text-embedding-ada-002": 1536,
    }
    max_input_tokens = 8191
    max_batch_items = 2048
    max_batch_tokens = 300_000

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        if self.custom_endpoint:
            # Unknown servers: smaller requests are the safe side of an undocumented limit.
            self.max_batch_items = 256
            self.max_batch_tokens = 100_000

    def request_body(self, texts: list[str], kind: Kind) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.output_dimensionality:
            body["dimensions"] = self.output_dimensionality
        if self.input_type and self.input_type.get(kind):
            body["input_type"] = self.input_type[kind]
        return body


def _field(body: Any, key: str) -> Any:
    if not isinstance(body, dict) or key not in body:
        raise EmbeddingError(f"openai: response lacks {key!r}")
    return body[key]
