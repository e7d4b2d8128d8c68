"""docs/lifecycle.md stays true: its config validates, its JSON examples are what the library
returns, and its Python example runs against a real workspace."""

from __future__ import annotations

import json
import re
import tomllib
from datetime import date, datetime
from pathlib import Path

import pytest

from memoryd.config import resolve_agent, validate_config
from memoryd.lifecycle.context import build_session_context
from memoryd.lifecycle.flush import check_flush

DOC = Path(__file__).resolve().parents[1] / "docs" / "lifecycle.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def test_the_config_example_is_valid_and_means_what_the_text_says(workspace: Path) -> None:
    (toml_text,) = blocks("toml")
    config = validate_config(tomllib.loads(toml_text))
    agent = resolve_agent(config, "main", workspace=workspace)
    assert agent.compaction.reserve_tokens_floor == 20_000
    assert agent.compaction.memory_flush.soft_threshold_tokens == 4_000
    assert agent.memory_search.sources == ["memory", "sessions"]
    assert agent.memory_search.experimental.session_memory is True
    assert agent.memory.qmd.sessions.retention_days == 30


def test_the_context_json_example_matches_the_library(workspace: Path) -> None:
    example = json.loads(blocks("json")[0].replace('"text": "## MEMORY.md\\n\\n…"', '"text": ""'))
    (workspace / "MEMORY.md").write_text("x" * example["rawChars"])
    got = build_session_context(
        resolve_agent(validate_config({}), "main", workspace=workspace),
        "agent:main:main",
        today=date(2026, 11, 29),
    ).to_dict()
    for key in ("mainSession", "truncated", "rawChars", "injectedChars", "files", "hint"):
        assert got[key] == example[key], key


def test_the_flush_json_example_matches_the_library(workspace: Path) -> None:
    example = json.loads(blocks("json")[1].replace("…", ""))
    got = check_flush(
        resolve_agent(validate_config({}), "main", workspace=workspace),
        "agent:main:main",
        token_estimate=181_000,
        context_window=200_000,
        compaction_count=2,
    ).to_dict()
    for key in ("run", "reason", "threshold", "tokenEstimate", "contextWindow", "compactionCount"):
        assert got[key] == example[key], key
    assert got["systemPrompt"].startswith(example["systemPrompt"].strip())
    assert got["prompt"].startswith(example["prompt"].strip())


def test_the_python_example_runs(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (code,) = blocks("python")
    code = code.replace('"~/agent-workspace"', repr(str(workspace)))
    exec(compile(code, str(DOC), "exec"), {"__name__": "lifecycle_doc"})
    today = datetime.now().date().isoformat()
    assert "Decided: deploys move to Fridays." in (workspace / "memory" / f"{today}.md").read_text()
