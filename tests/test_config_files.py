"""Config files and their cache: same bytes, same models, no second validation; anything else misses."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import memoryd.config_validation
from memoryd.config import MemorydConfig, resolve_agent
from memoryd.config_files import load_config
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


def typed_tree(value: Any) -> Any:
    """Every value with its type, every field (those validation fills in too), recursively:
    `==` alone takes 60 for 60.0 and one model for another with the same fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            "m": type(value).__name__,
            "v": {f.name: typed_tree(getattr(value, f.name)) for f in dataclasses.fields(value)},
        }
    if isinstance(value, list):
        return [typed_tree(v) for v in value]
    if isinstance(value, dict):
        return {k: typed_tree(v) for k, v in value.items()}
    return (type(value).__name__, repr(value))


def write(tmp_path: Path, name: str, text: str) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    path.write_text(text.replace("{ws}", str(ws)))
    return path


def validation_forbidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("validated again")

    monkeypatch.setattr(memoryd.config_validation, "_adapter", refuse)


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
    assert typed_tree(second) == typed_tree(first)
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
def test_a_damaged_or_foreign_cache_file_is_ignored(
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
        del record["config"]["memory"]["citations"]
        cache.write_text(json.dumps(record))
    elif damage == "an unknown model":
        record["config"]["memory"]["__model__"] = "Popen"
        cache.write_text(json.dumps(record))
    else:
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(json.dumps(record))
        cache.unlink()
        cache.symlink_to(elsewhere)
    again = load_config(path)
    assert again == expected and typed_tree(again) == typed_tree(expected)
    if damage == "a symlink":
        # the state tree holds no links: never read, never written through, left for the
        # user to see (the cache is only a shortcut, so the config is validated each time)
        assert cache.is_symlink()
        assert json.loads((tmp_path / "elsewhere.json").read_text()) == record
    else:
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


IMPORTS_PYDANTIC = """
import sys
from memoryd.cli import main
code = main(sys.argv[1:])
print("pydantic" in sys.modules, file=sys.stderr)
sys.exit(code)
"""


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**__import__("os").environ, "MEMORYD_NO_SERVER": "1"}
    return subprocess.run(
        [sys.executable, "-c", IMPORTS_PYDANTIC, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_a_search_whose_config_is_cached_never_imports_pydantic(
    tmp_path: Path, isolated_env: Path
) -> None:
    """What the cache is for: a one-off search on an unchanged config does not load the
    validator at all."""
    path = write(tmp_path, "c.toml", RICH_TOML.replace('backend = "qmd"', 'backend = "builtin"'))
    (tmp_path / "ws" / "MEMORY.md").write_text("# Memory\n- The webhook secret rotates on Dec 2.\n")
    first = run_cli("search", "--json", "--config", str(path), "webhook secret")
    assert first.returncode == 0, first.stderr
    assert first.stderr.strip().splitlines()[-1] == "True"  # validated: the cache was empty
    for agent in ("main", "writer"):
        again = run_cli("search", "--json", "--config", str(path), "--agent", agent, "webhook")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["results"][0]["path"] == "MEMORY.md"
        assert again.stderr.strip().splitlines()[-1] == "False", again.stderr
    # an edit misses the cache and validates again; an invalid edit still fails
    path.write_text(path.read_text().replace("maxResults = 4", "maxResults = 0"))
    bad = run_cli("search", "--json", "--config", str(path), "webhook")
    assert bad.returncode != 0 and "maxResults" in bad.stderr


def test_no_config_file_needs_no_validator(tmp_path: Path, isolated_env: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n- The webhook secret rotates on Dec 2.\n")
    out = run_cli("search", "--json", "--workspace", str(ws), "webhook secret")
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "False"


def test_an_append_needs_no_validator(tmp_path: Path, isolated_env: Path) -> None:
    """A one-off `memoryd append` (an agent's write hook) checks its input without the
    tool-input models: no pydantic, the same message as the tool contract for empty text."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    out = run_cli("append", "--json", "--workspace", str(ws), "- Decided: ship on Friday.")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["bytesWritten"] > 0
    assert out.stderr.strip().splitlines()[-1] == "False"
    empty = run_cli("append", "--json", "--workspace", str(ws), "  ")
    assert empty.returncode == 2
    assert json.loads(empty.stdout) == {
        "disabled": True,
        "error": "text must not be empty",
        "code": "invalid_input",
    }
