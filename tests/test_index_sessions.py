"""Session transcripts as a built-in search source: opt-in, JSONL line mapping, deltas, isolation."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from hashing_embedder import HashingEmbedder
from memoryd.builtin_index import MemoryIndex
from memoryd.config import ResolvedAgent, resolve_agent, validate_config
from memoryd.embeddings.base import ProviderSelection
from memoryd.errors import ConfigError, PathNotAllowed


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
    a.state.sessions_dir.mkdir(parents=True, exist_ok=True)
    p = a.state.sessions_dir / name
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


# --------------------------------------------------------------------------- deltas and retention


def agent_with(
    ws: Path,
    *,
    retention_days: int | None = None,
    cache: bool = False,
    **sync: Any,
) -> ResolvedAgent:
    """Small chunks (a transcript spans many), the embedding cache off unless asked: a chunk that
    is not re-embedded kept its row and vector."""
    search: dict[str, Any] = {
        "sources": ["memory", "sessions"],
        "experimental": {"sessionMemory": True},
        "chunking": {"tokens": 64, "overlap": 8},
        "cache": {"enabled": cache},
        "sync": {"sessions": sync},
    }
    memory: dict[str, Any] = {}
    if retention_days is not None:
        memory = {"qmd": {"sessions": {"retentionDays": retention_days}}}
    cfg = validate_config(
        {"agents": {"defaults": {"workspace": str(ws), "memorySearch": search}}, "memory": memory}
    )
    return resolve_agent(cfg)


def day(n: int, start: int = 0) -> list[str]:
    """`n` alternating messages, each naming its number, so every chunk's text is distinct."""
    return [
        msg(
            "user" if i % 2 == 0 else "assistant",
            f"message {i} about the {['harbour', 'lighthouse', 'ferry'][i % 3]} schedule number {i}",
        )
        for i in range(start, start + n)
    ]


def connect(idx: MemoryIndex) -> Any:
    """A connection of the SQLite library memoryd uses: two libraries on one file in one process
    do not see each other's locks."""
    import sqlean

    return contextlib.closing(sqlean.connect(str(idx.path)))


def rows(idx: MemoryIndex, path: str) -> dict[int, tuple[str, int, int, int]]:
    """A file's chunk rows as stored: id → (hash, start line, end line, vector count)."""
    with connect(idx) as conn:
        got = conn.execute(
            "select c.id, c.hash, c.start_line, c.end_line, "
            "(select count(*) from chunk_vectors v where v.chunk_id = c.id) "
            "from chunks c where c.path = ?",
            (path,),
        ).fetchall()
    return {r[0]: tuple(r[1:]) for r in got}


def test_appended_messages_write_and_embed_only_the_new_chunks(ws: Path) -> None:
    a = agent_with(ws, deltaBytes=0, deltaMessages=0)
    p = write_transcript(a, "s1.jsonl", day(40))
    embedder = HashingEmbedder()
    idx = MemoryIndex(a.index_settings(), ProviderSelection("test", embedder, "test"))
    idx.sync()
    before = rows(idx, "sessions/s1.jsonl")
    assert len(before) >= 8 and all(v[3] == 1 for v in before.values())
    embedded = embedder.embedded_texts

    with p.open("a") as fh:
        fh.write("\n".join(day(10, start=40)) + "\n")
    report = idx.sync()

    after = rows(idx, "sessions/s1.jsonl")
    kept = set(before) & set(after)
    new = set(after) - set(before)
    # every chunk but the old last one (now longer) keeps its row, lines and vector
    assert len(kept) >= len(before) - 1
    assert all(after[i] == before[i] for i in kept)
    assert all(v[3] == 1 for v in after.values())
    assert report.chunks_written == len(new) > 0
    assert embedder.embedded_texts - embedded == len(new) == report.vectors_embedded
    assert len(new) < len(before)
    hits = idx.search("message 47 ferry", min_score=0).results
    assert any("message 47 " in r.snippet for r in hits)


def test_an_edited_transcript_is_reindexed_at_once_keeping_the_chunks_before_the_edit(
    ws: Path,
) -> None:
    a = agent_with(ws)  # the default deltas: 100 kB or 50 lines of growth
    lines = day(40)
    p = write_transcript(a, "s1.jsonl", lines)
    embedder = HashingEmbedder()
    idx = MemoryIndex(a.index_settings(), ProviderSelection("test", embedder, "test"))
    idx.sync()
    before = rows(idx, "sessions/s1.jsonl")
    lines[30] = msg("user", "message 30 about the zeppelin schedule number 30")  # a few bytes more
    p.write_text("\n".join(lines) + "\n")
    embedded = embedder.embedded_texts

    report = idx.sync()

    after = rows(idx, "sessions/s1.jsonl")
    assert report.files_changed == 1
    untouched = {i for i, v in before.items() if v[2] < 31}  # chunks ending before line 31
    assert untouched and untouched <= set(after)
    assert embedder.embedded_texts - embedded == report.chunks_written < len(before)
    assert any("zeppelin" in r.snippet for r in idx.search("zeppelin", min_score=0).results)


