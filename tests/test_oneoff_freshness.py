"""A one-off search sees every edit made just before it, while an unchanged workspace is checked
by a stat per note (the recorded walk) instead of being walked again."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import agent_for, put
from memoryd.builtin_index import MemoryIndex, _sync
from memoryd.config import ResolvedAgent
from memoryd.core.engine import SearchRequest
from memoryd.embeddings.base import ProviderSelection


def one_off(agent: ResolvedAgent) -> MemoryIndex:
    """What `memoryd search` builds in a new process: keyword-only here."""
    return MemoryIndex(
        agent.index_settings(), ProviderSelection("none", None, "test"), one_off=True
    )


def found(idx: MemoryIndex, query: str) -> list[str]:
    """The paths `memoryd search` would show: it catches the index up first, as the service asks."""
    request = SearchRequest(query, wait_s=2.0)
    return [r.path for r in idx.search(request, mode="keyword").results]


@pytest.fixture
def agent(workspace: Path) -> ResolvedAgent:
    put(workspace / "MEMORY.md", "# Memory\nThe kettle is blue.\n")
    put(workspace / "memory" / "2026-01-01.md", "# day\nWe moved the server to amsterdam.\n")
    put(workspace / "memory" / "team" / "dana.md", "# dana\nDana owns the billing service.\n")
    a = agent_for(workspace)
    idx = one_off(a)
    idx.sync()
    idx.close()
    return a


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a sync walked the memory roots."""
    calls: list[int] = []
    real = _sync.discover

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(_sync, "discover", counted)
    return calls


def _append(ws: Path) -> None:
    with (ws / "MEMORY.md").open("a") as fh:
        fh.write("The teapot is red.\n")


def _edit_keeping_size(ws: Path) -> None:
    p = ws / "memory" / "2026-01-01.md"
    text = p.read_text()
    with open(p, "r+") as fh:
        fh.write(text.replace("amsterdam", "frankfurt"))
    assert p.stat().st_size == len(text)


#: (change, query, path it must find, or None: the query must find nothing)
CHANGES: dict[str, tuple[Callable[[Path], object], str, str | None]] = {
    "edit in place, same size": (_edit_keeping_size, "frankfurt", "memory/2026-01-01.md"),
    "append": (_append, "teapot", "MEMORY.md"),
    "new note": (
        lambda ws: put(ws / "memory" / "2026-01-02.md", "# day\nA zeppelin flew over.\n"),
        "zeppelin",
        "memory/2026-01-02.md",
    ),
    "new note in a new folder": (
        lambda ws: put(ws / "memory" / "trips" / "oslo.md", "# oslo\nFjord cruise booked.\n"),
        "fjord",
        "memory/trips/oslo.md",
    ),
    "deleted note": (
        lambda ws: (ws / "memory" / "team" / "dana.md").unlink(),
        "billing",
        None,
    ),
    "renamed note": (
        lambda ws: (ws / "memory" / "team" / "dana.md").rename(ws / "memory" / "team" / "d.md"),
        "billing",
        "memory/team/d.md",
    ),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_one_off_search_sees_a_change_made_just_before_it(
    agent: ResolvedAgent, change: str
) -> None:
    make, query, expected = CHANGES[change]
    make(agent.workspace)
    idx = one_off(agent)
    try:
        assert found(idx, query) == ([expected] if expected else [])
    finally:
        idx.close()


def test_an_unchanged_workspace_is_not_walked_again(agent: ResolvedAgent, walks: list[int]) -> None:
    idx = one_off(agent)
    try:
        report = idx.sync()
        assert walks == [] and report.files_scanned == 3 and not report.wrote()
        assert found(idx, "kettle") == ["MEMORY.md"] and walks == []
        assert idx.pending_changes() == 0 and walks == []
    finally:
        idx.close()


def test_after_a_change_one_walk_records_the_new_state(
    agent: ResolvedAgent, walks: list[int]
) -> None:
    put(agent.workspace / "memory" / "2026-01-02.md", "# day\nA zeppelin flew over.\n")
    for expected_walks in (1, 1, 1):  # the first sync walks and records; later ones need not
        idx = one_off(agent)
        try:
            assert found(idx, "zeppelin") == ["memory/2026-01-02.md"]
        finally:
            idx.close()
        assert len(walks) == expected_walks


def test_a_walk_that_changes_nothing_still_records_itself(
    agent: ResolvedAgent, walks: list[int]
) -> None:
    # a new non-memory file: the listing differs, the index does not; one walk, then none
    put(agent.workspace / "memory" / "todo.txt", "not memory\n")
    for _ in range(2):
        idx = one_off(agent)
        try:
            report = idx.sync()
            assert not report.wrote() and report.files_scanned == 3
        finally:
            idx.close()
    assert len(walks) == 1


def test_purge_and_reset_forget_the_recorded_walk(agent: ResolvedAgent) -> None:
    idx = one_off(agent)
    try:
        # the purged note is still on disk: the sync after the purge indexes it afresh
        idx.purge(["memory/team/dana.md"])
        assert found(idx, "billing") == ["memory/team/dana.md"]
        idx.reset()
        idx.sync()
        assert found(idx, "kettle") == ["MEMORY.md"]
    finally:
        idx.close()


def test_a_transcript_appended_just_before_a_one_off_search_is_found(workspace: Path) -> None:
    put(workspace / "MEMORY.md", "# Memory\nNothing about boats.\n")
    search = {
        "sources": ["memory", "sessions"],
        "experimental": {"sessionMemory": True},
        "sync": {"sessions": {"deltaMessages": 1}},  # every appended message is due
    }
    agent = agent_for(workspace, search)
    agent.state.sessions_dir.mkdir(parents=True, exist_ok=True)
    transcript = agent.state.sessions_dir / "s1.jsonl"

    def message(text: str) -> str:
        content = [{"type": "text", "text": text}]
        return json.dumps({"type": "message", "role": "user", "content": content}) + "\n"

    transcript.write_text(message("We talked about the garden."))
    idx = one_off(agent)
    idx.sync()
    idx.close()
    with transcript.open("a") as fh:
        fh.write(message("The sailboat is moored at pier 39."))
    idx = one_off(agent)
    try:
        assert found(idx, "sailboat moored") == ["sessions/s1.jsonl"]
    finally:
        idx.close()
