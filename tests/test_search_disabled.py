"""`memorySearch.enabled = false`: as in OpenClaw, the agent has no memory_search/memory_get and no index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import background
from memoryd.cli import main
from memoryd.config import validate_config
from memoryd.errors import SearchDisabled, ServiceUnavailable
from memoryd.orchestrator import MemoryService
from memoryd.tools import call_tool, validate_tool_input


@pytest.fixture
def disabled(workspace: Path) -> MemoryService:
    (workspace / "MEMORY.md").write_text("# Memory\nThe deploy target is fly.io.\n")
    search = {"enabled": False, "provider": "none"}
    cfg = validate_config(
        {"agents": {"defaults": {"workspace": str(workspace), "memorySearch": search}}}
    )
    return MemoryService(cfg, background=False)


def test_search_and_get_raise_search_disabled_without_opening_an_index(
    disabled: MemoryService,
) -> None:
    with disabled as svc:
        with pytest.raises(SearchDisabled, match=r"memorySearch\.enabled = false"):
            svc.search("deploy target")
        with pytest.raises(SearchDisabled):
            svc.get("MEMORY.md")
        assert not svc.agent().state.index_db.exists()
        assert svc._backends == {}
    assert issubclass(SearchDisabled, ServiceUnavailable)


def test_the_tools_answer_search_disabled_as_a_result(disabled: MemoryService) -> None:
    with disabled as svc:
        out = call_tool(
            svc, validate_tool_input("memory_search", {"query": "deploy"}), agent_id=None
        )
        assert out == {
            "results": [],
            "disabled": True,
            "error": "memory search is disabled for agent main (memorySearch.enabled = false)",
            "code": "search_disabled",
        }
        got = call_tool(
            svc, validate_tool_input("memory_get", {"path": "MEMORY.md"}), agent_id=None
        )
        assert got["code"] == "search_disabled" and got["text"] == ""
        # the other tools stay: OpenClaw's switch is about search and get only
        ctx = call_tool(svc, validate_tool_input("memory_context", {}), agent_id=None)
        assert "fly.io" in ctx["text"]


def test_start_runs_no_watcher_or_index_for_a_disabled_agent(disabled: MemoryService) -> None:
    with background() as bg:
        disabled.start(bg)
        assert disabled._backends == {}
        assert not disabled.agent().state.index_db.exists()
        disabled.close()


def test_cli_search_says_it_is_disabled(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "memoryd.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{workspace}"\n[agents.defaults.memorySearch]\nenabled = false\n'
    )
    assert main(["search", "--config", str(cfg), "--json", "deploy"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["code"] == "search_disabled"
    assert err.startswith("memoryd: error: memory search is disabled") and err.count("\n") == 1
