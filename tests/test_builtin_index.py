"""The built-in index end to end: real SQLite files, real workspaces, a deterministic embedder."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from hashing_embedder import HashingEmbedder
from helpers import CountingQueries, agent_for, selection
from memoryd.builtin_index import MemoryIndex, _store
from memoryd.embeddings.base import EmbeddingProvider, Matrix, Vector
from memoryd.errors import MemorydError, PathNotAllowed, ProviderUnavailable
from memoryd.paths import agent_state

sel = selection


def write(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


class FailingEmbedder(HashingEmbedder):
    """Embeds queries but fails on documents (or on everything)."""

    def __init__(self, *, fail_queries: bool = False, model: str = "failing") -> None:
        super().__init__(model=model)
        self.fail_queries = fail_queries

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        raise RuntimeError("HTTP 503 from embedding API")

    def embed_query(self, text: str) -> Vector:
        if self.fail_queries:
            raise RuntimeError("HTTP 503 from embedding API")
        return super().embed_query(text)


class ZeroQueryEmbedder(HashingEmbedder):
    def embed_query(self, text: str) -> Vector:
        return np.zeros(self.dims or 64, dtype=np.float32)


@pytest.fixture
def notes(workspace: Path) -> Path:
    write(
        workspace / "MEMORY.md",
        "# Long-term\nThe deploy target is fly.io in region ams.\nAdGuardHome runs on the raspberry pi.\n",
    )
    write(
        workspace / "memory" / "2026-11-28.md", "# 2026-11-28\nhello world, said the greeter bot\n"
    )
    write(
        workspace / "memory" / "2026-11-29.md", "# 2026-11-29\nhello there, only one of the terms\n"
    )
    write(
        workspace / "memory" / "trip.md",
        "# Trip\n我们明天去北京开会，讨论新的项目计划。\n東京の会議は来週の月曜日です。\n",
    )
    write(
        workspace / "memory" / "pets.md",
        "# Pets\nAlice adopted a grey cat named Miso from the shelter.\n",
    )
    return workspace


def synced(
    ws: Path, provider: EmbeddingProvider | None = None, search: dict[str, object] | None = None
) -> MemoryIndex:
    idx = MemoryIndex(
        agent_for(ws, search).index_settings(),
        sel(provider if provider is not None else HashingEmbedder()),
    )
    idx.sync()
    return idx


def paths(idx: MemoryIndex, query: str, **kw: object) -> list[str]:
    return [r.path for r in (idx.search(query, **kw)).results]  # type: ignore[arg-type]


def test_sync_indexes_memory_files_and_reports_counts(notes: Path) -> None:
    idx = synced(notes)
    st = idx.status().to_dict()
    assert st["files"] == 5 and st["chunks"] == 5 and st["pendingVectors"] == 0
    assert st["vector"]["engine"] == "sqlite-vec" and st["vector"]["available"]
    assert st["fts"]["available"]
    assert st["dbPath"].endswith(
        "/agents/main/workspaces/" + agent_state("main", notes).key + "/index.sqlite"
    )


def test_both_terms_rank_above_one_and_questions_match_partially(notes: Path) -> None:
    idx = synced(notes)
    found = paths(idx, "hello world", min_score=0)
    assert found.index("memory/2026-11-28.md") < found.index("memory/2026-11-29.md")
    # a natural-language question sharing only some words still finds the note
    assert "MEMORY.md" in paths(idx, "Where is the deploy target for production these days?")


@pytest.mark.parametrize("query", ["北京", "项目计划", "東京", "会議"])
def test_cjk_queries_recall_the_note(notes: Path, query: str) -> None:
    idx = synced(notes)
    assert "memory/trip.md" in paths(idx, query)
    assert (paths(idx, query, mode="keyword"))[0] == "memory/trip.md"


def test_cjk_recall_with_keyword_only(notes: Path) -> None:
    idx = MemoryIndex(agent_for(notes).index_settings(), sel(None))
    idx.sync()
    out = idx.search("北京")
    assert out.mode == "keyword" and out.results[0].path == "memory/trip.md"


def test_substring_terms_match_inside_words(notes: Path) -> None:
    idx = synced(notes)
    assert (paths(idx, "adguard"))[0] == "MEMORY.md"


def test_results_shape_and_snippet_cap(notes: Path) -> None:
    write(
        notes / "memory" / "long.md",
        "\n".join(f"line {i} about kubernetes ingress tuning and more words" for i in range(200)),
    )
    idx = synced(notes)
    out = idx.search("kubernetes ingress")
    assert out.provider == "hashing" and out.model == "hashing-v1" and out.mode == "hybrid"
    top = out.results[0]
    assert top.path == "memory/long.md" and top.source == "memory"
    assert len(top.snippet) <= 700
    assert 1 <= top.start_line <= top.end_line <= 200
    lines = (notes / "memory" / "long.md").read_text().splitlines()
    assert top.snippet.splitlines()[0] == lines[top.start_line - 1]
    # every snippet within the cap; the 4,000-character budget is the orchestrator's (one trim)
    assert all(len(r.snippet) <= 700 for r in out.results)


def test_incremental_sync_edits_and_deletes(notes: Path) -> None:
    idx = synced(notes)
    again = idx.sync()
    assert again.files_changed == 0 and again.chunks_written == 0
    write(notes / "memory" / "pets.md", "# Pets\nBob has a parrot called Kiwi.\n")
    os.unlink(notes / "memory" / "2026-11-29.md")
    report = idx.sync()
    assert report.files_changed == 1 and report.files_removed == 1
    assert "memory/pets.md" in paths(idx, "parrot Kiwi")
    assert "memory/2026-11-29.md" not in paths(idx, "hello there", min_score=0)
    assert not any("Miso" in r.snippet for r in (idx.search("Miso cat", min_score=0)).results)


def test_an_edited_note_keeps_the_rows_and_vectors_of_its_unchanged_chunks(workspace: Path) -> None:
    paras = [
        f"Paragraph {i}: the {['otter', 'heron', 'badger'][i % 3]} count was {i}."
        for i in range(60)
    ]
    note = write(workspace / "memory" / "survey.md", "\n".join(paras) + "\n")
    agent = agent_for(
        workspace, {"chunking": {"tokens": 48, "overlap": 0}, "cache": {"enabled": False}}
    )
    embedder = HashingEmbedder()
    idx = MemoryIndex(agent.index_settings(), sel(embedder))
    first = idx.sync()
    before = idx.store.counts()["chunks"]
    assert before >= 6 and first.vectors_embedded == before
    write(note, "\n".join([*paras[:-1], "Paragraph 59: the heron count was revised."]) + "\n")

    report = idx.sync()

    # only the last chunk changed: one row written and embedded, the rest kept with their vectors
    assert report.files_changed == 1
    assert report.chunks_written == report.vectors_embedded == 1
    assert idx.store.counts()["chunks"] == before and idx.store.pending_count() == 0
    assert "revised" in idx.search("heron count revised").results[0].snippet


def test_touch_without_change_does_not_rechunk(notes: Path) -> None:
    idx = synced(notes)
    p = notes / "MEMORY.md"
    os.utime(p, (time.time() + 5, time.time() + 5))
    assert (idx.sync()).chunks_written == 0


def test_search_on_a_dirty_index_syncs_first(notes: Path) -> None:
    idx = synced(notes)
    write(notes / "memory" / "new.md", "The zebra migration starts in July.\n")
    idx.dirty = True
    assert "memory/new.md" in paths(idx, "zebra migration")


def test_numpy_engine_gives_the_same_answers(notes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_store, "IN_MEMORY_MAX_BYTES", 0)  # force the scan in SQL here
    vec_idx = synced(notes)
    assert vec_idx.store.search_engine == "sqlite-vec-scan"
    np_idx = MemoryIndex(
        agent_for(
            notes,
            {
                "store": {
                    "path": str(notes.parent / "np.sqlite"),
                    "vector": {"extensionPath": "/nonexistent/vec0.so"},
                }
            },
        ).index_settings(),
        sel(HashingEmbedder()),
    )
    np_idx.sync()
    assert np_idx.status().to_dict()["vector"]["engine"] == "numpy"
    assert np_idx.store.search_engine == "numpy"
    assert "sqlite-vec failed to load" in np_idx.status().to_dict()["vector"]["loadError"]
    for q in ("hello world", "deploy target", "grey cat"):
        a = vec_idx.search(q, mode="vector", min_score=0)
        b = np_idx.search(q, mode="vector", min_score=0)
        assert a.results[0].path == b.results[0].path
        assert sorted(r.score for r in a.results) == pytest.approx(
            sorted(r.score for r in b.results), abs=1e-5
        )


def test_keyword_only_when_provider_is_none(notes: Path) -> None:
    idx = MemoryIndex(agent_for(notes, {"provider": "none"}).index_settings(), sel(None))
    idx.sync()
    out = idx.search("deploy target")
    assert out.mode == "keyword" and out.provider is None
    assert out.results[0].path == "MEMORY.md"
    assert idx.status().to_dict()["provider"] == "none"


def test_model_change_triggers_atomic_reindex(notes: Path) -> None:
    idx = synced(notes, HashingEmbedder(model="m-a"))
    idx.close()
    idx2 = MemoryIndex(agent_for(notes).index_settings(), sel(HashingEmbedder(model="m-b")))
    assert "model" in (idx2.reindex_reason() or "")
    # until the reindex runs, vectors from the old model are not used
    assert (idx2.search("deploy target")).mode == "keyword"
    report = idx2.sync()
    assert report.reindexed and "m-b" in (report.reindex_reason or "")
    assert idx2.reindex_reason() is None
    assert (idx2.search("deploy target")).mode == "hybrid"
    leftovers = [p.name for p in idx2.path.parent.iterdir() if ".reindex-" in p.name]
    assert leftovers == []


def test_failed_reindex_keeps_the_old_index(notes: Path) -> None:
    idx = synced(notes, HashingEmbedder(model="m-a"))
    idx.close()
    broken = MemoryIndex(
        agent_for(notes).index_settings(), sel(FailingEmbedder(model="m-b"), explicit=True)
    )
    with pytest.raises(ProviderUnavailable, match="503"):
        broken.sync()
    assert [p.name for p in broken.path.parent.iterdir() if ".reindex-" in p.name] == []
    broken.close()
    reopened = MemoryIndex(agent_for(notes).index_settings(), sel(HashingEmbedder(model="m-a")))
    assert reopened.reindex_reason() is None  # still the m-a index
    assert reopened.status().to_dict()["chunks"] == 5


def test_second_forced_reindex_hits_the_embedding_cache(notes: Path) -> None:
    emb = HashingEmbedder()
    idx = synced(notes, emb)
    first = emb.embedded_texts
    report = idx.sync(force=True)
    assert report.reindexed and report.vectors_from_cache == 5 and report.vectors_embedded == 0
    assert emb.embedded_texts == first


def test_cache_is_pruned_to_max_entries(notes: Path) -> None:
    idx = synced(notes, search={"cache": {"maxEntries": 3}})
    assert idx.status().to_dict()["cache"]["entries"] == 3


def test_explicit_provider_failure_makes_memory_unavailable(notes: Path) -> None:
    idx = MemoryIndex(agent_for(notes).index_settings(), sel(FailingEmbedder(), explicit=True))
    with pytest.raises(ProviderUnavailable):
        idx.sync()
    with pytest.raises(ProviderUnavailable):
        idx.search("deploy")


def test_auto_provider_failure_degrades_to_keywords_and_says_so(notes: Path) -> None:
    idx = MemoryIndex(agent_for(notes).index_settings(), sel(FailingEmbedder(fail_queries=True)))
    idx.sync()
    out = idx.search("deploy target")
    assert out.results[0].path == "MEMORY.md"
    assert out.mode == "keyword"
    assert out.degraded is not None and "keyword-only" in out.degraded["reason"]
    assert (
        idx.status()
        .to_dict()["fallback"]["reason"]
        .startswith("hashing embedding failed: HTTP 503")
    )


def test_fallback_provider_takes_over_when_primary_fails(notes: Path) -> None:
    backup = HashingEmbedder(model="backup")
    idx = MemoryIndex(
        agent_for(notes).index_settings(), sel(FailingEmbedder(), explicit=True, fallback=backup)
    )
    idx.sync()  # primary fails → switch
    idx.sync()  # signature changed → reindex with the fallback
    out = idx.search("deploy target")
    assert out.model == "backup" and out.mode == "hybrid"
    assert "fallback provider hashing" in out.degraded["reason"]  # type: ignore[index]


def test_query_embedding_failure_or_zero_vector_still_answers(notes: Path) -> None:
    idx = synced(notes, ZeroQueryEmbedder())
    out = idx.search("deploy target")
    assert out.results[0].path == "MEMORY.md" and out.mode == "keyword"
    assert any("zero vector" in n for n in out.notes)


def test_vectors_answer_when_fts5_is_unavailable(
    notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fts(conn: object) -> None:
        conn.execute(
            "insert or replace into meta(key, value) values ('fts_error', 'no such module: fts5')"
        )  # type: ignore[attr-defined]

    monkeypatch.setattr(_store, "_create_keyword_tables", no_fts)
    idx = synced(notes)
    assert idx.status().to_dict()["fts"] == {
        "available": False,
        "error": "no such module: fts5",
        "trigram": True,
        "engine": "fts5",
    }
    out = idx.search("grey cat named Miso")
    assert out.mode == "vector" and out.results[0].path == "memory/pets.md"


def test_migrations_are_numbered_and_applied_once(notes: Path) -> None:
    idx = synced(notes)
    rows = idx.store.conn.execute("select id from migrations order by id").fetchall()
    assert [r[0] for r in rows] == ["m005_int8_vectors"]
    assert idx.store.conn.execute("pragma journal_mode").fetchone()[0] == "wal"
    idx.close()
    again = MemoryIndex(agent_for(notes).index_settings(), sel(HashingEmbedder()))
    assert again.store.conn.execute("select count(*) from migrations").fetchone()[0] == 1


def test_searches_never_crash_while_another_process_syncs(notes: Path) -> None:
    idx = synced(notes)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        def run() -> None:
            other = MemoryIndex(agent_for(notes).index_settings(), sel(HashingEmbedder()))
            i = 0
            while not stop.is_set():
                write(
                    notes / "memory" / f"churn-{i % 5}.md",
                    f"churn note {i} " + "filler words " * 200,
                )
                other.dirty = True
                other.sync()
                i += 1
            other.close()

        try:
            run()
        except BaseException as err:  # surfaced below
            errors.append(err)

    t = threading.Thread(target=writer)
    t.start()
    try:
        deadline = time.monotonic() + 3
        n = 0
        while time.monotonic() < deadline:
            out = idx.search("churn note filler", min_score=0)
            assert isinstance(out.results, list)
            n += 1
    finally:
        stop.set()
        t.join(30)
    assert not errors
    assert n > 10


def test_temporal_decay_orders_equal_notes_by_age(workspace: Path) -> None:
    text = "Rod has standup at 14:15 with the platform team.\n"
    for day in ("2025-09-15", "2026-02-03", "2026-02-10"):
        write(workspace / "memory" / f"{day}.md", text)
    write(workspace / "MEMORY.md", text)
    idx = synced(workspace, search={"query": {"hybrid": {"temporalDecay": {"enabled": True}}}})
    out = idx.search("Rod standup", min_score=0, now=datetime(2026, 2, 10, tzinfo=UTC))
    order = [r.path for r in out.results]
    assert (
        order.index("memory/2026-02-10.md")
        < order.index("memory/2026-02-03.md")
        < order.index("memory/2025-09-15.md")
    )
    scores = {r.path: r.score for r in out.results}
    assert scores["MEMORY.md"] == pytest.approx(
        scores["memory/2026-02-10.md"]
    )  # evergreen: no decay


def test_mmr_through_the_index(workspace: Path) -> None:
    write(
        workspace / "memory" / "2026-02-10.md",
        "Configured Omada router, set VLAN 10 for IoT devices\n",
    )
    write(workspace / "memory" / "2026-02-08.md", "Configured Omada router, moved IoT to VLAN 10\n")
    write(
        workspace / "memory" / "network.md",
        "Router: Omada ER605, AdGuard: 192.168.10.2, VLAN 10: IoT\n",
    )
    write(workspace / "memory" / "2026-02-05.md", "Set up AdGuard DNS on 192.168.10.2\n")
    idx = synced(workspace, search={"query": {"hybrid": {"mmr": {"enabled": True, "lambda": 0.3}}}})
    top = paths(idx, "Omada router VLAN", max_results=2, min_score=0)
    # the two near-identical router notes are not both in the top two
    assert not {"memory/2026-02-10.md", "memory/2026-02-08.md"} <= set(top)


def test_exact_file_name_in_query_ranks_that_file_first(notes: Path) -> None:
    idx = synced(notes)
    assert (paths(idx, "pets.md"))[0] == "memory/pets.md"
    assert (paths(idx, "memory/trip.md"))[0] == "memory/trip.md"


def test_empty_query_is_an_error(notes: Path) -> None:
    idx = synced(notes)
    with pytest.raises(MemorydError, match="empty"):
        idx.search("   ")


def test_memory_get_reads_slices_and_refuses(notes: Path) -> None:
    idx = synced(notes)
    assert (idx.get("MEMORY.md")).text.startswith("# Long-term")
    assert (idx.get("MEMORY.md", 2, 1)).text == "The deploy target is fly.io in region ams.\n"
    assert (idx.get("MEMORY.md", 99)).text == ""
    assert (idx.get("memory/nope.md")).to_dict() == {
        "path": "memory/nope.md",
        "text": "",
        "missing": True,
    }
    with pytest.raises(PathNotAllowed):
        idx.get("../secrets.md")
    with pytest.raises(MemorydError, match="from"):
        idx.get("MEMORY.md", 0)


def test_watcher_picks_up_a_new_note(notes: Path) -> None:
    idx = synced(notes, search={"sync": {"watchDebounceMs": 100}})
    synced_event = threading.Event()
    stop = threading.Event()
    sync_logged = idx._sync_logged

    def logged(what: str) -> None:
        sync_logged(what)
        synced_event.set()

    idx._sync_logged = logged  # type: ignore[method-assign]
    watcher = threading.Thread(target=lambda: idx.watch(stop))
    watcher.start()
    try:
        time.sleep(0.5)
        write(notes / "memory" / "2026-11-30.md", "The quokka visit is booked for Friday.\n")
        assert synced_event.wait(15)
        idx.dirty = False  # prove the watcher's sync, not search's, indexed it
        assert "memory/2026-11-30.md" in paths(idx, "quokka visit")
    finally:
        stop.set()
        watcher.join(5)


class PendingThenReady(HashingEmbedder):
    """A batch-mode provider whose job is still running on the first sync."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds = 0

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        from memoryd.errors import BatchPending

        self.rounds += 1
        if self.rounds == 1:
            raise BatchPending("batch job still running", ["batch_1"])
        return super().embed_documents(texts)


