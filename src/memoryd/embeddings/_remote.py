"""What every HTTP embedding provider shares: limits, long-text policy, vector checks, and the
optional batch mode (documents through a provider's asynchronous batch API)."""

from __future__ import annotations

import abc
import base64
import contextlib
import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from ..config import BatchConfig
from ..errors import BatchPending, EmbeddingError
from ._limits import estimate_tokens, pack, split_to_tokens
from .base import (
    DeadlineReached,
    EmbeddingProvider,
    Matrix,
    Vector,
    endpoint_fingerprint,
    l2_normalize,
)
from .http import ApiClient, EmbeddingHTTPError, RetryPolicy, merge_headers

Kind = Literal["query", "document"]
#: Failed batch runs after which a provider embeds online only.
MAX_FAILURES = 2


class RemoteProvider(EmbeddingProvider):
    """Base of the HTTP providers (`openai`, `gemini`, `voyage`, `mistral`, `ollama`)."""

    default_base_url: ClassVar[str]
    default_model: ClassVar[str]
    #: Known output sizes of the provider's common models (others learn it from the first response).
    known_dims: ClassVar[Mapping[str, int]] = {}
    max_batch_items: int = 128
    max_batch_tokens: int | None = None
    #: The provider's asynchronous batch API, if it has one (used when remote.batch.enabled).
    batch_mode: ClassVar[type[BatchMode] | None] = None
    #: An API with an input type per kind: each kind's default (`remote.inputType` overrides it),
    #: and the fingerprint key that records the ones in use.
    kind_defaults: ClassVar[Mapping[str, str]] = {}
    kind_fingerprint: ClassVar[str] = ""

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
        if batch is not None and batch.enabled and self.batch_mode is not None:
            self.batch = self.batch_mode(self, batch)

    # ------------------------------------------------------------------ provider-specific hooks

    def default_headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def kind_type(self, kind: Kind) -> str:
        """The input type a request of `kind` carries (APIs with `kind_defaults`)."""
        return (self.input_type or {}).get(kind) or self.kind_defaults[kind]

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
            **{self.kind_fingerprint: [self.kind_type("query"), self.kind_type("document")]}
            if self.kind_fingerprint
            else {},
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
        # a query longer than the model takes is cut to its first piece
        matrix = self.embed_online([split_to_tokens(text, self.max_input_tokens)[0]], "query")
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
        if self.batch is not None and self.batch.active:
            vectors = self.batch.run(pieces, deadline)
        else:
            vectors = self.embed_online(pieces, "document", deadline)
        if len(pieces) == len(texts):
            return vectors
        weights = np.asarray([max(estimate_tokens(p), 1) for p in pieces], dtype=np.float32)
        out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
        np.add.at(out, np.asarray(owner), vectors * weights[:, None])
        return l2_normalize(out)

    def close(self) -> None:
        self.client.close()


# ---------------------------------------------------------------- providers without a batch API


class VoyageProvider(RemoteProvider):
    id = "voyage"
    default_base_url = "https://api.voyageai.com/v1"
    default_model = "voyage-4-large"
    known_dims: ClassVar[dict[str, int]] = dict.fromkeys(
        "voyage-4-large voyage-4 voyage-4-lite voyage-3-large voyage-3.5 voyage-3.5-lite"
        " voyage-code-3".split(),
        1024,
    )
    max_input_tokens = 32_000
    max_batch_items = 1000
    max_batch_tokens = 120_000
    kind_defaults: ClassVar[dict[str, str]] = {"query": "query", "document": "document"}
    kind_fingerprint = "kinds"

    def request_body(self, texts: list[str], kind: Kind) -> dict[str, Any]:
        body = super().request_body(texts, kind)
        body["input_type"] = self.kind_type(kind)
        return body


class MistralProvider(RemoteProvider):
    id = "mistral"
    default_base_url = "https://api.mistral.ai/v1"
    default_model = "mistral-embed"
    known_dims: ClassVar[dict[str, int]] = {"mistral-embed": 1024, "codestral-embed": 1536}
    max_input_tokens = 8000
    max_batch_items = 128
    max_batch_tokens = 16_000


class OllamaProvider(RemoteProvider):
    """A local (or proxied) Ollama server; `inputType` values are prefixes of the texts."""

    id = "ollama"
    default_base_url = "http://127.0.0.1:11434"
    default_model = "nomic-embed-text"
    max_input_tokens = 2048
    max_batch_items = 64
    #: The endpoint that answers: "auto" until a server says (older ones have only "embeddings").
    api: Literal["auto", "embed", "embeddings"] = "auto"

    def _embed_batch(self, texts: list[str], kind: Kind, deadline: float | None) -> list[Any]:
        prefix = (self.input_type or {}).get(kind, "")
        texts = [prefix + t for t in texts]
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


def parse_embeddings_response(body: Any, provider: str) -> list[Any]:
    """`{data: [{index, embedding}]}` → embeddings in input order (the OpenAI-shaped APIs)."""
    try:
        data = sorted(body["data"], key=lambda item: item.get("index", 0))
        return [item["embedding"] for item in data]
    except (KeyError, TypeError, AttributeError) as err:
        raise EmbeddingError(f"{provider}: unexpected embeddings response shape") from err


