"""The validated-config cache: same bytes, same models, no second validation; anything else misses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import memoryd.config as config_module
from memoryd.config import MemorydConfig, load_config, resolve_agent
from memoryd.errors import ConfigError

RICH_TOML = """
[memory]
backend = "qmd"
citations = "on"

[memory.qmd]
command = "/opt/qmd/bin/qmd"
searchMode = "vsearch"
paths = [{ path = "~/notes", name = "notes", pattern = "**/*.md" }]
update = { interval = "5m", debounceMs = 1500, onBoot = false, embedInterval = "2h" }
limits = { maxResults = 5, timeoutMs = 2500 }
failover = { failureThreshold = 2, cooldownMs = 100 }

[memory.scope]
default = "deny"
rules = [
  { action = "allow", match = { chatType = "direct" } },
  { action = "allow", match = { channel = "slack", chatType = "group" } },
]

[agents.defaults]
workspace = "{ws}"
bootstrapMaxChars = 12000

[agents.defaults.memorySearch]
provider = "none"
extraPaths = ["docs", { path = "~/more", pattern = "*.md" }]
sources = ["memory", "sessions"]
experimental = { sessionMemory = true }

[agents.defaults.memorySearch.query]
maxResults = 4
minScore = 0.2
hybrid = { vectorWeight = 0.4, textWeight = 0.6, mmr = { enabled = true, lambda = 0.5 } }

[agents.defaults.memorySearch.chunking]
tokens = 300
overlap = 30

[[agents.list]]
id = "writer"
memorySearch = { query = { maxResults = 2 } }
compaction = { memoryFlush = { enabled = false } }

[[agents.list]]
id = "ops"
workspace = "{ws}"

[models.providers.openai]
baseUrl = "http://127.0.0.1:9/v1"
"""

OPENCLAW_JSON5 = """{ gateway: {port: 1},
  agents: {defaults: {model: 'x', memorySearch: {provider: 'none', query: {maxResults: 3}}},
           list: [{id: 'main', memorySearch: {chunking: {tokens: 200, overlap: 20}}}]},
  memory: {citations: 'off'} }"""


def fields_set_tree(value: Any) -> Any:
    """Every model's set fields, recursively: what `model_dump(exclude_unset=True)` relies on."""
    if isinstance(value, BaseModel):
        return {
            "set": sorted(value.model_fields_set),
            "v": {k: fields_set_tree(getattr(value, k)) for k in type(value).model_fields},
        }
    if isinstance(value, list):
        return [fields_set_tree(v) for v in value]
    if isinstance(value, dict):
        return {k: fields_set_tree(v) for k, v in value.items()}
    return repr(value)


def write(tmp_path: Path, name: str, text: str) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    path.write_text(text.replace("{ws}", str(ws)))
    return path


def validation_forbidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("validated again")

    monkeypatch.setattr(config_module, "validate_config", refuse)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("rich.toml", RICH_TOML),
        ("openclaw.json5", OPENCLAW_JSON5),
        ("empty.toml", ""),
        ("defaults.toml", '[agents.defaults]\nworkspace = "{ws}"\n'),
    ],
)
def test_a_cached_config_is_the_validated_config_and_is_not_validated_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str
) -> None:
    path = write(tmp_path, name, text)
    first = load_config(path)
    validation_forbidden(monkeypatch)
    second = load_config(path)
    assert second is not first
    assert second == first
    assert fields_set_tree(second) == fields_set_tree(first)
    assert second.model_dump(exclude_unset=True) == first.model_dump(exclude_unset=True)
    for agent in ("main", "writer", "ops") if name == "rich.toml" else ("main",):
        ws = tmp_path / "ws"
        assert resolve_agent(second, agent, workspace=ws) == resolve_agent(
            first, agent, workspace=ws
        )


def test_an_edited_config_is_validated_again_and_a_bad_edit_fails_every_time(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "c.toml", RICH_TOML)
    assert load_config(path).agents.defaults.memory_search.query.max_results == 4
    path.write_text(path.read_text().replace("maxResults = 4", "maxResults = 7"))
    assert load_config(path).agents.defaults.memory_search.query.max_results == 7
    path.write_text(path.read_text().replace("maxResults = 7", "maxResults = -1"))
    for _ in range(2):
        with pytest.raises(ConfigError, match="maxResults"):
            load_config(path)


def cache_files(state: Path) -> list[Path]:
    return sorted((state / "config-cache").glob("*.json"))


@pytest.mark.parametrize(
    "damage",
    ["not json", "other key", "a field missing", "an unknown model", "a symlink"],
)
def test_a_damaged_or_foreign_cache_file_is_ignored_and_replaced(
    tmp_path: Path, isolated_env: Path, damage: str
) -> None:
    path = write(tmp_path, "c.toml", RICH_TOML)
    expected = load_config(path)
    (cache,) = cache_files(isolated_env)
    record = json.loads(cache.read_text())
    if damage == "not json":
        cache.write_text("{")
    elif damage == "other key":
        record["key"] = "0" * 64
        cache.write_text(json.dumps(record))
    elif damage == "a field missing":
        del record["config"]["v"]["memory"]["v"]["citations"]
        cache.write_text(json.dumps(record))
    elif damage == "an unknown model":
        record["config"]["v"]["memory"]["m"] = "Popen"
        cache.write_text(json.dumps(record))
    else:
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(json.dumps(record))
        cache.unlink()
        cache.symlink_to(elsewhere)
    again = load_config(path)
    assert again == expected and fields_set_tree(again) == fields_set_tree(expected)
    assert not cache.is_symlink()  # replaced, never written through
    if damage == "a symlink":
        assert json.loads((tmp_path / "elsewhere.json").read_text()) == record
    assert json.loads(cache.read_text())["key"] != "0" * 64
    assert load_config(path) == expected


def test_the_cache_is_private_and_one_file_per_config_path(
    tmp_path: Path, isolated_env: Path
) -> None:
    path = write(tmp_path, "c.toml", RICH_TOML)
    for edit in ("maxResults = 4", "maxResults = 5", "maxResults = 6"):
        path.write_text(
            RICH_TOML.replace("{ws}", str(tmp_path / "ws")).replace("maxResults = 4", edit)
        )
        load_config(path)
    other = write(tmp_path, "d.toml", "")
    load_config(other)
    files = cache_files(isolated_env)
    assert len(files) == 2
    assert {f.stat().st_mode & 0o777 for f in files} == {0o600}
    assert (isolated_env / "config-cache").stat().st_mode & 0o777 == 0o700


def test_an_unwritable_state_folder_means_no_cache_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the state folder would be")
    monkeypatch.setenv("MEMORYD_STATE_DIR", str(blocked))
    path = write(tmp_path, "c.toml", RICH_TOML)
    assert isinstance(load_config(path), MemorydConfig)
    assert load_config(path).memory.backend == "qmd"


@pytest.mark.parametrize(
    "credential",
    [
        '[models.providers.openai]\napiKey = "sk-test-not-a-real-key"\n',
        '[agents.defaults.memorySearch.remote]\napiKey = "sk-test-not-a-real-key"\n',
        '[agents.defaults.memorySearch.remote.headers]\nAuthorization = "Bearer abc"\n',
    ],
)
def test_a_config_that_carries_credentials_is_never_copied_into_the_cache(
    tmp_path: Path, isolated_env: Path, credential: str
) -> None:
    path = write(tmp_path, "c.toml", credential)
    assert load_config(path) == load_config(path)
    assert cache_files(isolated_env) == []