def test_pending_batch_jobs_leave_vectors_pending_not_failed(notes: Path) -> None:
    emb = PendingThenReady()
    idx = MemoryIndex(agent_for(notes).index_settings(), sel(emb, explicit=True))
    first = idx.sync()
    assert first.vectors_pending == 5 and idx.fallback_reason is None and idx.unavailable is None
    assert (idx.search("deploy target")).results[0].path == "MEMORY.md"  # BM25 meanwhile
    second = idx.sync()
    assert second.vectors_pending == 0 and second.vectors_embedded == 5


def test_numpy_engine_sees_writes_from_another_connection(notes: Path) -> None:
    search = {"store": {"vector": {"extensionPath": "/nonexistent/vec0.so"}}}
    reader = MemoryIndex(agent_for(notes, search).index_settings(), sel(HashingEmbedder()))
    reader.sync()
    assert reader.status().to_dict()["vector"]["engine"] == "numpy"
    assert (reader.search("grey cat", mode="vector")).results  # builds the in-memory matrix
    writer = MemoryIndex(agent_for(notes, search).index_settings(), sel(HashingEmbedder()))
    write(notes / "memory" / "walrus.md", "The walrus colony count was 412 this spring.\n")
    writer.sync()
    reader.dirty = False  # only the other connection synced
    out = reader.search("walrus colony count", mode="vector", min_score=0)
    assert out.results[0].path == "memory/walrus.md"


