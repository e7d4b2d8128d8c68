"""The shared HTTP edge and the limit helpers: retry timing, Retry-After, error bodies, splitting."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from embedding_servers import FakeMistral, fast_retry, serve
from memoryd.embeddings._limits import estimate_tokens, pack, split_to_tokens
from memoryd.embeddings._remote import MistralProvider
from memoryd.embeddings.http import (
    RetryPolicy,
    backoff_seconds,
    error_message,
    merge_headers,
    parse_retry_after,
)
from memoryd.errors import EmbeddingError


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("7", 7.0),
        ("0.25", 0.25),
        ("-3", 0.0),
        (None, None),
        ("soon", None),
        ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0),
    ],
)
def test_parse_retry_after(header: str | None, expected: float | None) -> None:
    now = 1445412480.0  # 10 s before the HTTP date above
    assert parse_retry_after(header, now=now) == expected


def test_backoff_is_jittered_exponential_between_half_a_second_and_eight() -> None:
    policy = RetryPolicy()
    waits = [[backoff_seconds(attempt, policy, None) for attempt in range(1, 8)] for _ in range(50)]
    assert all(0.5 <= w <= 8.0 for row in waits for w in row)
    assert len({row[0] for row in waits}) > 1  # jittered
    assert all(row[-1] == 8.0 for row in waits)  # capped


def test_retry_after_is_obeyed_up_to_the_cap() -> None:
    policy = RetryPolicy(retry_after_cap=30)
    assert backoff_seconds(1, policy, 12.0) == 12.0
    assert backoff_seconds(1, policy, 600.0) == 30.0


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"error": {"message": "Incorrect API key", "type": "invalid_request_error"}},
            "Incorrect API key",
        ),
        (
            {
                "error": {
                    "code": 429,
                    "message": "Resource has been exhausted",
                    "status": "RESOURCE_EXHAUSTED",
                }
            },
            "Resource has been exhausted",
        ),
        ({"detail": "Provided API key is invalid."}, "Provided API key is invalid."),
        (
            {"object": "error", "message": "Too many tokens", "type": "invalid_request_error"},
            "Too many tokens",
        ),
        ({"error": "model not found"}, "model not found"),
    ],
)
def test_error_message_reads_each_providers_error_shape(body: Any, expected: str) -> None:
    assert error_message(httpx.Response(400, json=body)) == expected


def test_error_message_of_a_non_json_body() -> None:
    assert (
        error_message(httpx.Response(502, text="<html>Bad Gateway</html>"))
        == "<html>Bad Gateway</html>"
    )


def test_merge_headers_later_layers_win_case_insensitively() -> None:
    merged = merge_headers(
        {"Authorization": "Bearer a", "X-A": "1"}, None, {"authorization": "Bearer b"}
    )
    assert merged == {"authorization": "Bearer b", "X-A": "1"}


def test_rate_limit_message_on_a_400_is_retried() -> None:
    api = FakeMistral(key="k")
    api.fail_next(
        400, {"object": "error", "message": "Requests rate limit exceeded", "type": "rate_limited"}
    )
    with serve(api) as root:
        provider = MistralProvider(api_key="k", base_url=f"{root}/v1", retry=fast_retry())
        try:
            provider.embed_query("x")
        finally:
            provider.close()
    assert len(api.requests) == 2


def test_retry_after_beyond_the_cap_is_bounded() -> None:
    sleeps: list[float] = []
    api = FakeMistral(key="k")
    api.fail_next(429, headers={"Retry-After": "3600"})
    with serve(api) as root:
        provider = MistralProvider(api_key="k", base_url=f"{root}/v1", retry=fast_retry(sleeps))
        try:
            provider.embed_query("x")
        finally:
            provider.close()
    assert sleeps == [30.0]


# --------------------------------------------------------------------------- limits


def test_token_estimate_is_conservative_for_ascii_and_cjk() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a" * 300) == 100
    assert estimate_tokens("記憶を検索する") == 7


def test_split_cuts_at_a_word_boundary() -> None:
    text = "alpha beta gamma delta epsilon"
    cut = split_to_tokens(text, 5)[0]  # 15 ASCII characters
    assert text.startswith(cut) and cut.endswith(" ") and estimate_tokens(cut) <= 5
    assert split_to_tokens("short", 5) == ["short"]


@pytest.mark.parametrize("text", ["word " * 500, "記" * 900, "x" * 1000, "mixed 記憶 text " * 80])
def test_split_pieces_fit_and_rejoin_to_the_original(text: str) -> None:
    pieces = split_to_tokens(text, 64)
    assert "".join(pieces) == text
    assert all(0 < estimate_tokens(p) <= 64 for p in pieces)


def test_pack_respects_item_and_token_limits() -> None:
    texts = ["a" * 30] * 7  # 10 tokens each
    assert pack(texts, max_items=3, max_tokens=None) == [(0, 3), (3, 6), (6, 7)]
    assert pack(texts, max_items=100, max_tokens=25) == [(0, 2), (2, 4), (4, 6), (6, 7)]
    assert pack(["a" * 300], max_items=10, max_tokens=25) == [
        (0, 1)
    ]  # one oversize text still goes
    assert pack([], max_items=3, max_tokens=None) == []


def test_a_malformed_base_url_is_an_embedding_error() -> None:
    provider = MistralProvider(api_key="k", base_url="http://[::1", retry=fast_retry())
    try:
        with pytest.raises(EmbeddingError, match="mistral: request to"):
            provider.embed_query("x")
    finally:
        provider.close()
