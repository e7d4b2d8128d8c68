"""Chunking by file kind: with `chunking.dailyNotes` set, daily notes (append-only logs of short
turns) get a size of their own; by default every file has one size (OpenClaw's); the index
re-chunks when that changes."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hashing_embedder import HashingEmbedder
from helpers import agent_for, selection
from memoryd.builtin_index import MemoryIndex
from memoryd.core.chunking import ChunkingPlan
from memoryd.core.layout import is_daily_note_path


@pytest.mark.parametrize(
    ("rel_path", "daily"),
    [
        ("memory/2026-11-29.md", True),
        ("memory/2026-11-20-tokyo.md", True),
        ("memory/2023-05-08-session-2.md", True),
        ("MEMORY.md", False),
        ("memory.md", False),
        ("memory/network.md", False),
        ("memory/archive/2026-11-29.md", False),  # a subfolder: curated
        ("notes/2026-11-29.md", False),  # an extra folder
        ("2026-11-29.md", False),
        ("memory/2026-13-40.md", False),  # not a date
        ("memory/2026-11-29.txt", False),
        ("memory/2026-11-29notes.md", False),
    ],
)
def test_daily_notes_are_dated_files_directly_in_memory(rel_path: str, daily: bool) -> None:
    assert is_daily_note_path(rel_path) is daily


DAILY = (160, 16)  # a 160-token chunk fits one 700-character snippet
CONVERSATIONAL = {"dailyNotes": {"tokens": DAILY[0], "overlap": DAILY[1]}}


@pytest.mark.parametrize(
    ("tokens", "overlap", "daily_notes", "daily", "curated", "fingerprint"),
    [
        (400, 80, None, (400, 80), (400, 80), None),
        (160, 16, None, (160, 16), (160, 16), None),
        (400, 80, (160, 16), (160, 16), (400, 80), "160/16"),
        (600, 60, (200, 20), (200, 20), (600, 60), "200/20"),
    ],
)
def test_daily_notes_get_their_own_size_only_when_given_one(
    tokens: int,
    overlap: int,
    daily_notes: tuple[int, int] | None,
    daily: tuple[int, int],
    curated: tuple[int, int],
    fingerprint: str | None,
) -> None:
    plan = ChunkingPlan(tokens, overlap, daily_notes)
    assert plan.for_file("memory/2026-11-29.md") == daily
    assert plan.for_file("MEMORY.md") == curated
    assert plan.for_file("memory/docs/1234.md") == curated
    assert plan.fingerprint() == fingerprint


def _turns(n: int) -> str:
    return "# 2026-11-29\n" + "".join(
        f"Alice: turn {i} about the garden, the tomatoes and the weather this week\n"
        for i in range(n)
    )


@pytest.fixture
def kinds(workspace: Path) -> Path:
    text = _turns(120)  # ~2,000 tokens: several chunks at either size
    (workspace / "memory" / "2026-11-29.md").write_text(text, encoding="utf-8")
    (workspace / "memory" / "garden.md").write_text(text, encoding="utf-8")
    (workspace / "MEMORY.md").write_text(text, encoding="utf-8")
    return workspace


def _largest_chunk(idx: MemoryIndex) -> dict[str, int]:
    with sqlite3.connect(idx.path) as conn:
        rows = conn.execute("select path, max(tokens) from chunks group by path").fetchall()
    return {str(path): int(tokens) for path, tokens in rows}


def _synced(ws: Path, search: dict[str, Any] | None = None) -> MemoryIndex:
    idx = MemoryIndex(agent_for(ws, search).index_settings(), selection(HashingEmbedder()))
    idx.sync()
    return idx


def test_by_default_every_file_has_one_size(kinds: Path) -> None:
    idx = _synced(kinds)
    try:
        largest = _largest_chunk(idx)
        signature = idx.signature()
    finally:
        idx.close()
    assert largest["memory/2026-11-29.md"] == largest["MEMORY.md"] > DAILY[0]
    assert "chunkDailyNotes" not in signature  # the signature indexes had before the option


@pytest.mark.parametrize("size", [{}, {"tokens": 300, "overlap": 30}])
def test_daily_notes_set_apart_are_chunked_smaller_than_curated_files(
    kinds: Path, size: dict[str, int]
) -> None:
    idx = _synced(kinds, {"chunking": {**size, **CONVERSATIONAL}})
    try:
        largest = _largest_chunk(idx)
    finally:
        idx.close()
    assert largest["memory/2026-11-29.md"] <= DAILY[0]
    for curated in ("MEMORY.md", "memory/garden.md"):
        assert DAILY[0] < largest[curated] <= size.get("tokens", 400)


@pytest.mark.parametrize(
    ("daily_notes", "error"),
    [
        ({"tokens": 160, "overlap": 160}, "dailyNotes.overlap must be smaller"),
        ({"tokens": 8, "overlap": 0}, "tokens"),
        ({"tokens": 160}, "overlap"),
    ],
)
def test_a_bad_daily_note_size_is_refused(daily_notes: dict[str, int], error: str) -> None:
    from memoryd.config import validate_config
    from memoryd.errors import ConfigError

    with pytest.raises(ConfigError, match=error) as caught:
        validate_config(
            {"agents": {"defaults": {"memorySearch": {"chunking": {"dailyNotes": daily_notes}}}}}
        )
    assert "Value error" not in str(caught.value)  # the sentence, not pydantic's wrapper


def test_setting_a_daily_note_size_rechunks_the_daily_notes(kinds: Path) -> None:
    plain = _synced(kinds)
    plain.close()
    idx = MemoryIndex(
        agent_for(kinds, {"chunking": CONVERSATIONAL}).index_settings(),
        selection(HashingEmbedder()),
    )
    try:
        assert "chunkDailyNotes" in (idx.reindex_reason() or "")
        report = idx.sync()
        assert report.reindexed
        assert idx.reindex_reason() is None
        largest = _largest_chunk(idx)
    finally:
        idx.close()
    assert largest["memory/2026-11-29.md"] <= DAILY[0]
    assert largest["MEMORY.md"] > DAILY[0]
