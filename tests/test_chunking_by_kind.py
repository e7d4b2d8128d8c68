"""Chunking by file kind: daily notes (append-only logs of short turns) are chunked smaller than
curated prose, unless the user chose a chunk size; the index re-chunks when the rule changes."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from helpers import agent_for, selection
from memoryd.builtin_index import MemoryIndex
from memoryd.core.chunking import DAILY_NOTE_CHUNKING, ChunkSize, chunking_plan
from memoryd.core.layout import is_daily_note_path
from memoryd.embeddings import HashingEmbedder

pytestmark = pytest.mark.anyio


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


@pytest.mark.parametrize(
    ("tokens", "overlap", "explicit", "daily", "curated", "fingerprint"),
    [
        (400, 80, False, DAILY_NOTE_CHUNKING, ChunkSize(400, 80), "160/16"),
        (400, 80, True, ChunkSize(400, 80), ChunkSize(400, 80), None),
        (160, 16, True, ChunkSize(160, 16), ChunkSize(160, 16), None),
        (600, 60, True, ChunkSize(600, 60), ChunkSize(600, 60), None),
    ],
)
def test_a_chosen_size_applies_to_every_file_the_default_keeps_daily_notes_apart(
    tokens: int,
    overlap: int,
    explicit: bool,
    daily: ChunkSize,
    curated: ChunkSize,
    fingerprint: str | None,
) -> None:
    plan = chunking_plan(tokens, overlap, explicit=explicit)
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


async def _synced(ws: Path, search: dict[str, Any] | None = None) -> MemoryIndex:
    idx = MemoryIndex(agent_for(ws, search).index_settings(), selection(HashingEmbedder()))
    await idx.sync()
    return idx


async def test_default_config_chunks_daily_notes_smaller_than_curated_files(kinds: Path) -> None:
    idx = await _synced(kinds)
    try:
        largest = _largest_chunk(idx)
    finally:
        await idx.aclose()
    assert largest["memory/2026-11-29.md"] <= DAILY_NOTE_CHUNKING.tokens
    for curated in ("MEMORY.md", "memory/garden.md"):
        assert largest[curated] > DAILY_NOTE_CHUNKING.tokens
        assert largest[curated] <= 400


@pytest.mark.parametrize(
    "chosen", [{"tokens": 400}, {"overlap": 80}, {"tokens": 300, "overlap": 30}]
)
async def test_a_chunk_size_in_the_config_applies_to_daily_notes_too(
    kinds: Path, chosen: dict[str, int]
) -> None:
    idx = await _synced(kinds, {"chunking": chosen})
    try:
        largest = _largest_chunk(idx)
        signature = idx.signature()
    finally:
        await idx.aclose()
    assert largest["memory/2026-11-29.md"] == largest["MEMORY.md"] > DAILY_NOTE_CHUNKING.tokens
    # the signature an explicit size had before the rule: such indexes are not rebuilt
    assert "chunkDailyNotes" not in signature


async def test_switching_to_the_default_rule_rechunks_the_daily_notes(kinds: Path) -> None:
    explicit = await _synced(kinds, {"chunking": {"tokens": 400, "overlap": 80}})
    await explicit.aclose()
    idx = MemoryIndex(agent_for(kinds).index_settings(), selection(HashingEmbedder()))
    try:
        assert "chunkDailyNotes" in (idx.reindex_reason() or "")
        report = await idx.sync()
        assert report.reindexed
        assert idx.reindex_reason() is None
        largest = _largest_chunk(idx)
    finally:
        await idx.aclose()
    assert largest["memory/2026-11-29.md"] <= DAILY_NOTE_CHUNKING.tokens
    assert largest["MEMORY.md"] > DAILY_NOTE_CHUNKING.tokens
