"""The SQLite index stores each thing once, vectors as int8 codes; an index a development build
wrote in an older layout is rebuilt from the files, keeping the cached embeddings it can."""

from __future__ import annotations

import contextlib
import sqlite3
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlean
import sqlite_vec
from hypothesis import given
from hypothesis import strategies as st

from hashing_embedder import HashingEmbedder
from helpers import agent_for, selection
from memoryd.builtin_index import MemoryIndex, _store
from memoryd.builtin_index._postings import _row_count
from memoryd.builtin_index._store import trigram_body
from memoryd.core.text import trigram_terms

QUERIES = ["deploy target region", "adguard", "grey cat Miso", "北京", "home-assistant", "zebra"]


def write(p: Path, text: str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")


@pytest.fixture
def ws(workspace: Path) -> Path:
    write(
        workspace / "MEMORY.md",
        "# Long-term\nThe deploy target is fly.io in region ams.\n"
        "AdGuardHome runs on the raspberry pi next to home-assistant.local.\n",
    )
    write(workspace / "memory" / "trip.md", "# Trip\n我们明天去北京开会，讨论新的项目计划。\n")
    write(workspace / "memory" / "pets.md", "# Pets\nAlice adopted a grey cat named Miso.\n")
    for n in range(12):
        write(
            workspace / "memory" / f"2026-10-{n + 1:02d}.md",
            f"# day {n}\n" + f"Meeting {n} about the deploy pipeline and region failover.\n" * 30,
        )
    return workspace


def open_index(ws: Path) -> MemoryIndex:
    return MemoryIndex(agent_for(ws).index_settings(), selection(HashingEmbedder()))


def answers(idx: MemoryIndex) -> list[Any]:
    out = []
    for q in QUERIES:
        for mode in ("keyword", "hybrid", "vector"):
            found = idx.search(q, mode=mode, min_score=0)
            out.append(
                [(r.path, r.start_line, r.end_line, r.score, r.snippet) for r in found.results]
            )
    return out


@contextlib.contextmanager
def raw(path: Path) -> Iterator[Any]:
    conn = sqlean.connect(str(path), isolation_level=None)
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    try:
        yield conn
    finally:
        conn.close()


def tables(path: Path) -> set[str]:
    with raw(path) as conn:
        return {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}


def test_an_index_from_a_development_build_in_an_older_layout_is_rebuilt(ws: Path) -> None:
    idx = open_index(ws)
    idx.sync()
    before = answers(idx)
    path = idx.store.path
    idx.close()
    with raw(path) as conn:
        # as a development build left it, before `m005_int8_vectors`: half the cache in float32
        conn.execute("delete from migrations")
        older = ["m001_base", "m002_fts", "m003_vector_ids", "m004_store_once"]
        conn.executemany("insert into migrations values (?, 0)", [(m,) for m in older])
        conn.execute("update embedding_cache set vector = zeroblob(4 * dims) where rowid % 2 = 0")
        int8 = conn.execute("select count(*) from embedding_cache where rowid % 2 = 1").fetchone()
    idx = open_index(ws)
    [rec] = idx.store.recovered
    assert rec.moved_to is not None and rec.moved_to.exists()
    assert "development build" in str(rec.reason)
    # only the cached embeddings in the current format are kept
    assert idx.store.conn.execute("select count(*) from embedding_cache").fetchone() == int8
    idx.sync()
    assert_same_ranking(answers(idx), before, abs=1e-9)
    assert idx.store.conn.execute("select id from migrations").fetchall() == [(_store.LAYOUT,)]
    idx.close()


def assert_same_ranking(got: list[Any], want: list[Any], abs: float = 5e-3) -> None:
    """The same results in the same order, scores within `abs`."""
    assert [[r[:3] + r[4:] for r in res] for res in got] == [
        [r[:3] + r[4:] for r in res] for res in want
    ]
    assert [[r[3] for r in res] for res in got] == [
        pytest.approx([r[3] for r in res], abs=abs) for res in want
    ]


@pytest.mark.parametrize("seed", range(20))
def test_int8_codes_keep_a_unit_vectors_cosines_within_rounding(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((2, 384)).astype(np.float32)
    a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
    qa, qb = (_store._vector(_store._codes(v), 384) for v in (a, b))
    assert float(np.linalg.norm(qa)) == pytest.approx(1.0, abs=1e-6)
    assert float(qa @ qb) == pytest.approx(float(a @ b), abs=2e-3)
    assert _store._codes(qa) == _store._codes(a)  # decoding and storing again changes nothing


def test_a_querys_codes_without_numpy_are_the_stored_codes() -> None:
    # the SQL scan is sent `_query_codes`, the matrix in memory holds `_codes`: equal or they rank
    # differently; 20,000 vectors reach the rounding boundaries float32 and double disagree on
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((20_000, 384)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    odd = np.array([[0.5, -0.5, 1.5, np.nan, np.inf, 0.0, 2.5, -2.5]], np.float32)
    for row in [*rows, *odd, np.zeros(8, np.float32)]:
        assert _store._query_codes(array("f", row.tolist())) == _store._codes(row)


def test_a_zero_or_broken_vector_is_stored_as_zero() -> None:
    for vec in (np.zeros(8, np.float32), np.full(8, np.nan, np.float32)):
        assert _store._codes(vec) == bytes(8)
        assert not _store._vector(bytes(8), 8).any()


def test_a_required_migration_that_fails_still_fails_the_open(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(conn: Any) -> None:
        raise sqlite3.OperationalError("injected")

    monkeypatch.setattr(_store.Store, "MIGRATIONS", [(_store.LAYOUT, broken)])
    with pytest.raises(Exception, match="injected"):
        open_index(ws)


def test_a_fresh_index_holds_no_copy_of_the_text_beyond_chunks(ws: Path) -> None:
    idx = open_index(ws)
    idx.sync()
    names = tables(idx.store.path)
    assert "chunks_fts_data" in names and "chunks_tri_data" in names
    assert not {"chunks_fts_content", "chunks_tri_content", "chunks_vec"} & names
    idx.close()


@pytest.mark.parametrize(
    ("text", "term", "found"),
    [
        ("AdGuardHome runs", "adguard", True),
        ("see home-assistant.local now", "assistant.local", True),
        ("ip 10.0.0.12/24 here", "0.0.12/2", True),
        ("Ünïcode Straße", "straße", True),
    ],
)
def test_the_trigram_body_keeps_every_substring_a_query_term_can_find(
    text: str, term: str, found: bool
) -> None:
    assert (term in trigram_body(text)) is found


def test_the_trigram_body_holds_each_run_once() -> None:
    assert trigram_body("Deploy deploy DEPLOY to fly.io, fly.io!") == "deploy fly.io"


@given(st.text(alphabet="abcXYZ.-/: _é北京\n", max_size=60), st.data())
def test_a_query_term_is_inside_the_text_exactly_when_inside_its_trigram_body(
    text: str, data: st.DataObject
) -> None:
    query = data.draw(st.text(alphabet="abcXYZ.-/:_é北京", min_size=3, max_size=8))
    for term in trigram_terms(query):
        assert (term in text.lower()) == (term in trigram_body(text))


def test_edits_leave_bm25s_counts_those_of_the_live_chunks(ws: Path) -> None:
    # FTS5's averages record (rows, tokens) is what bm25 weighs terms by: a deleted row must
    # leave it, or every edit of a note would skew the ranking a little more
    idx = open_index(ws)
    idx.sync()
    note = ws / "memory" / "2026-10-01.md"
    for n in range(5):
        write(note, f"# edit {n}\n" + "Another line about the deploy pipeline.\n" * (10 + n))
        idx.sync()
    with raw(idx.store.path) as conn:
        chunks = conn.execute("select count(*) from chunks").fetchone()[0]
        for table in ("chunks_fts", "chunks_tri"):
            block = conn.execute(f"select block from {table}_data where id = 1").fetchone()[0]
            assert _row_count(bytes(block)) == chunks
            conn.execute(f"insert into {table}({table}) values ('integrity-check')")
    assert idx.store.verify(deep=True) is None
    idx.close()


def test_a_new_index_has_8k_pages_and_an_older_one_keeps_its_own(ws: Path, tmp_path: Path) -> None:
    idx = open_index(ws)
    idx.sync()
    assert idx.store.conn.execute("pragma page_size").fetchone()[0] == 8192
    idx.close()
    old = tmp_path / "old.sqlite"
    with contextlib.closing(sqlean.connect(str(old), isolation_level=None)) as conn:
        conn.execute("pragma page_size = 4096")
        conn.execute("pragma journal_mode = wal")
        conn.execute("create table t (x)")  # fixes the page size
    store = _store.Store(old)
    try:
        assert store.conn.execute("pragma page_size").fetchone()[0] == 4096
        scratch = store.open_scratch()  # a rebuild's copy must match to be published
        scratch.replace_file("a.md", "/w/a.md", "memory", "f", 1.0, 10, [(1, 1, "h", "text", 1)])
        store.publish(scratch)
        scratch.discard()
        assert store.conn.execute("pragma page_size").fetchone()[0] == 4096
        assert store.paths() == ["a.md"]
    finally:
        store.close()
