"""Batch mode: OpenAI Batch API and Gemini async batch job lifecycles, failure handling, switch-off."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from embedding_servers import FakeGemini, FakeOpenAI, fake_vector, fast_retry, serve
from memoryd.config import BatchConfig
from memoryd.config_validation import validate
from memoryd.embeddings.gemini import GeminiProvider
from memoryd.embeddings.openai import OpenAIProvider
from memoryd.errors import BatchPending


def batch(**kwargs: Any) -> BatchConfig:
    return validate(BatchConfig, {"enabled": True, "pollIntervalMs": 1, **kwargs})


def unit(values: list[float]) -> np.ndarray[Any, np.dtype[np.float32]]:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_openai_batch_job_lifecycle() -> None:
    api = FakeOpenAI(key="sk", polls_to_finish=3)
    texts = [f"doc {i}" for i in range(5)]
    with serve(api) as root:
        provider = OpenAIProvider(
            api_key="sk", base_url=f"{root}/v1", batch=batch(), retry=fast_retry()
        )
        provider.max_batch_items = 2  # three JSONL lines
        try:
            matrix = provider.embed_documents(texts)
            query = provider.embed_query("q")  # queries stay online
        finally:
            provider.close()
    paths = [(r.method, r.path) for r in api.requests]
    assert paths == [
        ("POST", "/v1/files"),
        ("POST", "/v1/batches"),
        ("GET", "/v1/batches/batch_1"),
        ("GET", "/v1/batches/batch_1"),
        ("GET", "/v1/batches/batch_1"),
        ("GET", "/v1/files/file-2/content"),
        ("POST", "/v1/embeddings"),
    ]
    upload, create = api.requests[0], api.requests[1]
    assert upload.headers["authorization"] == "Bearer sk"
    lines = [json.loads(line) for line in api.files["file-1"].decode().splitlines()]
    assert [line["url"] for line in lines] == ["/v1/embeddings"] * 3
    assert lines[0]["body"] == {"model": "text-embedding-3-small", "input": ["doc 0", "doc 1"]}
    assert create.body["endpoint"] == "/v1/embeddings" and create.body["input_file_id"] == "file-1"
    for row, text in zip(matrix, texts, strict=True):  # output lines came back reversed
        np.testing.assert_allclose(row, unit(fake_vector(text, 8)), rtol=1e-5)
    assert query.shape == (8,)
    state = provider.batch
    assert state is not None
    assert state.failures == 0 and state.active  # the one job above, submitted and collected


def test_gemini_async_batch_lifecycle() -> None:
    api = FakeGemini(key="g")
    texts = ["alpha", "beta", "gamma"]
    with serve(api) as root:
        provider = GeminiProvider(
            api_key="g", base_url=f"{root}/v1beta", batch=batch(), retry=fast_retry()
        )
        try:
            matrix = provider.embed_documents(texts)
        finally:
            provider.close()
    create, *polls = api.requests
    assert create.path == "/v1beta/models/gemini-embedding-001:asyncBatchEmbedContent"
    assert create.headers["x-goog-api-key"] == "g"
    requests = create.body["batch"]["inputConfig"]["requests"]["requests"]
    assert requests[2] == {
        "request": {
            "content": {"parts": [{"text": "gamma"}]},
            "taskType": "RETRIEVAL_DOCUMENT",
            "model": "models/gemini-embedding-001",
        },
        "metadata": {"key": "2"},
    }
    assert [p.path for p in polls] == ["/v1beta/batches/b1", "/v1beta/batches/b1"]
    for row, text in zip(matrix, texts, strict=True):
        np.testing.assert_allclose(
            row, unit(fake_vector(f"RETRIEVAL_DOCUMENT|{text}", 8)), rtol=1e-5
        )


@pytest.mark.parametrize("outcome", ["failed", "expired"])
def test_failed_job_falls_back_to_online_and_is_counted(outcome: str) -> None:
    api = FakeOpenAI(key="sk", batch_outcome=outcome)
    with serve(api) as root:
        provider = OpenAIProvider(
            api_key="sk", base_url=f"{root}/v1", batch=batch(), retry=fast_retry()
        )
        try:
            matrix = provider.embed_documents(["a", "b"])
        finally:
            provider.close()
    assert matrix.shape == (2, 8)
    assert api.requests[-1].path == "/v1/embeddings"  # the texts were embedded online instead
    assert provider.batch.failures == 1 and provider.batch.active


def test_batch_mode_switches_off_after_two_failures_with_reason() -> None:
    api = FakeGemini(key="g", batch_outcome="failed")
    with serve(api) as root:
        provider = GeminiProvider(
            api_key="g", base_url=f"{root}/v1beta", batch=batch(), retry=fast_retry()
        )
        try:
            provider.embed_documents(["a"])
            provider.embed_documents(["b"])
            before = len(api.calls(":asyncBatchEmbedContent"))
            provider.embed_documents(["c"])
        finally:
            provider.close()
    assert before == 2 and len(api.calls(":asyncBatchEmbedContent")) == 2  # no third job
    state = provider.batch
    assert state is not None and not state.active
    assert "batch mode off after 2 failures" in str(state.disabled_reason)
    assert "scripted batch failed" in str(state.disabled_reason)


def test_job_that_never_finishes_times_out_and_is_cancelled() -> None:
    api = FakeOpenAI(key="sk", batch_outcome="never")
    with serve(api) as root:
        provider = OpenAIProvider(
            api_key="sk",
            base_url=f"{root}/v1",
            batch=batch(timeoutMinutes=0.001),
            retry=fast_retry(),
        )
        try:
            matrix = provider.embed_documents(["a"])
        finally:
            provider.close()
    assert matrix.shape == (1, 8)
    assert api.calls("/cancel") and api.batches["batch_1"]["status"] == "cancelling"
    assert "timed out" in str(provider.batch.last_error)


def test_upload_error_counts_as_a_batch_failure() -> None:
    api = FakeOpenAI(key="sk")
    api.fail_next(
        400,
        {"error": {"message": "Batch API is not enabled for this organization"}},
        path_contains="/files",
    )
    with serve(api) as root:
        provider = OpenAIProvider(
            api_key="sk", base_url=f"{root}/v1", batch=batch(), retry=fast_retry()
        )
        try:
            provider.embed_documents(["a"])
        finally:
            provider.close()
    assert provider.batch.failures == 1 and "not enabled" in str(provider.batch.last_error)


def test_no_wait_raises_pending_then_collects_the_same_job() -> None:
    api = FakeOpenAI(key="sk", polls_to_finish=2)
    with serve(api) as root:
        provider = OpenAIProvider(
            api_key="sk", base_url=f"{root}/v1", batch=batch(wait=False), retry=fast_retry()
        )
        try:
            with pytest.raises(BatchPending) as info:
                provider.embed_documents(["a", "b"])
            assert info.value.job_ids == ["batch_1"]
            matrix = provider.embed_documents(["a", "b"])
        finally:
            provider.close()
    assert len(api.batches) == 1  # the second call reused the pending job
    assert matrix.shape == (2, 8) and not api.calls("/v1/embeddings")


def test_concurrency_caps_jobs_in_flight() -> None:
    api = FakeGemini(key="g", polls_to_finish=2)
    with serve(api) as root:
        provider = GeminiProvider(
            api_key="g", base_url=f"{root}/v1beta", batch=batch(concurrency=1), retry=fast_retry()
        )
        provider.batch.max_job_inputs = 2
        try:
            matrix = provider.embed_documents([f"t{i}" for i in range(5)])
        finally:
            provider.close()
    assert matrix.shape == (5, 8)
    # With one job in flight, each job is created only after the previous one finished.
    kinds = ["create" if ":async" in r.path else "poll" for r in api.requests]
    assert kinds == ["create", "poll", "poll"] * 3
