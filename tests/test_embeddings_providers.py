"""Remote providers against local servers speaking each API's real wire format."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from embedding_servers import (
    FakeAPI,
    FakeGemini,
    FakeMistral,
    FakeOllama,
    FakeOpenAI,
    FakeVoyage,
    fake_vector,
    fast_retry,
    serve,
)
from memoryd.embeddings._remote import (
    MistralProvider,
    OllamaProvider,
    RemoteProvider,
    VoyageProvider,
)
from memoryd.embeddings.gemini import GeminiProvider
from memoryd.embeddings.http import EmbeddingHTTPError
from memoryd.embeddings.openai import OpenAIProvider
from memoryd.errors import EmbeddingError


def unit(values: list[float]) -> np.ndarray[Any, np.dtype[np.float32]]:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture
def openai_api() -> Iterator[tuple[FakeOpenAI, str]]:
    api = FakeOpenAI(key="sk-test")
    with serve(api) as root:
        yield api, f"{root}/v1"


@pytest.fixture
def openai(openai_api: tuple[FakeOpenAI, str]) -> Iterator[OpenAIProvider]:
    _, base = openai_api
    provider = OpenAIProvider(api_key="sk-test", base_url=base, retry=fast_retry())
    yield provider
    provider.close()


# --------------------------------------------------------------------------- OpenAI


def test_openai_posts_model_and_input_with_bearer_key(
    openai: OpenAIProvider, openai_api: tuple[FakeOpenAI, str]
) -> None:
    api, _ = openai_api
    matrix = openai.embed_documents(["alpha", "beta", "gamma"])
    (call,) = api.calls("/v1/embeddings")
    assert call.method == "POST"
    assert call.headers["authorization"] == "Bearer sk-test"
    assert call.body == {"model": "text-embedding-3-small", "input": ["alpha", "beta", "gamma"]}
    # The fake answers out of order; rows must follow `index`, normalized.
    assert matrix.dtype == np.float32 and matrix.shape == (3, 8)
    for row, text in zip(matrix, ["alpha", "beta", "gamma"], strict=True):
        np.testing.assert_allclose(row, unit(fake_vector(text, 8)), rtol=1e-5)
    assert openai.dims == 8


def test_openai_dimensions_are_sent_and_shape_the_vectors(
    openai_api: tuple[FakeOpenAI, str],
) -> None:
    api, base = openai_api
    provider = OpenAIProvider(
        "text-embedding-3-large",
        api_key="sk-test",
        base_url=base,
        output_dimensionality=16,
        retry=fast_retry(),
    )
    try:
        vec = provider.embed_query("hello")
    finally:
        provider.close()
    assert api.requests[-1].body["dimensions"] == 16
    assert vec.shape == (16,) and provider.dims == 16


def test_openai_compatible_input_types_go_in_the_body(
    openai_api: tuple[FakeOpenAI, str],
) -> None:
    api, base = openai_api
    provider = OpenAIProvider(
        "nv-embedqa",
        api_key="sk-test",
        base_url=base,
        input_type={"query": "query", "document": "passage"},
        retry=fast_retry(),
    )
    try:
        provider.embed_query("q")
        provider.embed_documents(["d"])
    finally:
        provider.close()
    assert [r.body["input_type"] for r in api.requests] == ["query", "passage"]


def test_openai_batches_inputs_to_the_request_limit(
    openai_api: tuple[FakeOpenAI, str],
) -> None:
    api, base = openai_api
    api.max_items = 5
    provider = OpenAIProvider(api_key="sk-test", base_url=base, retry=fast_retry())
    provider.max_batch_items = 5
    try:
        matrix = provider.embed_documents([f"text {i}" for i in range(12)])
    finally:
        provider.close()
    assert [len(r.body["input"]) for r in api.requests] == [5, 5, 2]
    np.testing.assert_allclose(matrix[11], unit(fake_vector("text 11", 8)), rtol=1e-5)


def test_long_documents_are_split_and_averaged_not_rejected(
    openai_api: tuple[FakeOpenAI, str],
) -> None:
    api, base = openai_api
    api.max_input_chars = 300
    provider = OpenAIProvider(api_key="sk-test", base_url=base, retry=fast_retry())
    provider.max_input_tokens = 100  # ~300 ASCII characters
    long_text = " ".join(f"word{i}" for i in range(200))
    try:
        matrix = provider.embed_documents(["short", long_text])
        query = provider.embed_query(long_text)
    finally:
        provider.close()
    sent = api.requests[0].body["input"]
    assert sent[0] == "short" and len(sent) > 2
    assert "".join(sent[1:]) == long_text  # every character embedded, none dropped
    assert all(len(piece) <= 300 for piece in sent)
    assert matrix.shape == (2, 8)
    assert np.isclose(np.linalg.norm(matrix[1]), 1.0)
    assert len(api.requests[1].body["input"][0]) <= 300  # the query was truncated
    assert query.shape == (8,)


def test_bad_key_fails_at_once_with_the_apis_message(
    openai_api: tuple[FakeOpenAI, str],
) -> None:
    api, base = openai_api
    provider = OpenAIProvider(api_key="sk-wrong", base_url=base, retry=fast_retry())
    try:
        with pytest.raises(EmbeddingHTTPError, match="Incorrect API key") as info:
            provider.embed_query("hi")
    finally:
        provider.close()
    assert info.value.status_code == 401 and not info.value.retryable
    assert len(api.requests) == 1  # not retried


def test_429_with_retry_after_is_retried_then_succeeds(
    openai_api: tuple[FakeOpenAI, str],
) -> None:
    api, base = openai_api
    sleeps: list[float] = []
    api.fail_next(
        429,
        {"error": {"message": "Rate limit reached for requests", "type": "requests"}},
        headers={"Retry-After": "3"},
    )
    provider = OpenAIProvider(api_key="sk-test", base_url=base, retry=fast_retry(sleeps))
    try:
        vec = provider.embed_query("hi")
    finally:
        provider.close()
    assert vec.shape == (8,)
    assert len(api.requests) == 2
    assert sleeps == [3.0]  # the server's Retry-After, not our backoff


def test_5xx_retries_use_jittered_backoff_within_bounds(
    openai_api: tuple[FakeOpenAI, str],
) -> None:
    api, base = openai_api
    sleeps: list[float] = []
    api.fail_next(500, times=2)
    provider = OpenAIProvider(api_key="sk-test", base_url=base, retry=fast_retry(sleeps))
    try:
        provider.embed_documents(["x"])
    finally:
        provider.close()
    assert len(api.requests) == 3 and len(sleeps) == 2
    assert 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 1.5


def test_retries_stop_after_three_tries(openai_api: tuple[FakeOpenAI, str]) -> None:
    api, base = openai_api
    api.fail_next(503, times=5)
    provider = OpenAIProvider(api_key="sk-test", base_url=base, retry=fast_retry())
    try:
        with pytest.raises(EmbeddingHTTPError, match="HTTP 503"):
            provider.embed_query("x")
    finally:
        provider.close()
    assert len(api.requests) == 3


def test_unreachable_endpoint_is_an_embedding_error() -> None:
    with serve(FakeOpenAI()) as root:
        pass  # the port is free again: nothing listens there
    provider = OpenAIProvider(api_key="k", base_url=f"{root}/v1", retry=fast_retry())
    try:
        with pytest.raises(EmbeddingError, match="cannot reach"):
            provider.embed_query("x")
    finally:
        provider.close()


def test_malformed_response_is_rejected(openai_api: tuple[FakeOpenAI, str]) -> None:
    api, base = openai_api
    api.fail_next(200, {"object": "list", "data": [{"index": 0, "embedding": ["nope"]}]})
    provider = OpenAIProvider(api_key="sk-test", base_url=base, retry=fast_retry())
    try:
        with pytest.raises(EmbeddingError, match="malformed"):
            provider.embed_query("x")
    finally:
        provider.close()


# --------------------------------------------------------------------------- Gemini


def test_gemini_uses_native_endpoints_key_header_and_task_types() -> None:
    api = FakeGemini(key="g-key")
    with serve(api) as root:
        provider = GeminiProvider(api_key="g-key", base_url=f"{root}/v1beta", retry=fast_retry())
        try:
            query = provider.embed_query("where is it")
            docs = provider.embed_documents(["one", "two"])
        finally:
            provider.close()
    q, d = api.requests
    assert q.path == "/v1beta/models/gemini-embedding-001:embedContent"
    assert q.headers["x-goog-api-key"] == "g-key" and "authorization" not in q.headers
    assert q.body == {
        "content": {"parts": [{"text": "where is it"}]},
        "taskType": "RETRIEVAL_QUERY",
    }
    assert d.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert d.body["requests"][1] == {
        "content": {"parts": [{"text": "two"}]},
        "taskType": "RETRIEVAL_DOCUMENT",
        "model": "models/gemini-embedding-001",
    }
    np.testing.assert_allclose(
        query, unit(fake_vector("RETRIEVAL_QUERY|where is it", 8)), rtol=1e-5
    )
    np.testing.assert_allclose(docs[1], unit(fake_vector("RETRIEVAL_DOCUMENT|two", 8)), rtol=1e-5)


def test_gemini_batches_at_most_100_requests() -> None:
    api = FakeGemini(key="g")
    with serve(api) as root:
        provider = GeminiProvider(api_key="g", base_url=f"{root}/v1beta", retry=fast_retry())
        try:
            matrix = provider.embed_documents([f"t{i}" for i in range(230)])
        finally:
            provider.close()
    assert [len(r.body["requests"]) for r in api.requests] == [100, 100, 30]
    assert matrix.shape == (230, 8)


def test_gemini_output_dimensionality_is_sent_and_validated() -> None:
    api = FakeGemini(key="g")
    with serve(api) as root:
        provider = GeminiProvider(
            "gemini-embedding-2-preview",
            api_key="g",
            base_url=f"{root}/v1beta",
            output_dimensionality=768,
            retry=fast_retry(),
        )
        try:
            vec = provider.embed_query("x")
        finally:
            provider.close()
    assert api.requests[0].body["outputDimensionality"] == 768 and vec.shape == (768,)
    with pytest.raises(EmbeddingError, match="768, 1536 or 3072"):
        GeminiProvider("gemini-embedding-2-preview", api_key="g", output_dimensionality=1000)


def test_gemini_invalid_key_reports_googles_message() -> None:
    with serve(FakeGemini(key="right")) as root:
        provider = GeminiProvider(api_key="wrong", base_url=f"{root}/v1beta", retry=fast_retry())
        try:
            with pytest.raises(EmbeddingHTTPError, match="API key not valid"):
                provider.embed_query("x")
        finally:
            provider.close()


def test_gemini_resource_exhausted_is_retried() -> None:
    api = FakeGemini(key="g")
    api.fail_next(429)
    with serve(api) as root:
        provider = GeminiProvider(api_key="g", base_url=f"{root}/v1beta", retry=fast_retry())
        try:
            provider.embed_query("x")
        finally:
            provider.close()
    assert len(api.requests) == 2


# --------------------------------------------------------------------------- Voyage, Mistral, Ollama


def test_voyage_sends_input_type_query_and_document() -> None:
    api = FakeVoyage(key="pa-key")
    with serve(api) as root:
        provider = VoyageProvider(api_key="pa-key", base_url=f"{root}/v1", retry=fast_retry())
        try:
            query = provider.embed_query("q")
            provider.embed_documents(["d1", "d2"])
        finally:
            provider.close()
    q, d = api.requests
    assert q.path == d.path == "/v1/embeddings"
    assert q.headers["authorization"] == "Bearer pa-key"
    assert q.body == {"input": ["q"], "model": "voyage-4-large", "input_type": "query"}
    assert d.body == {"input": ["d1", "d2"], "model": "voyage-4-large", "input_type": "document"}
    np.testing.assert_allclose(query, unit(fake_vector("query|q", 8)), rtol=1e-5)


def test_voyage_error_detail_surfaces() -> None:
    with serve(FakeVoyage(key="right")) as root:
        provider = VoyageProvider(api_key="wrong", base_url=f"{root}/v1", retry=fast_retry())
        try:
            with pytest.raises(EmbeddingHTTPError, match="Provided API key is invalid"):
                provider.embed_documents(["x"])
        finally:
            provider.close()


def test_mistral_packs_requests_by_token_budget() -> None:
    api = FakeMistral(key="m-key", max_batch_chars=3000)
    with serve(api) as root:
        provider = MistralProvider(api_key="m-key", base_url=f"{root}/v1", retry=fast_retry())
        provider.max_batch_tokens = 1000  # ~3000 ASCII characters by our conservative estimate
        try:
            matrix = provider.embed_documents(["x" * 900] * 10)
        finally:
            provider.close()
    assert all(r.body["model"] == "mistral-embed" for r in api.requests)
    assert len(api.requests) == 4  # 3 + 3 + 3 + 1 texts of ~300 tokens each
    assert matrix.shape == (10, 8)


def test_mistral_unauthorized_message() -> None:
    with serve(FakeMistral(key="right")) as root:
        provider = MistralProvider(api_key="wrong", base_url=f"{root}/v1", retry=fast_retry())
        try:
            with pytest.raises(EmbeddingHTTPError, match="Unauthorized"):
                provider.embed_query("x")
        finally:
            provider.close()


def test_ollama_api_embed_without_key() -> None:
    api = FakeOllama()
    with serve(api) as root:
        provider = OllamaProvider(base_url=root, retry=fast_retry())
        try:
            matrix = provider.embed_documents(["a", "b"])
        finally:
            provider.close()
    (call,) = api.requests
    assert call.path == "/api/embed" and call.body == {
        "model": "nomic-embed-text",
        "input": ["a", "b"],
    }
    assert "authorization" not in call.headers
    np.testing.assert_allclose(matrix[1], unit(fake_vector("b", 8)), rtol=1e-5)


def test_ollama_falls_back_to_legacy_embeddings_endpoint() -> None:
    api = FakeOllama(legacy_only=True)
    with serve(api) as root:
        provider = OllamaProvider(base_url=root, retry=fast_retry())
        try:
            provider.embed_documents(["a", "b"])
            provider.embed_query("c")
        finally:
            provider.close()
    assert [r.path for r in api.requests] == [
        "/api/embed",
        "/api/embeddings",
        "/api/embeddings",
        "/api/embeddings",
    ]
    assert api.requests[1].body == {"model": "nomic-embed-text", "prompt": "a"}
    assert provider.api == "embeddings"


def test_ollama_unknown_model_is_not_mistaken_for_an_old_server() -> None:
    api = FakeOllama()
    with serve(api) as root:
        provider = OllamaProvider("missing-model", base_url=root, retry=fast_retry())
        try:
            with pytest.raises(EmbeddingHTTPError, match="try pulling it first"):
                provider.embed_query("x")
        finally:
            provider.close()
    assert [r.path for r in api.requests] == ["/api/embed"]


def test_ollama_input_type_prefixes() -> None:
    api = FakeOllama()
    with serve(api) as root:
        provider = OllamaProvider(
            base_url=root,
            input_type={"query": "search_query: ", "document": "search_document: "},
            retry=fast_retry(),
        )
        try:
            provider.embed_query("q")
        finally:
            provider.close()
    assert api.requests[0].body["input"] == ["search_query: q"]


# --------------------------------------------------------------------------- all providers


PROVIDERS: list[tuple[type[RemoteProvider], type[FakeAPI], str]] = [
    (OpenAIProvider, FakeOpenAI, "/v1"),
    (GeminiProvider, FakeGemini, "/v1beta"),
    (VoyageProvider, FakeVoyage, "/v1"),
    (MistralProvider, FakeMistral, "/v1"),
    (OllamaProvider, FakeOllama, ""),
]


@pytest.mark.parametrize(
    ("cls", "fake", "prefix"), PROVIDERS, ids=[p[0].__name__ for p in PROVIDERS]
)
def test_every_provider_returns_normalized_float32_in_input_order(
    cls: type[RemoteProvider], fake: type[FakeAPI], prefix: str
) -> None:
    api = fake(key="k") if fake is not FakeOllama else fake()
    texts = [f"note {i}" for i in range(7)]
    with serve(api) as root:
        provider = cls(api_key=api.key, base_url=root + prefix, retry=fast_retry())
        try:
            matrix = provider.embed_documents(texts)
            empty = provider.embed_documents([])
        finally:
            provider.close()
    assert matrix.dtype == np.float32 and matrix.shape == (7, 8)
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, rtol=1e-5)
    assert len({row.tobytes() for row in matrix}) == 7
    assert empty.shape[0] == 0


@pytest.mark.parametrize(
    ("cls", "fake", "prefix"), PROVIDERS, ids=[p[0].__name__ for p in PROVIDERS]
)
def test_every_provider_retries_a_503_then_succeeds(
    cls: type[RemoteProvider], fake: type[FakeAPI], prefix: str
) -> None:
    api = fake(key="k") if fake is not FakeOllama else fake()
    api.fail_next(503)
    with serve(api) as root:
        provider = cls(api_key=api.key, base_url=root + prefix, retry=fast_retry())
        try:
            vec = provider.embed_query("x")
        finally:
            provider.close()
    assert vec.shape == (8,) and len(api.requests) == 2
