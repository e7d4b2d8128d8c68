"""Session transcripts as a built-in search source: opt-in, JSONL line mapping, deltas, isolation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memoryd.builtin_index import MemoryIndex
from memoryd.config import ResolvedAgent, resolve_agent, validate_config
from memoryd.embeddings import HashingEmbedder, ProviderSelection
from memoryd.errors import PathNotAllowed


def agent(ws: Path, agent_id: str = "main", *, enabled: bool = True, **sync: Any) -> ResolvedAgent:
    search: dict[str, Any] = {
        "sources": ["memory", "sessions"] if enabled else ["memory"],
        "experimental": {"sessionMemory": enabled},
    }
    if sync:
        search["sync"] = {"sessions": sync}
    cfg = validate_config(
        {
            "agents": {
                "defaults": {"workspace": str(ws), "memorySearch": search},
                "list": [{"id": "main"}, {"id": "other"}],
            }
        }
    )
    return resolve_agent(cfg, agent_id)


def msg(role: str, text: str) -> str:
    return json.dumps(
        {"type": "message", "role": role, "content": [{"type": "text", "text": text}]}
    )


def write_transcript(a: ResolvedAgent, name: str, lines: list[str]) -> Path:
    a.sessions_dir.mkdir(parents=True, exist_ok=True)
    p = a.sessions_dir / name
    p.write_text("\n".join(lines) + "\n")
    return p


def index(a: ResolvedAgent) -> MemoryIndex:
    return MemoryIndex(a.index_settings(), ProviderSelection("test", HashingEmbedder(), "test"))


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / "MEMORY.md").write_text("# Memory\nNothing about boats here.\n")
    return workspace


def test_transcripts_are_searchable_with_jsonl_line_numbers(ws: Path) -> None:
    a = agent(ws)
    write_transcript(
        a,
        "s1.jsonl",
        [
            json.dumps({"type": "session", "id": "s1"}),
            msg("user", "Where did we leave the sailboat?"),
            "{not json",
            msg("assistant", "The sailboat is moored at pier 39 in Sausalito."),
            json.dumps({"type": "tool_call", "name": "x"}),
        ],
    )
    idx = index(a)
    idx.sync()
    out = idx.search("sailboat moored pier")
    hit = next(r for r in out.results if r.source == "sessions")
    assert hit.path == "sessions/s1.jsonl"
    assert (hit.start_line, hit.end_line) == (2, 4)
    assert "Assistant: The sailboat is moored at pier 39" in hit.snippet and "User:" in hit.snippet
    assert idx.status().to_dict()["sourceCounts"] == {"memory": 1, "sessions": 1}
    with pytest.raises(PathNotAllowed):
        idx.get("sessions/s1.jsonl")


def test_sessions_need_both_opt_ins(ws: Path) -> None:
    a = agent(ws, enabled=False)
    write_transcript(a, "s1.jsonl", [msg("user", "the sailboat question")])
    idx = index(a)
    idx.sync()
    assert all(r.source == "memory" for r in (idx.search("sailboat", min_score=0)).results)
    assert idx.status().to_dict()["sourceCounts"] == {"memory": 1}


def test_growth_below_the_delta_waits_and_searches_never_sync_sessions(ws: Path) -> None:
    a = agent(ws, deltaBytes=0, deltaMessages=3)
    p = write_transcript(a, "s1.jsonl", [msg("user", "first message about kayaks")])
    idx = index(a)
    idx.sync()
    with p.open("a") as fh:
        fh.write(msg("assistant", "the canoe arrives tuesday") + "\n")
    idx.sync()  # 1 new line < 3: not yet
    assert not any("canoe" in r.snippet for r in (idx.search("canoe tuesday", min_score=0)).results)
    with p.open("a") as fh:
        fh.write(
            msg("user", "and the paddles?") + "\n" + msg("assistant", "paddles come with it") + "\n"
        )
    idx.dirty = True
    # a search's pre-sync never waits for transcripts
    assert not any("canoe" in r.snippet for r in (idx.search("canoe tuesday", min_score=0)).results)
    idx.sync()  # 3 new lines: due
    assert any("canoe" in r.snippet for r in (idx.search("canoe tuesday", min_score=0)).results)


def test_deleted_transcripts_vanish(ws: Path) -> None:
    a = agent(ws)
    p = write_transcript(a, "s1.jsonl", [msg("user", "zeppelin hangar plans")])
    idx = index(a)
    idx.sync()
    assert (idx.search("zeppelin hangar")).results[0].source == "sessions"
    p.unlink()
    idx.sync()
    assert all(r.source == "memory" for r in (idx.search("zeppelin hangar", min_score=0)).results)


def test_agents_never_see_each_others_transcripts(ws: Path) -> None:
    main, other = agent(ws, "main"), agent(ws, "other")
    write_transcript(other, "o1.jsonl", [msg("user", "the secret gondola route")])
    write_transcript(main, "m1.jsonl", [msg("user", "ordinary bicycle route")])
    idx = index(main)
    idx.sync()
    results = (idx.search("gondola route", min_score=0)).results
    assert not any("gondola" in r.snippet for r in results)
    assert any(r.path == "sessions/m1.jsonl" for r in results)
