"""Session-start context: which files load for which session, the fallback, and truncation."""

from __future__ import annotations

import hashlib
from datetime import date
from pathlib import Path

import pytest

from helpers import agent_for, write
from memoryd.lifecycle.context import (
    build_session_context,
    daily_note_paths,
    is_main_session,
    truncate_for_context,
)

TODAY = date(2026, 11, 29)


@pytest.fixture
def seeded(workspace: Path) -> Path:
    write(workspace / "MEMORY.md", "# Memory\n\nAlice likes green tea.\n")
    write(workspace / "memory" / "2026-11-28.md", "# 2026-11-28\n\nYesterday: fixed the cron.\n")
    write(workspace / "memory" / "2026-11-29.md", "# 2026-11-29\n\nToday: ship context.\n")
    write(workspace / "memory" / "2026-11-29-reset.md", "# Reset\n\nSession reset notes.\n")
    write(workspace / "memory" / "2026-11-27.md", "old day, not loaded\n")
    write(workspace / "memory" / "2026-11-290.md", "not a daily note\n")
    write(workspace / "memory" / "projects" / "2026-11-29.md", "nested, not loaded\n")
    write(workspace / "memory" / "notes.md", "topic file, not loaded\n")
    return workspace


@pytest.mark.parametrize(
    ("key", "main"),
    [
        (None, True),
        ("", True),
        ("main", True),
        ("agent:main:main", True),
        ("cli", True),
        # OpenClaw filters cron and sub-agent sessions to the non-private files
        ("cron:nightly", False),
        ("agent:main:cron:nightly", False),
        ("agent:main:telegram:direct:42", True),
        ("discord:dm:7", True),
        ("agent:main:discord:group:123", False),
        ("slack:channel:C01", False),
        ("agent:main:whatsapp:group:555@g.us", False),
        ("legacy:group:x", False),
        ("telegram:channel:news", False),
        ("subagent:research:1", False),
        ("agent:main:subagent:x", False),
    ],
)
def test_main_private_sessions_are_direct_or_non_chat_keys(key: str | None, main: bool) -> None:
    assert is_main_session(key) is main


def test_main_session_loads_memory_md_then_yesterday_then_today(seeded: Path) -> None:
    ctx = build_session_context(agent_for(seeded), "agent:main:main", today=TODAY)
    assert [f.path for f in ctx.files] == [
        "MEMORY.md",
        "memory/2026-11-28.md",
        "memory/2026-11-29.md",
        "memory/2026-11-29-reset.md",
    ]
    assert ctx.main_session
    assert "Alice likes green tea." in ctx.text
    assert "Session reset notes." in ctx.text
    assert "not loaded" not in ctx.text and "not a daily note" not in ctx.text
    assert ctx.text.index("## MEMORY.md") < ctx.text.index("## memory/2026-11-28.md")
    assert ctx.text.index("## memory/2026-11-28.md") < ctx.text.index("## memory/2026-11-29.md")
    assert not ctx.truncated and ctx.hint is None


@pytest.mark.parametrize("key", ["agent:main:discord:group:123", "slack:channel:C01"])
def test_group_and_channel_sessions_never_get_long_term_memory(seeded: Path, key: str) -> None:
    ctx = build_session_context(agent_for(seeded), key, today=TODAY)
    assert not ctx.main_session
    assert "MEMORY.md" not in [f.path for f in ctx.files]
    assert "Alice likes green tea." not in ctx.text
    # daily notes load for every session, as in OpenClaw
    assert [f.path for f in ctx.files] == [
        "memory/2026-11-28.md",
        "memory/2026-11-29.md",
        "memory/2026-11-29-reset.md",
    ]


def test_lowercase_memory_md_is_the_fallback_only_when_uppercase_is_absent(workspace: Path) -> None:
    write(workspace / "memory.md", "lowercase memory\n")
    ctx = build_session_context(agent_for(workspace), None, today=TODAY)
    assert [f.path for f in ctx.files] == ["memory.md"]
    write(workspace / "MEMORY.md", "uppercase memory\n")
    ctx = build_session_context(agent_for(workspace), None, today=TODAY)
    assert [f.path for f in ctx.files] == ["MEMORY.md"]
    assert "lowercase" not in ctx.text


def test_an_empty_workspace_gives_an_empty_context(workspace: Path) -> None:
    ctx = build_session_context(agent_for(workspace), None, today=TODAY)
    assert ctx.files == () and ctx.text == "" and ctx.hint is None