def test_repeated_queries_reuse_their_embedding(notes: Path) -> None:
    emb = CountingQueries()
    idx = synced(notes, emb)
    first = idx.search("grey cat named Miso")
    again = idx.search("grey cat named Miso")
    idx.search("deploy target")
    # every text is embedded once: the user's two queries and the calibration's reference
    # queries (embedded once per index, then cached)
    assert len(emb.texts) == len(set(emb.texts))
    assert [t for t in emb.texts if t in {"grey cat named Miso", "deploy target"}] == [
        "grey cat named Miso",
        "deploy target",
    ]
    assert [r.path for r in first.results] == [r.path for r in again.results]


def test_small_indexes_search_in_memory_even_with_vec0(notes: Path) -> None:
    idx = synced(notes)
    st = idx.status().to_dict()["vector"]
    assert st["engine"] == "sqlite-vec" and st["searchEngine"] == "numpy"


def test_a_file_that_is_not_utf8_is_indexed_and_listed_by_status(notes: Path) -> None:
    (notes / "memory" / "legacy.md").write_bytes(
        "# Café notes\n\nLe café est fermé.\n".encode("latin-1")
    )
    idx = synced(notes)
    st = idx.status()
    assert st.undecodable == ["memory/legacy.md"]
    hit = (idx.search("notes legacy")).results
    assert any(r.path == "memory/legacy.md" and "\ufffd" in r.snippet for r in hit)
    (notes / "memory" / "legacy.md").write_text("# Café notes\n\nFixed.\n", encoding="utf-8")
    idx.notify_changed()
    idx.sync()
    assert idx.status().undecodable == []