def _decode_vector(value: Any, provider: str) -> list[float] | Vector:
    if isinstance(value, str):  # OpenAI-compatible servers may answer encoding_format=base64
        try:
            return np.frombuffer(base64.b64decode(value), dtype="<f4")
        except ValueError as err:
            raise EmbeddingError(f"{provider}: undecodable base64 embedding") from err
    if not isinstance(value, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in value
    ):
        raise EmbeddingError(f"{provider}: malformed embedding in response")
    return value


@dataclass
class JobStatus:
    id: str
    state: str
    done: bool
    error: str | None
    raw: Any


class BatchMode(abc.ABC):
    """One provider's batch API: its wire format and its state (failures, jobs in flight)."""

    #: Most inputs one job carries; more inputs make more jobs.
    max_job_inputs: int = 50_000

    def __init__(self, provider: RemoteProvider, config: BatchConfig) -> None:
        self.provider = provider
        self.config = config
        self.failures = 0
        self.disabled_reason: str | None = None
        self.last_error: str | None = None
        #: job id by the digest of its texts: a job still running is collected, not sent again
        self._pending: dict[str, str] = {}
        #: jobs in flight for this provider, across every caller
        self._slots = threading.BoundedSemaphore(config.concurrency)
        self._lock = threading.Lock()

    @abc.abstractmethod
    def submit(self, texts: list[str]) -> str:
        """Create a job embedding `texts` as documents; returns its id."""

    @abc.abstractmethod
    def poll(self, job_id: str) -> JobStatus:
        """Current state of a job; `done` with `error` set means it failed."""

    @abc.abstractmethod
    def results(self, status: JobStatus, count: int) -> list[Any]:
        """The raw vectors of a finished job, in input order."""

    @abc.abstractmethod
    def cancel(self, job_id: str) -> None:
        """Best-effort cancellation of a job we gave up on."""

    @property
    def active(self) -> bool:
        return self.config.enabled and self.disabled_reason is None

    def record_failure(self, reason: str) -> None:
        with self._lock:
            self.failures += 1
            self.last_error = reason
            if self.failures >= MAX_FAILURES and self.disabled_reason is None:
                self.disabled_reason = (
                    f"batch mode off after {self.failures} failures; last: {reason}"
                )

    def _finish(self, job_id: str, count: int, deadline: float | None) -> Matrix:
        """Poll a job to completion (or timeout) and return its normalized vectors."""
        cfg, name = self.config, self.provider.id
        timeout_at = time.monotonic() + cfg.timeout_minutes * 60
        pause = cfg.poll_interval_ms / 1000
        while not (status := self.poll(job_id)).done:
            if time.monotonic() >= timeout_at:
                with contextlib.suppress(EmbeddingError):  # abandoned either way: this saves work
                    self.cancel(job_id)
                raise EmbeddingError(
                    f"{name} batch job {job_id} timed out after {cfg.timeout_minutes:g} min (state {status.state})"
                )
            if not cfg.wait:
                raise BatchPending(f"{name} batch job {job_id} is {status.state}", [job_id])
            if deadline is not None and time.monotonic() + pause >= deadline:
                raise DeadlineReached
            time.sleep(pause)
        if status.error:
            raise EmbeddingError(f"{name} batch job {job_id} {status.state}: {status.error}")
        return self.provider.to_matrix(self.results(status, count), count)

    def _job(self, texts: list[str], deadline: float | None) -> Matrix:
        h = hashlib.sha256(self.provider.fingerprint().encode())
        for text in texts:
            h.update(len(text).to_bytes(8, "little"))
            h.update(text.encode())
        key = h.hexdigest()
        with self._slots:
            job_id = self._pending.get(key)
            if job_id is None:
                job_id = self._pending[key] = self.submit(texts)
            try:
                matrix = self._finish(job_id, len(texts), deadline)
            except (BatchPending, DeadlineReached):
                raise  # the job goes on: a later call collects it
            except BaseException:
                self._pending.pop(key, None)
                raise
            self._pending.pop(key, None)
            return matrix

    def run(self, texts: list[str], deadline: float | None = None) -> Matrix:
        """Embed `texts` as documents through batch jobs; ranges whose job failed go online."""
        ranges = pack(texts, max_items=self.max_job_inputs, max_tokens=None)

        def job(span: tuple[int, int]) -> Matrix | Exception:
            try:
                return self._job(texts[span[0] : span[1]], deadline)
            except (EmbeddingError, DeadlineReached) as err:  # BatchPending is an EmbeddingError
                return err

        if len(ranges) == 1:
            outcomes = [job(ranges[0])]
        else:  # the jobs wait on the provider side at once (`concurrency` bounds them)
            with ThreadPoolExecutor(len(ranges), thread_name_prefix="memoryd-batch") as pool:
                outcomes = list(pool.map(job, ranges))
        errors = [e for e in outcomes if isinstance(e, Exception)]
        if failed := [e for e in errors if not isinstance(e, BatchPending | DeadlineReached)]:
            self.record_failure(str(failed[0]))
        if job_ids := [j for e in errors if isinstance(e, BatchPending) for j in e.job_ids]:
            raise BatchPending(
                f"{self.provider.id}: {len(job_ids)} batch job(s) still running; sync again later",
                job_ids,
            )
        for err in errors:
            if isinstance(err, DeadlineReached):
                raise err
        return np.concatenate(
            [
                self.provider.embed_online(texts[a:b], "document", deadline)
                if isinstance(out, Exception)
                else out
                for out, (a, b) in zip(outcomes, ranges, strict=True)
            ]
        )
