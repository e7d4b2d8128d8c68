"""Exported session transcripts searched through the real qmd as `sessions-<agent>` (BM25 mode).

Skips when qmd is truly absent and fails instead under CI (see `qmd_support.require_qmd`).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

import helpers
from memoryd.config import ResolvedAgent
from memoryd.lifecycle.session_export import export_sessions
from memoryd.qmd_adapter import QmdManager
from qmd_support import collections_of, make_manager, require_qmd, write

pytestmark = [pytest.mark.qmd, pytest.mark.timeout(240)]

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
FAKE_KEY = "sk-" + "ant-" + "api03-" + "Ab3De5Fg7Hj9Kl1Mn2Pq4Rs6Tu8Vw0Xy"


@pytest.fixture(scope="module")
def qmd_bin() -> str:
    return require_qmd()


def msg(role: str, text: str) -> str:
    return json.dumps(
        {"type": "message", "message": {"role": role, "content": [{"type": "text", "text": text}]}}
    )


def agent_for(ws: Path, agent_id: str) -> ResolvedAgent:
    return helpers.agent_for(
        ws,
        agent_id=agent_id,
        memory={"backend": "qmd", "qmd": {"sessions": {"enabled": True}}},
        agents=[{"id": "alpha"}, {"id": "beta"}],
    )


def transcript(agent: ResolvedAgent, sid: str, *lines: str) -> Path:
    agent.state.sessions_dir.mkdir(parents=True, exist_ok=True)
    path = agent.state.sessions_dir / f"{sid}.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    ts = NOW.timestamp()
    os.utime(path, (ts, ts))
    return path


def manager(agent: ResolvedAgent, qmd: str) -> QmdManager:
    # the agent's default qmd home, whose sessions folder is the default export dir
    mgr = make_manager(agent, qmd, agent.state.root / "qmd")
    mgr.start()
    return mgr


def test_exported_sessions_are_searchable_per_agent_and_follow_changes(
    tmp_path: Path, qmd_bin: str
) -> None:
    ws_a = tmp_path / "ws-alpha"
    ws_b = tmp_path / "ws-beta"
    write(ws_a / "MEMORY.md", "# Memory\n\nAlpha likes tea.\n")
    write(ws_b / "MEMORY.md", "# Memory\n\nBeta likes coffee.\n")
    alpha, beta = agent_for(ws_a, "alpha"), agent_for(ws_b, "beta")
    src = transcript(
        alpha,
        "a1",
        json.dumps({"type": "session", "id": "a1"}),
        msg("user", "<system-reminder>ignore</system-reminder>Where is the zeppelin hangar?"),
        msg("assistant", "[[reply_to_current]] The zeppelin hangar is behind dock nine."),
        msg("user", "store my key " + FAKE_KEY),
    )
    transcript(beta, "b1", msg("user", "The submarine periscope needs repair."))

    assert export_sessions(alpha, now=NOW).written == ["a1"]
    assert export_sessions(beta, now=NOW).written == ["b1"]
    mgr_a, mgr_b = manager(alpha, qmd_bin), manager(beta, qmd_bin)
    try:
        assert "sessions-alpha" in collections_of(mgr_a)
        assert collections_of(mgr_a)["sessions-alpha"].path == str(alpha.qmd_settings().exports_dir)
        mgr_a.update()
        mgr_b.update()

        hits = mgr_a.search("zeppelin hangar", min_score=0).results
        session_hits = [h for h in hits if h.source == "sessions"]
        assert session_hits, hits
        assert "zeppelin" in session_hits[0].snippet.lower()
        assert all("system-reminder" not in h.snippet and "reply_to" not in h.snippet for h in hits)

        assert mgr_a.search("Ab3De5Fg7Hj9Kl1Mn2Pq4Rs6Tu8Vw0Xy", min_score=0).results == []

        # isolation: neither agent sees the other's transcripts
        assert [h for h in mgr_b.search("zeppelin", min_score=0).results] == []
        assert [h for h in mgr_a.search("submarine periscope", min_score=0).results] == []
        assert [h.source for h in mgr_b.search("submarine periscope", min_score=0).results] == [
            "sessions"
        ]

        # a transcript that grows is re-exported and its new words become searchable
        with open(src, "a", encoding="utf-8") as fh:
            fh.write(msg("assistant", "Also the quokka mascot lives there.") + "\n")
        assert export_sessions(alpha, now=NOW).written == ["a1"]
        mgr_a.update()
        assert [h.source for h in mgr_a.search("quokka mascot", min_score=0).results] == [
            "sessions"
        ]

        # a deleted transcript's export goes, and so do its search hits
        src.unlink()
        assert export_sessions(alpha, now=NOW).deleted == ["a1"]
        mgr_a.update()
        assert [h for h in mgr_a.search("quokka", min_score=0).results] == []
        assert [h.source for h in mgr_a.search("Alpha likes tea", min_score=0).results] == [
            "memory"
        ]
    finally:
        mgr_a.close()
        mgr_b.close()