PATH_QUERIES = [
    "memory/notes.md",
    "see memory/notes.md, please",
    "notes.md",
    "notes",
    "`alpha.md`",
    "what about data.md and a.md",
    "2026-11-28",
    "projects/alpha.md?",
    "MEMORY.md",
    "memory/notes.mdx",
    "alpha",
    "x-y_z.md",
    "the memory/projects/alpha.md file",
    "nothing named here at all",
    "memory/2026-11-28.md",
]


def test_path_candidates_find_exactly_the_files_the_path_rule_accepts(
    workspace: Path,
) -> None:
    # The screen works by dictionary (file name, stem), not by scanning every path: it must
    # keep exactly what path_match_level accepts when run over every indexed path.
    from memoryd.core.ranking import path_match_level

    for rel in [
        "MEMORY.md",
        "memory/notes.md",
        "memory/a.md",
        "memory/data.md",
        "memory/2026-11-28.md",
        "memory/projects/alpha.md",
        "memory/x-y_z.md",
    ]:
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(f"# {rel}\n\nsome words\n")
    idx = MemoryIndex(agent_for(workspace).index_settings(), selection(None))
    idx.sync()
    store = idx.store
    paths = store.paths()
    for query in PATH_QUERIES:
        ids = idx.searcher._path_candidates(store, query)
        found = {row.path for row in store.chunk_rows(ids).values()}
        want = {p for p in paths if path_match_level(query, p) > 0}
        assert found == want, query
    idx.close()


def test_before_any_chunk_has_a_vector_no_query_is_embedded(notes: Path) -> None:
    """A first search whose backlog was not started answers by keywords, says so, and does
    not embed (nor load a model for) a query that could find nothing."""
    emb = CountingQueries()
    idx = MemoryIndex(agent_for(notes).index_settings(), sel(emb))
    idx.sync(embed=False)
    out = idx.search("deploy target")
    assert out.mode == "keyword" and out.results[0].path == "MEMORY.md"
    assert emb.texts == []
    assert any("still waiting for embeddings" in n for n in out.notes)
    idx.sync()  # the vectors land: the same search is hybrid and embeds its query
    out = idx.search("deploy target")
    assert out.mode == "hybrid" and "deploy target" in emb.texts  # (and calibration's own)
    assert not any("still waiting" in n for n in out.notes)
