"""Failure policy end to end: fallback on primary failure, unavailable when explicit, keyword-only under auto."""

from __future__ import annotations

import pytest

from embedding_servers import FakeGemini, FakeOpenAI, fast_retry, serve
from memoryd.config import MemorySearchConfig, ModelsConfig
from memoryd.config_validation import validate
from memoryd.embeddings.resilient import ResilientEmbedder
from memoryd.embeddings.selection import select_from_config
from memoryd.errors import ProviderUnavailable


def selection_for(search: dict[str, object], providers: dict[str, object]) -> ResilientEmbedder:
    cfg = validate(MemorySearchConfig, search)
    models = validate(ModelsConfig, {"providers": providers})
    return ResilientEmbedder(select_from_config(cfg, models, env={}, retry=fast_retry()))


def test_primary_failure_switches_to_fallback_and_records_why() -> None:
    openai, gemini = FakeOpenAI(key="sk"), FakeGemini(key="g")
    openai.fail_next(500, times=3)  # every retry of the first call fails
    with serve(openai) as o_root, serve(gemini) as g_root:
        embedder = selection_for(
            {"provider": "openai", "fallback": "gemini"},
            {
                "openai": {"apiKey": "sk", "baseUrl": f"{o_root}/v1"},
                "gemini": {"apiKey": "g", "baseUrl": f"{g_root}/v1beta"},
            },
        )
        try:
            vec = embedder.embed_query("hello")
            docs = embedder.embed_documents(["a", "b"])
        finally:
            embedder.close()
    assert vec is not None and vec.shape == (8,) and docs is not None and docs.shape == (2, 8)
    assert (
        embedder.state == "fallback"
        and embedder.active is not None
        and embedder.active.id == "gemini"
    )
    assert embedder.generation == 1
    assert (
        "openai text-embedding-3-small failed" in embedder.reason
        and "switched to fallback gemini" in embedder.reason
    )
    assert len(openai.requests) == 3 and len(gemini.requests) == 2
    assert embedder.status()["events"] == [embedder.reason]


def test_explicit_provider_failure_makes_memory_unavailable() -> None:
    openai = FakeOpenAI(key="sk")
    with serve(openai) as root:
        embedder = selection_for(
            {"provider": "openai"}, {"openai": {"apiKey": "revoked", "baseUrl": f"{root}/v1"}}
        )
        try:
            with pytest.raises(
                ProviderUnavailable, match=r"memory search unavailable: openai .* Incorrect API key"
            ):
                embedder.embed_query("hello")
            with pytest.raises(ProviderUnavailable):  # stays unavailable, no silent degradation
                embedder.embed_documents(["a"])
        finally:
            embedder.close()
    assert embedder.state == "unavailable" and embedder.active is None
    assert len(openai.requests) == 1


def test_explicit_provider_whose_fallback_also_fails_is_unavailable() -> None:
    openai, gemini = FakeOpenAI(key="sk"), FakeGemini(key="g")
    with serve(openai) as o_root, serve(gemini) as g_root:
        embedder = selection_for(
            {"provider": "openai", "fallback": "gemini"},
            {
                "openai": {"apiKey": "bad", "baseUrl": f"{o_root}/v1"},
                "gemini": {"apiKey": "bad", "baseUrl": f"{g_root}/v1beta"},
            },
        )
        try:
            with pytest.raises(ProviderUnavailable, match="gemini gemini-embedding-001 failed"):
                embedder.embed_query("x")
        finally:
            embedder.close()
    assert len(embedder.events) == 2


def test_auto_degrades_to_keyword_only_and_says_so() -> None:
    openai = FakeOpenAI(key="sk")
    openai.fail_next(503, times=3)
    with serve(openai) as root:
        embedder = selection_for({}, {"openai": {"apiKey": "sk", "baseUrl": f"{root}/v1"}})
        assert embedder.selection.reason.startswith("auto: models.providers.openai.apiKey set")
        try:
            assert embedder.embed_query("x") is None
            assert embedder.embed_documents(["y"]) is None
        finally:
            embedder.close()
    assert embedder.state == "keyword-only"
    assert "keyword-only search until reset" in embedder.reason
    assert len(openai.requests) == 3  # the second call did not hammer the failing provider


def test_reset_tries_the_primary_again() -> None:
    openai = FakeOpenAI(key="sk")
    openai.fail_next(503, times=3)
    with serve(openai) as root:
        embedder = selection_for({}, {"openai": {"apiKey": "sk", "baseUrl": f"{root}/v1"}})
        try:
            assert embedder.embed_query("x") is None
            embedder.reset()
            assert embedder.embed_query("x") is not None
        finally:
            embedder.close()
    assert embedder.state == "primary" and embedder.generation == 2


def test_provider_none_is_keyword_only_from_the_start() -> None:
    embedder = selection_for({"provider": "none"}, {})
    assert embedder.embed_query("x") is None
    assert embedder.status()["state"] == "keyword-only"
