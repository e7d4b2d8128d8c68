"""Session export for qmd: sanitised Markdown, rewrite-only-on-change, retention, deletion,
export dir, and per-agent isolation."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import helpers
from memoryd.config import ResolvedAgent
from memoryd.lifecycle.session_export import export_sessions

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
FAKE_TOKEN = "ghp" + "_" + "Ab3De5Fg7Hj9Kl1Mn2Pq4Rs6Tu8Vw0Xy12"


def msg(role: str, text: str) -> str:
    return json.dumps(
        {"type": "message", "message": {"role": role, "content": [{"type": "text", "text": text}]}}
    )


def agent_for(ws: Path, agent_id: str = "main", **sessions: Any) -> ResolvedAgent:
    return helpers.agent_for(
        ws,
        agent_id=agent_id,
        memory={"backend": "qmd", "qmd": {"sessions": {"enabled": True, **sessions}}},
        agents=[{"id": "main"}, {"id": "other"}],
    )


def transcript(agent: ResolvedAgent, sid: str, *lines: str, age_days: float = 0) -> Path:
    agent.state.sessions_dir.mkdir(parents=True, exist_ok=True)
    path = agent.state.sessions_dir / f"{sid}.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    if age_days:
        ts = (NOW - timedelta(days=age_days)).timestamp()
        os.utime(path, (ts, ts))
    else:
        ts = NOW.timestamp()
        os.utime(path, (ts, ts))
    return path


def test_exports_sanitised_markdown_into_the_agent_qmd_sessions_dir(
    workspace: Path, isolated_env: Path
) -> None:
    agent = agent_for(workspace)
    transcript(
        agent,
        "s1",
        json.dumps({"type": "session", "id": "s1"}),
        msg("user", "[Telegram Bob id:7 2026-11-29 10:00 UTC] my token is " + FAKE_TOKEN),
        msg(
            "assistant", "<thinking>hmm</thinking>[[reply_to_current]] Got it,\n\n  rotating   it."
        ),
        msg("assistant", "NO_REPLY"),
        "{broken",
    )
    report = export_sessions(agent, now=NOW)
    out = agent.state.qmd_exports
    assert agent.qmd_settings().exports_dir == out
    assert report.export_dir == out
    assert report.written == ["s1"]  # the broken line is skipped
    assert (out / "s1.md").read_text() == (
        "# Session s1\n\nUser: my token is [REDACTED]\nAssistant: Got it, rotating it.\n"
    )


def test_an_unchanged_transcript_is_not_rewritten(workspace: Path) -> None:
    agent = agent_for(workspace)
    transcript(agent, "s1", msg("user", "hello"))
    export_sessions(agent, now=NOW)
    target = agent.qmd_settings().exports_dir / "s1.md"
    old = datetime(2020, 1, 1).timestamp()
    os.utime(target, (old, old))
    report = export_sessions(agent, now=NOW)
    assert report.unchanged == ["s1"] and report.written == []
    assert target.stat().st_mtime == old
    assert not report.changed


def test_a_touched_but_identical_transcript_is_not_rewritten(workspace: Path) -> None:
    agent = agent_for(workspace)
    src = transcript(agent, "s1", msg("user", "hello"))
    export_sessions(agent, now=NOW)
    target = agent.qmd_settings().exports_dir / "s1.md"
    old = datetime(2020, 1, 1).timestamp()
    os.utime(target, (old, old))
    with open(src, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "custom", "note": "no new text"}) + "\n")
    report = export_sessions(agent, now=NOW)
    assert report.unchanged == ["s1"]
    assert target.stat().st_mtime == old


def test_a_grown_transcript_is_rewritten(workspace: Path) -> None:
    agent = agent_for(workspace)
    src = transcript(agent, "s1", msg("user", "hello"))
    export_sessions(agent, now=NOW)
    with open(src, "a", encoding="utf-8") as fh:
        fh.write(msg("assistant", "hi back") + "\n")
    report = export_sessions(agent, now=NOW)
    assert report.written == ["s1"]
    assert (agent.qmd_settings().exports_dir / "s1.md").read_text().endswith("Assistant: hi back\n")


def test_exports_whose_transcript_is_gone_are_deleted(workspace: Path) -> None:
    agent = agent_for(workspace)
    src = transcript(agent, "gone", msg("user", "bye"))
    transcript(agent, "stays", msg("user", "here"))
    export_sessions(agent, now=NOW)
    src.unlink()
    report = export_sessions(agent, now=NOW)
    assert report.deleted == ["gone"]
    assert sorted(p.name for p in agent.qmd_settings().exports_dir.glob("*.md")) == ["stays.md"]


def test_files_memoryd_did_not_export_are_never_deleted(workspace: Path) -> None:
    agent = agent_for(workspace)
    out = agent.qmd_settings().exports_dir
    out.mkdir(parents=True)
    (out / "hand-written.md").write_text("mine\n")
    transcript(agent, "s1", msg("user", "x"))
    export_sessions(agent, now=NOW)
    export_sessions(agent, now=NOW)
    assert (out / "hand-written.md").read_text() == "mine\n"


def test_retention_skips_old_transcripts_and_deletes_their_exports(workspace: Path) -> None:
    agent = agent_for(workspace, retentionDays=7)
    transcript(agent, "fresh", msg("user", "new"), age_days=1)
    old = transcript(agent, "old", msg("user", "ancient"), age_days=3)
    export_sessions(agent, now=NOW)
    assert (agent.qmd_settings().exports_dir / "old.md").exists()
    ts = (NOW - timedelta(days=8)).timestamp()
    os.utime(old, (ts, ts))
    report = export_sessions(agent, now=NOW)
    assert report.skipped == {"old": "expired"}
    assert report.deleted == ["old"]
    assert not (agent.qmd_settings().exports_dir / "old.md").exists()
    assert (agent.qmd_settings().exports_dir / "fresh.md").exists()


def test_a_shorter_retention_deletes_what_a_longer_one_exported(workspace: Path) -> None:
    agent = agent_for(workspace)
    transcript(agent, "old", msg("user", "ancient"), age_days=40)
    assert export_sessions(agent, now=NOW).written == ["old"]
    report = export_sessions(agent_for(workspace, retentionDays=30), now=NOW)
    assert report.deleted == ["old"]


def test_export_dir_from_config(workspace: Path, tmp_path: Path) -> None:
    configured = tmp_path / "exports" / "{agentId}"
    agent = agent_for(workspace, exportDir=str(configured))
    transcript(agent, "s1", msg("user", "x"))
    export_sessions(agent, now=NOW)
    assert (tmp_path / "exports" / "main" / "s1.md").is_file()


def test_empty_transcripts_are_skipped_and_never_leave_half_files(workspace: Path) -> None:
    agent = agent_for(workspace)
    transcript(agent, "empty", json.dumps({"type": "session"}))
    transcript(agent, "s1", msg("user", "x"))
    report = export_sessions(agent, now=NOW)
    assert report.skipped == {"empty": "empty"}
    names = sorted(p.name for p in agent.qmd_settings().exports_dir.iterdir())
    assert names == [".memoryd-sessions-main.json", ".memoryd-sessions.lock", "s1.md"]


def test_a_lost_manifest_is_rebuilt_without_rewriting_identical_exports(workspace: Path) -> None:
    agent = agent_for(workspace)
    transcript(agent, "s1", msg("user", "x"))
    export_sessions(agent, now=NOW)
    (agent.qmd_settings().exports_dir / ".memoryd-sessions-main.json").write_text("garbage")
    report = export_sessions(agent, now=NOW)
    assert report.unchanged == ["s1"] and report.written == []


@pytest.mark.parametrize("who", ["main", "other"])
def test_an_agent_exports_only_its_own_transcripts(workspace: Path, who: str) -> None:
    main, other = agent_for(workspace, "main"), agent_for(workspace, "other")
    transcript(main, "m1", msg("user", "main agent's zeppelin"))
    transcript(other, "o1", msg("user", "other agent's submarine"))
    agent = main if who == "main" else other
    export_sessions(agent, now=NOW)
    out = agent.qmd_settings().exports_dir
    text = "".join(p.read_text() for p in out.glob("*.md"))
    assert ("zeppelin" in text) is (who == "main")
    assert ("submarine" in text) is (who == "other")
    assert main.qmd_settings().exports_dir != other.qmd_settings().exports_dir


def test_two_agents_sharing_one_export_dir_keep_each_others_exports(
    workspace: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared-exports"
    main = agent_for(workspace, "main", exportDir=str(shared))
    other = agent_for(workspace, "other", exportDir=str(shared))
    transcript(main, "m1", msg("user", "main"))
    transcript(other, "o1", msg("user", "other"))
    export_sessions(main, now=NOW)
    export_sessions(other, now=NOW)
    report = export_sessions(main, now=NOW)
    assert report.deleted == []
    assert sorted(p.name for p in shared.glob("*.md")) == ["m1.md", "o1.md"]
