"""Config: OpenClaw-shaped keys, loud errors with key paths, agent resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.config import (
    AgentEntry,
    AgentsConfig,
    ChunkingConfig,
    MemorydConfig,
    MemorySearchConfig,
    QueryConfig,
    parse_duration_ms,
    resolve_agent,
    validate_config,
)
from memoryd.config_files import load_config
from memoryd.errors import ConfigError, WorkspaceNotFound


def test_defaults_match_the_seed() -> None:
    ms = validate_config({}).agents.defaults.memory_search
    assert ms.chunking.tokens == 400 and ms.chunking.overlap == 80
    assert ms.query.max_results == 6 and ms.query.min_score == 0.35
    assert ms.query.hybrid.vector_weight == 0.7 and ms.query.hybrid.text_weight == 0.3
    assert ms.query.hybrid.candidate_multiplier == 4
    assert not ms.query.hybrid.mmr.enabled and ms.query.hybrid.mmr.lambda_ == 0.7
    assert not ms.query.hybrid.temporal_decay.enabled
    assert ms.query.hybrid.temporal_decay.half_life_days == 30
    assert ms.sync.watch_debounce_ms == 1500


def test_camel_and_snake_case_both_accepted() -> None:
    camel = validate_config(
        {"agents": {"defaults": {"memorySearch": {"query": {"maxResults": 3}}}}}
    )
    snake = validate_config(
        {"agents": {"defaults": {"memory_search": {"query": {"max_results": 3}}}}}
    )
    assert camel.agents.defaults.memory_search.query.max_results == 3
    assert snake.agents.defaults.memory_search.query.max_results == 3


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"memory": {"backnd": "qmd"}}, "memory.backnd: unknown key"),
        ({"memory": {"backend": "elastic"}}, "memory.backend"),
        (
            {"agents": {"defaults": {"memorySearch": {"query": {"maxResult": 3}}}}},
            "agents.defaults.memorySearch.query.maxResult",
        ),
        (
            {
                "agents": {
                    "defaults": {"memorySearch": {"chunking": {"tokens": 100, "overlap": 100}}}
                }
            },
            "overlap",
        ),
        (
            {"agents": {"list": [{"id": "a", "memorySearch": {"provder": "x"}}]}},
            "agents.list.0.memorySearch",
        ),
        ({"memory": {"qmd": {"update": {"interval": "soon"}}}}, "memory.qmd.update.interval"),
    ],
)
def test_bad_config_names_the_key_path(data: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_config(data)
    assert path in str(err.value)


def test_agent_override_merges_over_defaults(tmp_path: Path) -> None:
    cfg = validate_config(
        {
            "agents": {
                "defaults": {
                    "workspace": str(tmp_path),
                    "memorySearch": {"query": {"maxResults": 9, "minScore": 0.1}},
                },
                "list": [{"id": "ops", "memorySearch": {"query": {"maxResults": 2}}}],
            }
        }
    )
    ops = resolve_agent(cfg, "ops")
    assert ops.memory_search.query.max_results == 2
    assert ops.memory_search.query.min_score == 0.1
    assert ops.index_path == ops.state.root / "index.sqlite"
    assert ops.state.root.parent.parent.name == "ops"
    with pytest.raises(ConfigError, match="unknown agent"):
        resolve_agent(cfg, "nobody")


def test_an_override_in_either_key_form_replaces_the_default_in_the_other(tmp_path: Path) -> None:
    """Keys are merged in their written form: a snake_case override of a camelCase default
    replaces it (it used to sit beside it and lose)."""
    cfg = validate_config(
        {
            "agents": {
                "defaults": {
                    "workspace": str(tmp_path),
                    "memory_search": {"query": {"max_results": 9, "minScore": 0.1}},
                },
                "list": [
                    {"id": "snake", "memorySearch": {"query": {"max_results": 2}}},
                    {"id": "camel", "memory_search": {"query": {"maxResults": 3}}},
                    {"id": "plain"},
                ],
            }
        }
    )
    assert resolve_agent(cfg, "snake").memory_search.query.max_results == 2
    assert resolve_agent(cfg, "camel").memory_search.query.max_results == 3
    assert resolve_agent(cfg, "plain").memory_search.query.max_results == 9
    assert {resolve_agent(cfg, a).memory_search.query.min_score for a in ("snake", "camel")} == {
        0.1
    }


def test_an_override_valid_alone_but_not_merged_fails_at_load_naming_the_agent(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_config(
            {
                "agents": {
                    "defaults": {"memorySearch": {"chunking": {"tokens": 100, "overlap": 20}}},
                    "list": [
                        {"id": "a"},
                        {"id": "b", "memorySearch": {"chunking": {"overlap": 100}}},
                    ],
                }
            }
        )
    assert str(caught.value) == (
        "invalid config: agents.list.1.memorySearch.chunking: "
        "chunking.overlap must be smaller than chunking.tokens"
    )
    path = tmp_path / "c.toml"
    path.write_text(
        '[[agents.list]]\nid = "ops"\nmemorySearch = { chunking = { overlap = 500 } }\n'
    )
    with pytest.raises(
        ConfigError, match=rf"^invalid {path}: agents\.list\.0\.memorySearch\.chunking: "
    ):
        load_config(path)


def test_a_config_built_in_code_resolves_like_a_validated_one(tmp_path: Path) -> None:
    ops = MemorySearchConfig(query=QueryConfig(max_results=2))
    cfg = MemorydConfig(agents=AgentsConfig(list_=[AgentEntry(id="ops", memory_search=ops)]))
    agent = resolve_agent(cfg, "ops", workspace=tmp_path)
    validated = validate_config(
        {"agents": {"list": [{"id": "ops", "memorySearch": {"query": {"maxResults": 2}}}]}}
    )
    assert agent == resolve_agent(validated, "ops", workspace=tmp_path)
    assert agent.memory_search.query.min_score == 0.35  # the default's, untouched
    with pytest.raises(ValueError, match="overlap must be smaller"):
        ChunkingConfig(tokens=100, overlap=100)  # the checks across fields hold in code too


def test_store_path_supports_agent_id(tmp_path: Path) -> None:
    cfg = validate_config(
        {
            "agents": {
                "defaults": {
                    "workspace": str(tmp_path),
                    "memorySearch": {"store": {"path": str(tmp_path / "{agentId}.db")}},
                }
            }
        }
    )
    assert resolve_agent(cfg, "main").index_path == tmp_path / "main.db"


def test_toml_and_openclaw_json5(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(
        '[memory]\nbackend = "qmd"\n[agents.defaults.memorySearch.query]\nmaxResults = 4\n'
    )
    assert load_config(toml).memory.backend == "qmd"
    j5 = tmp_path / "openclaw.json5"
    j5.write_text(
        "{ gateway: {port: 1}, // unrelated OpenClaw keys are ignored\n"
        " agents: {defaults: {model: 'x', memorySearch: {provider: 'none'}}},\n"
        " memory: {citations: 'off'} }"
    )
    cfg = load_config(j5)
    assert cfg.memory.citations == "off"
    assert cfg.agents.defaults.memory_search.provider == "none"


def test_config_discovery_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "x.toml"
    f.write_text('[memory]\ncitations = "on"\n')
    monkeypatch.setenv("MEMORYD_CONFIG", str(f))
    assert load_config().memory.citations == "on"
    monkeypatch.setenv("MEMORYD_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="not found"):
        load_config()


def test_unparsable_toml_is_a_config_error(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("[memory\n")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_config(f)


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_bytes(b"\xff\xfe[memory]\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(f)


def test_workspace_from_cwd_or_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceNotFound, match="--workspace"):
        resolve_agent(validate_config({}), cwd=tmp_path)
    (tmp_path / "MEMORY.md").write_text("x")
    assert resolve_agent(validate_config({}), cwd=tmp_path).workspace == tmp_path.resolve()


def test_workspace_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_WORKSPACE", str(tmp_path))
    assert resolve_agent(validate_config({})).workspace == tmp_path.resolve()
    with pytest.raises(WorkspaceNotFound):
        resolve_agent(validate_config({}), workspace=tmp_path / "nope")


@pytest.mark.parametrize(
    ("raw", "ms"),
    [("5m", 300_000), ("30s", 30_000), ("1h", 3_600_000), ("250ms", 250), (1500, 1500)],
)
def test_durations(raw: str | int, ms: int) -> None:
    assert parse_duration_ms(raw) == ms


def test_model_cache_dir_is_refused_with_the_reason() -> None:
    # OpenClaw's local.modelCacheDir has no meaning here: the local model ships in its package
    with pytest.raises(ConfigError, match=r"modelCacheDir.*not supported"):
        validate_config(
            {"agents": {"defaults": {"memorySearch": {"local": {"modelCacheDir": "/m"}}}}}
        )


def test_openclaw_2026_8_memory_search_is_read_as_memory_search(tmp_path: Path) -> None:
    # OpenClaw 2026.8+ moved memory settings to memory.search.* and dropped memory.qmd.*
    cfg_file = tmp_path / "openclaw.json"
    cfg_file.write_text(
        """{
          // an OpenClaw config as users have it: unrelated keys are ignored
          gateway: {port: 18789},
          memory: {
            citations: "on",
            search: {
              provider: "none",
              fallback: "none",
              extraPaths: ["notes", {path: "~/handbook", pattern: "policies/*.md"}],
              query: {maxResults: 4, minScore: 0.2},
              store: {path: "/tmp/x/{agentId}.sqlite"},
              sources: ["memory", "sessions"],
              experimental: {sessionMemory: true},
            },
          },
          agents: {defaults: {workspace: "/tmp"}},
        }"""
    )
    cfg = load_config(cfg_file)
    ms = cfg.agents.defaults.memory_search
    assert ms.provider == "none" and ms.query.max_results == 4 and ms.query.min_score == 0.2
    assert ms.extra_paths[0] == "notes" and ms.extra_paths[1].pattern == "policies/*.md"  # type: ignore[union-attr]
    assert ms.store.path == "/tmp/x/{agentId}.sqlite" and ms.experimental.session_memory
    assert cfg.memory.citations == "on"


def test_memory_search_wins_over_agents_defaults_memory_search() -> None:
    cfg = validate_config(
        {
            "memory": {"search": {"query": {"maxResults": 9}}},
            "agents": {"defaults": {"memorySearch": {"query": {"maxResults": 2, "minScore": 0.5}}}},
        }
    )
    q = cfg.agents.defaults.memory_search.query
    assert (q.max_results, q.min_score) == (9, 0.5)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"memory": {"search": {"query": {"maxResult": 3}}}},
            "memory.search.query.maxResult: unknown key (did you mean 'maxResults'?)",
        ),
        (
            {"agents": {"defaults": {"memorySearch": {"providr": "none"}}}},
            "agents.defaults.memorySearch.providr: unknown key (did you mean 'provider'?)",
        ),
        ({"memroy": {}}, "memroy: unknown key (did you mean 'memory'?)"),
        ({"memory": {"search": {"wholly": 1}}}, "memory.search.wholly: unknown key"),
    ],
)
def test_unknown_keys_name_their_path_and_the_closest_known_key(
    data: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        validate_config(data)
    assert message in str(err.value)


def test_every_model_built_in_code_equals_the_validated_one() -> None:
    """A model built in code (its dataclass `__init__`) is what pydantic's validation of the same
    input gives: defaults, factories (a fresh list per instance), `__post_init__`."""
    from memoryd.config_validation import MODELS, validate

    required = {"DailyNoteChunkingConfig": {"tokens": 160, "overlap": 16}}
    required |= {"ExtraPathEntry": {"path": "notes"}, "QmdPathConfig": {"path": "/srv"}}
    required |= {"ScopeRule": {"action": "allow"}, "AgentEntry": {"id": "ops"}}
    for name, cls in MODELS.items():
        kwargs = required.get(name, {})
        built, validated = cls(**kwargs), validate(cls, kwargs)
        assert built == validated and repr(built) == repr(validated), name
    a, b = MemorydConfig(), MemorydConfig()
    a.agents.defaults.memory_search.sources.append("sessions")
    assert b.agents.defaults.memory_search.sources == ["memory"]


def test_config_classes_behave_as_dataclasses_with_shared_methods(tmp_path: Path) -> None:
    """The shared `__init__`, `__eq__` and `__repr__` keep what generated keyword-only ones did:
    TypeError for a positional, missing or unknown argument, value equality (unhashable, as a
    mutable dataclass), fields left out of repr, `__post_init__`."""
    import dataclasses

    from memoryd.config import RerankRemoteConfig

    assert ChunkingConfig(tokens=300, overlap=20) != ChunkingConfig()
    assert ChunkingConfig() != QueryConfig() and ChunkingConfig() != (400, 80, None)
    assert repr(ChunkingConfig()) == "ChunkingConfig(tokens=400, overlap=80, daily_notes=None)"
    for bad in (
        lambda: AgentEntry(),
        lambda: ChunkingConfig(300),  # type: ignore[misc]
        lambda: ChunkingConfig(tokenz=3),
    ):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(ValueError, match="smaller"):
        ChunkingConfig(tokens=100, overlap=100)
    with pytest.raises(TypeError, match="unhashable"):
        hash(ChunkingConfig())
    secret = RerankRemoteConfig(api_key="sk-1", headers={"X-Key": "k"})
    assert "sk-1" not in repr(secret) and "X-Key" not in repr(secret)
    assert dataclasses.replace(ChunkingConfig(), tokens=500) == ChunkingConfig(tokens=500)
    agent = resolve_agent(MemorydConfig(), workspace=tmp_path)
    assert agent == dataclasses.replace(agent) and "bootstrap_max_chars=20000" in repr(agent)