def test_daily_notes_for_a_day_are_date_only_first_then_slugged(workspace: Path) -> None:
    for name in ("2026-11-29-b.md", "2026-11-29.md", "2026-11-29-a.md", "2026-11-29.txt"):
        write(workspace / "memory" / name, "x\n")
    assert daily_note_paths(workspace, TODAY) == [
        "memory/2026-11-29.md",
        "memory/2026-11-29-a.md",
        "memory/2026-11-29-b.md",
    ]


def test_year_boundary_loads_december_31st_as_yesterday(workspace: Path) -> None:
    write(workspace / "memory" / "2026-12-31.md", "last day\n")
    ctx = build_session_context(agent_for(workspace), None, today=date(2027, 1, 1))
    assert [f.path for f in ctx.files] == ["memory/2026-12-31.md"]


def test_an_over_budget_file_is_cut_in_the_injected_copy_only(workspace: Path) -> None:
    body = "".join(f"line {i:05d} " + "x" * 40 + "\n" for i in range(2000))
    path = write(workspace / "MEMORY.md", body)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    ctx = build_session_context(
        agent_for(workspace, defaults={"bootstrapMaxChars": 5000}), None, today=TODAY
    )
    (f,) = ctx.files
    assert f.truncated
    assert f.raw_chars == len(body)
    assert f.injected_chars <= 5000
    assert f.content.startswith("line 00000")
    assert f.content.endswith(body.rstrip()[-1000:])  # the tail is kept
    assert "[...truncated, read MEMORY.md for full content...]" in f.content
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert ctx.hint is not None and "memory/*.md" in ctx.hint and "MEMORY.md" in ctx.hint
    d = ctx.to_dict()
    assert d["truncated"] is True
    assert d["files"][0] == {
        "path": "MEMORY.md",
        "kind": "long-term",
        "rawChars": len(body),
        "injectedChars": f.injected_chars,
        "truncated": True,
    }


def test_the_total_budget_caps_all_files_together(seeded: Path) -> None:
    write(seeded / "MEMORY.md", "m" * 2000)
    ctx = build_session_context(
        agent_for(seeded, defaults={"bootstrapMaxChars": 2000, "bootstrapTotalMaxChars": 2050}),
        None,
        today=TODAY,
    )
    assert ctx.injected_chars <= 2050
    by_path = {f.path: f for f in ctx.files}
    assert by_path["MEMORY.md"].injected_chars == 2000
    # 50 chars left: yesterday's 40-char note fits; then too little is left for the rest,
    # which is reported as cut with nothing injected
    assert by_path["memory/2026-11-28.md"].truncated is False
    for later in ("memory/2026-11-29.md", "memory/2026-11-29-reset.md"):
        assert by_path[later].injected_chars == 0
        assert by_path[later].truncated
    assert "Today: ship context." not in ctx.text
    assert ctx.hint is not None and "memory/2026-11-29.md" in ctx.hint


@pytest.mark.parametrize(
    ("content", "limit", "truncated"),
    [("short", 100, False), ("a" * 100, 100, False), ("a" * 101, 100, True), ("x\n\n  ", 1, False)],
)
def test_truncation_keeps_head_and_tail_within_the_limit(
    content: str, limit: int, truncated: bool
) -> None:
    out, cut = truncate_for_context(content, "f.md", limit)
    assert cut is truncated
    assert len(out) <= max(limit, len(content.rstrip()))
    if not cut:
        assert out == content.rstrip()


def test_truncation_head_is_seventy_and_tail_twenty_percent() -> None:
    content = "H" * 5000 + "M" * 5000 + "T" * 5000
    out, cut = truncate_for_context(content, "MEMORY.md", 5000)
    assert cut
    assert out.startswith("H" * 3500) and not out.startswith("H" * 3501)
    assert out.endswith("T" * 1000) and not out.endswith("T" * 1001)
    assert "kept 3500+1000 chars of 15000" in out
    assert out.count("truncated") == 1  # one marker, not two
    assert len(out) <= 5000


@pytest.mark.parametrize("limit", [1, 10, 64, 150, 300, 1000])
def test_small_budgets_still_fit_with_head_and_tail_when_possible(limit: int) -> None:
    content = "H" * 5000 + "T" * 5000
    out, cut = truncate_for_context(content, "memory/2026-11-29.md", limit)
    assert cut and len(out) <= limit
    assert out.startswith("H")
    if limit >= 300:
        assert out.endswith("T") and "[...truncated" in out


def test_a_symlinked_memory_md_pointing_outside_is_not_loaded(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    secret = write(tmp_path / "secret.md", "outside the workspace\n")
    (ws / "MEMORY.md").symlink_to(secret)
    ctx = build_session_context(agent_for(ws), None, today=TODAY)
    assert "outside the workspace" not in ctx.text
