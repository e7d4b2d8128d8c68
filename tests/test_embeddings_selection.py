"""Provider selection: auto order, key sources, header merge, fallback, explicit failure, fingerprints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memoryd.config import (
    MemorySearchConfig,
    ModelsConfig,
    resolve_agent,
    validate,
    validate_config,
)
from memoryd.embeddings._remote import RemoteProvider
from memoryd.embeddings.base import ProviderSelection
from memoryd.embeddings.gemini import GeminiProvider
from memoryd.embeddings.local import LocalE5Provider
from memoryd.embeddings.openai import OpenAIProvider
from memoryd.embeddings.selection import resolve_api_key, select_provider
from memoryd.errors import ProviderUnavailable


def chosen_id(selection: ProviderSelection) -> str:
    return selection.provider.id if selection.provider else "none"


def cfg(**search: Any) -> MemorySearchConfig:
    return validate(MemorySearchConfig, search)


def models(**providers: dict[str, Any]) -> ModelsConfig:
    return validate(ModelsConfig, {"providers": providers})


def remote(provider: object) -> RemoteProvider:
    assert isinstance(provider, RemoteProvider)
    return provider


@pytest.mark.parametrize(
    ("env", "chosen", "model"),
    [
        ({}, "local", "multilingual-e5-small-q4"),
        ({"MISTRAL_API_KEY": "m"}, "mistral", "mistral-embed"),
        ({"VOYAGE_API_KEY": "v", "MISTRAL_API_KEY": "m"}, "voyage", "voyage-4-large"),
        ({"GEMINI_API_KEY": "g", "VOYAGE_API_KEY": "v"}, "gemini", "gemini-embedding-001"),
        (
            {"OPENAI_API_KEY": "o", "GEMINI_API_KEY": "g", "MISTRAL_API_KEY": "m"},
            "openai",
            "text-embedding-3-small",
        ),
        (
            {"OLLAMA_API_KEY": "ollama-local"},
            "local",
            "multilingual-e5-small-q4",
        ),  # never auto-selected
        ({"OPENAI_API_KEY": "  "}, "local", "multilingual-e5-small-q4"),  # blank is not a key
    ],
)
def test_auto_picks_by_available_key_in_order(env: dict[str, str], chosen: str, model: str) -> None:
    selection = select_provider(cfg(), models(), env=env)
    assert selection.requested == "auto" and not selection.explicit
    assert chosen_id(selection) == chosen
    assert selection.provider is not None and selection.provider.model == model
    assert selection.fallback is None


def test_auto_reason_says_which_key_chose_the_provider() -> None:
    selection = select_provider(cfg(), models(), env={"OPENAI_API_KEY": "sk"})
    assert selection.reason == "auto: OPENAI_API_KEY set → openai text-embedding-3-small"
    assert "openai: API key from OPENAI_API_KEY" in selection.notes


def test_auto_without_keys_uses_the_offline_local_default() -> None:
    selection = select_provider(cfg(), models(), env={})
    assert isinstance(selection.provider, LocalE5Provider)
    assert "no remote API key" in selection.reason


def test_auto_prefers_an_existing_local_model_path(tmp_path: Path) -> None:
    model_file = tmp_path / "model.bin"
    model_file.write_bytes(b"weights")
    selection = select_provider(
        cfg(local={"modelPath": str(model_file)}), models(), env={"OPENAI_API_KEY": "sk"}
    )
    assert chosen_id(selection) == "local" and "modelPath" in selection.reason


def test_auto_skips_a_missing_local_model_path(tmp_path: Path) -> None:
    selection = select_provider(
        cfg(local={"modelPath": str(tmp_path / "gone.bin")}), models(), env={"GEMINI_API_KEY": "g"}
    )
    assert chosen_id(selection) == "gemini"
    assert any("does not exist" in n for n in selection.notes)


def test_config_keys_count_for_auto() -> None:
    selection = select_provider(cfg(), models(voyage={"apiKey": "from-config"}), env={})
    assert chosen_id(selection) == "voyage"
    assert selection.reason.startswith("auto: models.providers.voyage.apiKey set")


def test_auto_with_remote_base_url_means_an_openai_compatible_endpoint() -> None:
    selection = select_provider(
        cfg(remote={"baseUrl": "http://127.0.0.1:1234/v1"}), models(), env={"GEMINI_API_KEY": "g"}
    )
    provider = remote(selection.provider)
    assert provider.id == "openai" and provider.base_url == "http://127.0.0.1:1234/v1"
    assert "at http://127.0.0.1:1234/v1" in selection.reason


@pytest.mark.parametrize(
    ("remote_key", "config_key", "env_key", "expected", "source"),
    [
        ("r", "c", "e", "r", "memorySearch.remote.apiKey"),
        (None, "c", "e", "c", "models.providers.openai.apiKey"),
        (None, None, "e", "e", "OPENAI_API_KEY"),
        (None, None, None, None, None),
    ],
)
def test_key_precedence(
    remote_key: str | None,
    config_key: str | None,
    env_key: str | None,
    expected: str | None,
    source: str | None,
) -> None:
    search = cfg(remote={"apiKey": remote_key})
    key = resolve_api_key(
        "openai",
        remote=search.remote,
        models=models(openai={"apiKey": config_key}),
        env={"OPENAI_API_KEY": env_key} if env_key else {},
    )
    assert key == (expected, source)


def test_remote_headers_merge_over_defaults_and_provider_config() -> None:
    selection = select_provider(
        cfg(
            provider="openai",
            remote={
                "apiKey": "sk-remote",
                "headers": {"X-Team": "memory", "OpenAI-Organization": "org-remote"},
            },
        ),
        models(openai={"headers": {"openai-organization": "org-config", "X-Region": "eu"}}),
        env={},
    )
    headers = {k.lower(): v for k, v in remote(selection.provider).client.headers.items()}
    assert headers == {
        "authorization": "Bearer sk-remote",
        "openai-organization": "org-remote",  # remote wins, case-insensitively
        "x-region": "eu",
        "x-team": "memory",
    }


def test_remote_headers_can_override_the_auth_header() -> None:
    selection = select_provider(
        cfg(
            provider="openai",
            remote={
                "baseUrl": "https://proxy.example/v1",
                "headers": {"Authorization": "Basic abc"},
            },
        ),
        models(),
        env={"OPENAI_API_KEY": "sk"},
    )
    assert remote(selection.provider).client.headers["Authorization"] == "Basic abc"


def test_explicit_provider_uses_configured_model_and_options() -> None:
    selection = select_provider(
        cfg(
            provider="gemini",
            model="gemini-embedding-2-preview",
            remote={"outputDimensionality": 1536, "inputType": {"query": "QUESTION_ANSWERING"}},
        ),
        models(gemini={"apiKey": "g"}),
        env={},
    )
    provider = selection.provider
    assert isinstance(provider, GeminiProvider) and selection.explicit
    assert provider.model == "gemini-embedding-2-preview" and provider.dims == 1536
    assert (
        provider.kind_type("query") == "QUESTION_ANSWERING"
        and provider.kind_type("document") == "RETRIEVAL_DOCUMENT"
    )
    assert selection.reason == "configured → gemini gemini-embedding-2-preview"


def test_explicit_provider_without_key_is_unavailable_with_a_clear_error() -> None:
    with pytest.raises(
        ProviderUnavailable,
        match=r"voyage unavailable: voyage: no API key \(set .*VOYAGE_API_KEY\)",
    ):
        select_provider(cfg(provider="voyage"), models(), env={"OPENAI_API_KEY": "sk"})


def test_explicit_provider_without_key_uses_the_fallback_and_says_why() -> None:
    selection = select_provider(
        cfg(provider="voyage", fallback="openai"), models(), env={"OPENAI_API_KEY": "sk"}
    )
    assert chosen_id(selection) == "openai" and selection.fallback is None and selection.explicit
    assert (
        "voyage unavailable" in selection.reason
        and "using fallback openai text-embedding-3-small" in selection.reason
    )


def test_fallback_is_built_alongside_a_working_primary() -> None:
    selection = select_provider(
        cfg(provider="openai", fallback="gemini"),
        models(),
        env={"OPENAI_API_KEY": "o", "GEMINI_API_KEY": "g"},
    )
    assert chosen_id(selection) == "openai"
    assert isinstance(selection.fallback, GeminiProvider)
    assert any("fallback ready: gemini" in n for n in selection.notes)


def test_fallback_gets_its_own_key_and_default_model_not_the_primarys_remote() -> None:
    selection = select_provider(
        cfg(
            provider="openai",
            model="text-embedding-3-large",
            fallback="gemini",
            remote={"apiKey": "sk-remote", "headers": {"X-A": "1"}},
        ),
        models(),
        env={"GEMINI_API_KEY": "g"},
    )
    fallback = remote(selection.fallback)
    assert fallback.model == "gemini-embedding-001"
    assert fallback.client.headers == {"x-goog-api-key": "g"}


def test_fallback_without_key_is_noted_not_fatal() -> None:
    selection = select_provider(
        cfg(provider="openai", fallback="mistral"), models(), env={"OPENAI_API_KEY": "o"}
    )
    assert selection.fallback is None
    assert any(n.startswith("fallback mistral unavailable") for n in selection.notes)


def test_local_and_ollama_fallbacks_need_no_key() -> None:
    local = select_provider(
        cfg(provider="openai", fallback="local"), models(), env={"OPENAI_API_KEY": "o"}
    )
    assert isinstance(local.fallback, LocalE5Provider)
    ollama = select_provider(
        cfg(provider="gemini", fallback="ollama"), models(), env={"GEMINI_API_KEY": "g"}
    )
    assert ollama.fallback is not None and ollama.fallback.id == "ollama"


def test_provider_none_is_keyword_only_by_configuration() -> None:
    selection = select_provider(cfg(provider="none"), models(), env={"OPENAI_API_KEY": "o"})
    assert selection.provider is None and chosen_id(selection) == "none" and selection.explicit


def test_ollama_is_selected_only_explicitly_and_needs_no_key() -> None:
    selection = select_provider(cfg(provider="ollama"), models(), env={})
    provider = remote(selection.provider)
    assert provider.id == "ollama" and provider.model == "nomic-embed-text"
    assert "authorization" not in {k.lower() for k in provider.client.headers}


def test_openai_compatible_endpoint_without_key_is_allowed() -> None:
    selection = select_provider(
        cfg(provider="openai", model="bge-m3", remote={"baseUrl": "http://localhost:8000/v1"}),
        models(),
        env={},
    )
    provider = remote(selection.provider)
    assert provider.dims is None  # unknown until the server answers
    assert any("without one" in n for n in selection.notes)


def test_batch_settings_reach_batch_capable_providers_only() -> None:
    on = {"batch": {"enabled": True}, "apiKey": "k"}
    openai = select_provider(cfg(provider="openai", remote=on), models(), env={})
    assert remote(openai.provider).batch is not None and any(
        "batch mode on" in n for n in openai.notes
    )
    voyage = select_provider(cfg(provider="voyage", remote=on), models(), env={})
    assert remote(voyage.provider).batch is None and any("batch ignored" in n for n in voyage.notes)


def test_select_provider_reads_the_resolved_agent(workspace: Path) -> None:
    config = validate_config(
        {
            "agents": {
                "defaults": {"workspace": str(workspace), "memorySearch": {"provider": "mistral"}}
            },
            "models": {"providers": {"mistral": {"apiKey": "m"}}},
        }
    )
    agent = resolve_agent(config)
    selection = select_provider(agent.memory_search, agent.models, env={})
    assert chosen_id(selection) == "mistral" and selection.explicit


# --------------------------------------------------------------------------- fingerprints


def _fp(**kwargs: Any) -> str:
    base: dict[str, Any] = {"api_key": "sk-one"}
    base.update(kwargs)
    return OpenAIProvider(**base).fingerprint()


def test_fingerprint_ignores_the_api_key_and_auth_headers() -> None:
    assert _fp() == _fp(api_key="sk-two")
    assert _fp(headers={"X-Team": "a"}) == _fp(
        headers={"X-Team": "a", "Authorization": "Bearer other"}
    )


@pytest.mark.parametrize(
    "change",
    [
        {"base_url": "https://proxy.example/v1"},
        {"output_dimensionality": 512},
        {"model": "text-embedding-3-large"},
        {"headers": {"X-Team": "b"}},
        {"input_type": {"query": "query", "document": "passage"}},
    ],
)
def test_fingerprint_changes_with_what_changes_vectors(change: dict[str, Any]) -> None:
    assert _fp(**change) != _fp()


def test_fingerprint_distinguishes_providers_and_task_types() -> None:
    gemini = GeminiProvider(api_key="g").fingerprint()
    assert gemini != _fp()
    assert GeminiProvider(api_key="other").fingerprint() == gemini
    assert (
        GeminiProvider(api_key="g", input_type={"query": "QUESTION_ANSWERING"}).fingerprint()
        != gemini
    )
    assert GeminiProvider(api_key="g", output_dimensionality=768).fingerprint() != gemini


def test_merged_headers_reach_the_wire() -> None:
    from embedding_servers import FakeOpenAI, fast_retry, serve

    api = FakeOpenAI(key="sk-config")
    with serve(api) as root:
        selection = select_provider(
            cfg(provider="openai", remote={"headers": {"X-Team": "memory", "x-region": "us"}}),
            models(
                openai={
                    "apiKey": "sk-config",
                    "baseUrl": f"{root}/v1",
                    "headers": {"X-Region": "eu", "X-Org": "acme"},
                }
            ),
            env={"OPENAI_API_KEY": "sk-env"},
            retry=fast_retry(),
        )
        provider = remote(selection.provider)
        try:
            provider.embed_query("x")
        finally:
            provider.close()
    sent = api.requests[0].headers
    assert sent["authorization"] == "Bearer sk-config"  # config key beats the env var
    assert (sent["x-team"], sent["x-region"], sent["x-org"]) == ("memory", "us", "acme")
    assert sent["user-agent"].startswith("memoryd/")