def test_a_shrunk_transcript_is_reindexed_at_once(ws: Path) -> None:
    a = agent_with(ws)  # the default deltas: 100 kB or 50 lines of growth
    lines = day(40)
    p = write_transcript(a, "s1.jsonl", lines)
    idx = index(a)
    idx.sync()
    p.write_text("\n".join([*lines[:10], msg("user", "the zeppelin leaves at noon")]) + "\n")
    assert idx.sync().files_changed == 1
    assert any("zeppelin" in r.snippet for r in idx.search("zeppelin", min_score=0).results)


def test_moved_chunks_keep_their_rows_and_get_their_new_lines(ws: Path) -> None:
    a = agent_with(ws, deltaBytes=0, deltaMessages=0)
    lines = day(40)
    p = write_transcript(a, "s1.jsonl", lines)
    idx = index(a)
    idx.sync()
    before = rows(idx, "sessions/s1.jsonl")
    # records that are not messages (a tool call) shift the lines of what follows, not its text
    p.write_text("\n".join([json.dumps({"type": "tool_call", "name": "x"}), *lines]) + "\n")

    report = idx.sync()

    after = rows(idx, "sessions/s1.jsonl")
    assert report.chunks_written == 0 and set(after) == set(before)
    assert all(after[i][1:3] == (b[1] + 1, b[2] + 1) for i, b in before.items())
    # a hit cites the lines the messages are on now
    hit = next(r for r in idx.search("message 21 harbour", min_score=0).results)
    assert "message 21 " in hit.snippet
    now = p.read_text().splitlines()
    assert "message 21 " in "\n".join(now[hit.start_line - 1 : hit.end_line])


def test_sessions_past_the_retention_leave_the_index_and_nothing_else_is_rebuilt(ws: Path) -> None:
    old = write_transcript(agent_with(ws), "old.jsonl", [msg("user", "the walrus migration")])
    new = write_transcript(agent_with(ws), "new.jsonl", [msg("user", "the puffin migration")])
    long_ago = time.time() - 40 * 86_400
    os.utime(old, (long_ago, long_ago))
    kept = agent_with(ws)
    idx = index(kept)
    idx.sync()
    memory_rows, new_rows = rows(idx, "MEMORY.md"), rows(idx, "sessions/new.jsonl")
    assert rows(idx, "sessions/old.jsonl")
    old_bytes = old.read_bytes()

    expiring = index(agent_with(ws, retention_days=30))
    report = expiring.sync()

    assert not report.reindexed and report.files_removed == 1
    assert report.chunks_written == report.vectors_embedded == report.vectors_from_cache == 0
    assert rows(expiring, "sessions/old.jsonl") == {}
    with connect(expiring) as conn:
        ids = [r[0] for r in conn.execute("select id from chunks")]
        fts = conn.execute("select count(*) from chunks_fts").fetchone()[0]
        vectors = conn.execute("select count(*) from chunk_vectors").fetchone()[0]
    assert fts == vectors == len(ids)  # no keyword entry or vector left behind
    assert rows(expiring, "MEMORY.md") == memory_rows
    assert rows(expiring, "sessions/new.jsonl") == new_rows
    assert not any("walrus" in r.snippet for r in expiring.search("walrus", min_score=0).results)
    # the transcript itself is never touched
    assert old.read_bytes() == old_bytes and int(old.stat().st_mtime) == int(long_ago)
    assert new.exists()

    # a session that goes idle while the process runs leaves at its next sync; one written
    # to again comes back
    os.utime(new, (long_ago, long_ago))
    expiring.sync()
    assert rows(expiring, "sessions/new.jsonl") == {}
    with old.open("a") as fh:
        fh.write(msg("assistant", "walrus numbers are up") + "\n")
    expiring.sync()
    assert any("walrus" in r.snippet for r in expiring.search("walrus", min_score=0).results)


def test_a_rebuild_leaves_out_sessions_past_the_retention(ws: Path) -> None:
    a = agent_with(ws, retention_days=7)
    old = write_transcript(a, "old.jsonl", [msg("user", "the walrus migration")])
    write_transcript(a, "new.jsonl", [msg("user", "the puffin migration")])
    long_ago = time.time() - 8 * 86_400
    os.utime(old, (long_ago, long_ago))
    idx = index(a)
    report = idx.sync(force=True)
    assert report.reindexed
    assert rows(idx, "sessions/old.jsonl") == {} and rows(idx, "sessions/new.jsonl")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (0, "greater than or equal to 1"),
        (-5, "greater than or equal to 1"),
        ("30d", "valid integer"),
        (1.5, "valid integer"),
    ],
)
def test_retention_days_is_validated_naming_the_key(value: object, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_config({"memory": {"qmd": {"sessions": {"retentionDays": value}}}})
    assert "memory.qmd.sessions.retentionDays" in str(err.value)
    assert problem in str(err.value)
