"""The PostgreSQL store: the SQLite store's behaviour, BM25 equal to FTS5's, tenants, RLS, rebuilds.

Every test runs against a real PostgreSQL 18 with pgvector (tests/pg_support.py); the contract
tests run the same assertions against the SQLite `Store` too.
"""

from __future__ import annotations

import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from hashing_embedder import HashingEmbedder
from helpers import agent_for, selection, write
from memoryd.builtin_index import MemoryIndex
from memoryd.builtin_index._pg_migrations import LATEST, MIGRATIONS, migrate
from memoryd.builtin_index._pg_store import (
    HNSW_BUILD_MAX_PENDING,
    PgStore,
    describe_url,
    fts_document,
)
from memoryd.builtin_index._postings import or_phrases
from memoryd.builtin_index._store import Store
from memoryd.config import validate_config
from memoryd.core.text import fts_match_expression, query_terms
from memoryd.errors import ConfigError, IndexError_
from memoryd.orchestrator.service import MemoryService
from memoryd.paths import workspace_key
from pg_support import PgServer

KEY = ("hashing", "hashing-v1", "fp")


@pytest.fixture
def open_store(pg_url: str) -> Iterator[Callable[..., PgStore]]:
    """PgStore(url=pg_url, agent_id="a", workspace="/w", **kw), closed after the test."""
    opened: list[PgStore] = []

    def make(url: str | None = None, **kw: Any) -> PgStore:
        kw.setdefault("agent_id", "a")
        kw.setdefault("workspace", "/w")
        s = PgStore(url or pg_url, **kw)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


def match(query: str) -> str:
    return fts_match_expression(query_terms(query)) or ""


def chunk(start: int, text: str) -> tuple[int, int, str, str, int]:
    return (start, start, f"h{start}-{len(text)}", text, len(text) // 4)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """The SQLite store and the PostgreSQL store, for the contract both must keep."""
    if request.param == "sqlite":
        s: Any = Store(tmp_path / "index.sqlite")
    else:
        s = PgStore(request.getfixturevalue("pg_url"), agent_id="main", workspace=str(tmp_path))
    yield s
    s.close()


def unit(v: np.ndarray) -> np.ndarray:
    """Providers return L2-normalized vectors (the SQLite numpy path relies on it)."""
    return np.asarray(v / np.linalg.norm(v), dtype=np.float32)


def paths_of(store: Any, hits: list[tuple[int, float]]) -> list[str]:
    rows = store.chunk_rows([h[0] for h in hits])
    return [rows[h[0]].path for h in hits]


# ------------------------------------------------------------------------------ the contract


def test_replace_file_swaps_chunks_and_counts(store: Any) -> None:
    store.replace_file(
        "a.md", "/w/a.md", "memory", "h1", 1.5, 10, [chunk(1, "one"), chunk(2, "two")]
    )
    store.replace_file("a.md", "/w/a.md", "memory", "h2", 2.5, 12, [chunk(1, "three")])
    store.replace_file("s.jsonl", "/s/s.jsonl", "sessions", "h3", 3.0, 5, [chunk(1, "four")])
    assert store.files() == {
        "a.md": ("h2", 2.5, 12, "memory"),
        "s.jsonl": ("h3", 3.0, 5, "sessions"),
    }
    counts = store.counts()
    assert (counts["files"], counts["chunks"], counts["pending_vectors"]) == (2, 2, 2)
    assert counts["source_counts"] == {"memory": 1, "sessions": 1}
    assert sorted(store.paths()) == ["a.md", "s.jsonl"]
    assert store.abs_paths("sessions") == ["/s/s.jsonl"]


def test_remove_file_drops_its_chunks_and_row(store: Any) -> None:
    store.replace_file("a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(1, "alpha words")])
    store.replace_file("b.md", "/w/b.md", "memory", "h", 1.0, 1, [chunk(1, "beta words")])
    store.remove_file("a.md")
    assert list(store.files()) == ["b.md"]
    assert paths_of(store, store.keyword_search(match("words"), 10)) == ["b.md"]


def test_touch_file_updates_the_stat_only(store: Any) -> None:
    store.replace_file("a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(1, "alpha")])
    before = store.pending_chunks(10)
    store.touch_file("a.md", 9.25, 7)
    assert store.files()["a.md"] == ("h", 9.25, 7, "memory")
    assert store.pending_chunks(10) == before


def test_chunk_rows_and_ids_for_paths_read_back_what_was_written(store: Any) -> None:
    store.replace_file(
        "a.md", "/w/a.md", "memory", "h", 4.5, 1, [chunk(i, f"line {i}") for i in (5, 1, 3)]
    )
    ids = store.chunk_ids_for_paths(["a.md", "missing.md"], limit_per_path=2)
    rows = store.chunk_rows(ids)
    assert [rows[i].start_line for i in ids] == [1, 3]
    assert all(r.path == "a.md" and r.mtime == 4.5 and r.source == "memory" for r in rows.values())
    assert rows[ids[0]].text == "line 1"
    assert store.chunk_rows([]) == {}


@pytest.mark.parametrize(
    ("query", "expected_first"),
    [
        ("zebra", "rare.md"),  # the rarer term outranks the common one
        ("common zebra", "rare.md"),
        ("deploying", "deploy.md"),  # stemmed: deploying ~ deploy
        ("北京", "cjk.md"),  # CJK runs match as per-character phrases
        ("cafe", "accent.md"),  # diacritics folded
        ("foo", "dotted.md"),  # split on punctuation as unicode61 does
    ],
)
def test_keyword_search_ranks_like_fts5(store: Any, query: str, expected_first: str) -> None:
    docs = {
        "rare.md": "common words and a zebra",
        "c1.md": "common words only",
        "c2.md": "common common words",
        "deploy.md": "we deploy on fridays",
        "cjk.md": "我们明天去北京开会",
        "accent.md": "the café on the corner",
        "dotted.md": "see foo.bar for details",
    }
    for name, text in docs.items():
        store.replace_file(name, f"/w/{name}", "memory", "h", 1.0, 1, [chunk(1, text)])
    hits = store.keyword_search(match(query), 10)
    assert hits and paths_of(store, hits)[0] == expected_first
    assert all(s > 0 for _, s in hits)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)


def test_trigram_search_matches_inside_words(store: Any) -> None:
    store.replace_file("a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(1, "AdGuardHome runs")])
    store.replace_file("b.md", "/w/b.md", "memory", "h", 1.0, 1, [chunk(1, "nothing here")])
    assert store.keyword_search(match("adguard"), 10) == []
    assert paths_of(store, store.keyword_search('"adguard"', 10, trigram=True)) == ["a.md"]
    assert store.keyword_search('"zz"', 10, trigram=True) == []  # under 3 characters


def test_vectors_pending_until_written_then_searched_best_first(store: Any) -> None:
    store.replace_file(
        "a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(i, f"t{i}") for i in range(1, 6)]
    )
    pending = store.pending_chunks(10)
    assert len(pending) == 5 and store.pending_count() == 5 and store.vec_dims is None
    rng = np.random.default_rng(7)
    vecs = {cid: unit(rng.standard_normal(12)) for cid, _, _ in pending}
    store.write_vectors(list(vecs.items()))
    assert store.pending_count() == 0 and store.vec_dims == 12
    target = next(iter(vecs))
    hits = store.vector_search(vecs[target], 3)
    assert hits[0][0] == target and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert store.vector_search(np.ones(5, np.float32), 3) == []  # other dims: no answer
    with pytest.raises(IndexError_, match="dims changed"):
        store.write_vectors([(target, np.ones(5, np.float32))])


def test_write_vectors_skips_chunks_deleted_meanwhile(store: Any) -> None:
    store.replace_file("a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(1, "alpha")])
    # (SQLite reuses the largest rowid once it is deleted: b keeps a's id from coming back)
    store.replace_file("b.md", "/w/b.md", "memory", "h", 1.0, 1, [chunk(1, "other")])
    (cid, _, _) = store.pending_chunks(1)[0]
    store.replace_file("a.md", "/w/a.md", "memory", "h2", 2.0, 1, [chunk(1, "beta")])
    store.write_vectors([(cid, unit(np.ones(4)))])
    assert store.chunk_rows([cid]) == {} and store.pending_count() == 2


def test_cache_round_trip_and_lru_eviction(store: Any) -> None:
    vec = {h: np.full(4, i, np.float32) for i, h in enumerate("abcd", 1)}
    store.cache_put(KEY, [("a", vec["a"]), ("b", vec["b"])], 10)
    got = store.cache_get(KEY, ["a", "b", "zz"])
    assert set(got) == {"a", "b"}
    # the same direction: SQLite keeps vectors as int8 codes read back at unit length
    cosine = got["b"] @ vec["b"] / np.linalg.norm(got["b"]) / np.linalg.norm(vec["b"])
    assert float(cosine) == pytest.approx(1.0)
    assert store.cache_get(("other", "m", "f"), ["a"]) == {}
    store.cache_get(KEY, ["a"])  # "a" is now the most recently used
    store.cache_put(KEY, [("c", vec["c"]), ("d", vec["d"])], 3)
    assert set(store.cache_get(KEY, list("abcd"))) == {"a", "c", "d"}
    assert store.counts()["cache_entries"] == 3


def test_meta_round_trip(store: Any) -> None:
    store.set_meta({"signature": "{}", "workspace": "/w"})
    store.set_meta({"signature": '{"a": 1}'})
    assert store.meta() == {"signature": '{"a": 1}', "workspace": "/w"}


def test_version_changes_on_every_write(store: Any) -> None:
    seen = {store.version}
    store.replace_file("a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(1, "alpha")])
    seen.add(store.version)
    store.write_vectors([(store.pending_chunks(1)[0][0], np.ones(4, np.float32))])
    seen.add(store.version)
    store.remove_file("a.md")
    seen.add(store.version)
    assert len(seen) == 4


# ------------------------------------------------------------------------- PostgreSQL only


def test_bm25_strengths_equal_fts5_bm25(pg_url: str, tmp_path: Path) -> None:
    """Same idf, k1, b and token lengths as SQLite FTS5's bm25(): the same numbers."""
    words = [
        "apple",
        "banana",
        "cherry",
        "grape",
        "lemon",
        "mango",
        "olive",
        "peach",
        "plum",
        "berry",
        "melon",
        "kiwi",
    ]
    rng = random.Random(1)
    pg = PgStore(pg_url, agent_id="main", workspace=str(tmp_path))
    lite = Store(tmp_path / "index.sqlite")
    for i in range(60):
        text = " ".join(rng.choice(words[: rng.randint(3, 12)]) for _ in range(rng.randint(3, 40)))
        for s in (pg, lite):
            s.replace_file(f"f{i}.md", f"/w/f{i}.md", "memory", "h", 1.0, 1, [chunk(1, text)])
    for query in ["kiwi", "kiwi apple", "melon plum cherry", "banana"]:
        a, b = pg.keyword_search(match(query), 20), lite.keyword_search(match(query), 20)
        assert [round(s, 6) for _, s in a] == [round(s, 6) for _, s in b]
        assert set(paths_of(pg, a)) == set(paths_of(lite, b))
    pg.close()
    lite.close()


@pytest.mark.parametrize(
    ("text", "document", "tokens"),
    [
        ("foo.bar/baz-qux", "foo bar baz qux", 4),
        ("don't stop", "don t stop", 3),
        ("我们去北京", "我 们 去 北 京", 5),
        ("snake_case", "snake case", 2),
        ("", "", 0),
    ],
)
def test_fts_document_tokenizes_like_unicode61(text: str, document: str, tokens: int) -> None:
    assert fts_document(text) == (document, tokens)


def test_or_phrases_parses_the_fts5_expression() -> None:
    assert or_phrases('"a" OR "b c" OR "say ""hi"""') == ["a", "b c", 'say "hi"']


def pg_agent(workspace: Path, url: str, **search: Any) -> Any:
    """An agent whose built-in index is on PostgreSQL at `url` (memorySearch.store.driver)."""
    return agent_for(workspace, {"store": {"driver": "postgres", "url": url}, **search})


def test_memory_index_syncs_and_searches_on_the_pg_store(pg_url: str, workspace: Path) -> None:
    write(workspace / "MEMORY.md", "# Long-term\nThe deploy target is fly.io in region ams.\n")
    write(workspace / "memory" / "pets.md", "# Pets\nAlice adopted a grey cat named Miso.\n")
    write(workspace / "memory" / "trip.md", "# Trip\n我们明天去北京开会。\n")
    idx = MemoryIndex(pg_agent(workspace, pg_url).index_settings(), selection(HashingEmbedder()))
    assert isinstance(idx.store, PgStore)
    assert idx.store.workspace == workspace_key(workspace)
    report = idx.sync()
    assert (report.files_changed, report.vectors_pending) == (3, 0)
    out = idx.search("what is the deploy target?")
    assert out.mode == "hybrid" and out.results[0].path == "MEMORY.md"
    assert (idx.search("北京", mode="keyword")).results[0].path == "memory/trip.md"
    status = idx.status()
    assert (status.files, status.chunks, status.vector.search_engine) == (3, 3, "pgvector-exact")
    assert (status.vector.engine, status.vector.binding) == ("pgvector", "psycopg")
    assert status.db_path.startswith("postgres host=") and "agent=main" in status.db_path
    assert status.fts.engine == "tsvector"
    assert (idx.check()).ok
    (workspace / "memory" / "pets.md").unlink()
    write(workspace / "memory" / "trip.md", "# Trip\nThe trip moved to Lisbon.\n")
    report = idx.sync()
    assert (report.files_changed, report.files_removed) == (1, 1)
    assert [r.path for r in (idx.search("Lisbon")).results] == ["memory/trip.md"]
    assert (idx.search("Miso cat", mode="keyword")).results == []
    idx.close()


def test_deep_check_finds_and_recounts_wrong_tenant_totals(
    pg_server: PgServer, pg_db: str, pg_url: str, workspace: Path
) -> None:
    write(workspace / "MEMORY.md", "# Long-term\nThe deploy target is fly.io.\n")
    idx = MemoryIndex(pg_agent(workspace, pg_url).index_settings(), selection(HashingEmbedder()))
    idx.sync()
    assert isinstance(idx.store, PgStore)
    tenant = idx.store.tenant_id
    # BM25's average length and the exact/HNSW choice read these totals: make them lie
    pg_server.execute(
        f"update memoryd.tenant_stats set chunk_count = 7, token_total = 0 where tenant_id = {tenant}",
        pg_db,
    )
    problem = idx.store.verify(deep=True)
    assert problem is not None and "records 7 chunks" in problem
    check = idx.check()
    assert (check.ok, check.problem, check.moved_to) == (False, problem, None)
    assert idx.store.verify(deep=True) is None
    assert (idx.search("deploy target", mode="keyword")).results[0].path == "MEMORY.md"
    idx.close()


def test_a_changed_chunking_rebuilds_the_tenant_through_memory_index(
    pg_server: PgServer, pg_db: str, pg_url: str, workspace: Path
) -> None:
    write(
        workspace / "MEMORY.md",
        "# Long-term\n" + "\n".join(f"fact {i} about otters" for i in range(60)),
    )
    first = MemoryIndex(pg_agent(workspace, pg_url).index_settings(), selection(HashingEmbedder()))
    first.sync()
    assert isinstance(first.store, PgStore)
    old_tenant, old_chunks = first.store.tenant_id, first.status().chunks
    first.close()
    agent = pg_agent(workspace, pg_url, chunking={"tokens": 64, "overlap": 8})
    idx = MemoryIndex(agent.index_settings(), selection(HashingEmbedder()))
    assert idx.reindex_reason() is not None
    report = idx.sync()
    assert report.reindexed and report.vectors_pending == 0
    assert isinstance(idx.store, PgStore) and idx.store.tenant_id != old_tenant
    assert idx.status().chunks > old_chunks and idx.reindex_reason() is None
    assert (idx.search("otters")).results
    states = dict(pg_server.execute("select id, state from memoryd.tenants", pg_db))
    assert states[idx.store.tenant_id] == "active" and old_tenant not in states
    idx.close()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("postgresql://memoryd:hunter2@db/memoryd", "must not contain a password"),
        ("postgresql://memoryd@db/memoryd?password=hunter2", "must not contain a password"),
        ("host=db user=memoryd password=hunter2", "must be a libpq URL"),
        ("mysql://memoryd@db/memoryd", "must be a libpq URL"),
    ],
)
def test_store_url_with_a_password_or_not_a_libpq_url_is_refused(
    workspace: Path, url: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as err:
        pg_agent(workspace, url)
    assert "memorySearch.store.url" in str(err.value) and problem in str(err.value)
    assert "hunter2" not in str(err.value)


@pytest.mark.parametrize(
    ("store", "problem"),
    [
        ({"driver": "postgres"}, "store.url is not set"),
        ({"driver": "postgress", "url": "postgresql://db/x"}, "memorySearch.store.driver"),
        ({"driver": "postgres", "url": "postgresql://u:${MEMORYD_UNSET_PW}@db/x"}, "is not set"),
    ],
)
def test_a_bad_driver_or_missing_url_is_a_config_error(
    workspace: Path, store: dict[str, str], problem: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(problem)):
        agent_for(workspace, {"store": store}).index_settings()


def test_env_references_fill_the_url_and_the_password_stays_out_of_sight(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYD_TEST_PW", "p@ss/wörd")
    monkeypatch.setenv("MEMORYD_TEST_URL", "postgresql://u@h:6543/db")
    settings = pg_agent(workspace, "postgresql://u:${MEMORYD_TEST_PW}@db/x").index_settings()
    assert settings.store_url == "postgresql://u:p%40ss%2Fw%C3%B6rd@db/x"
    assert "p@ss" not in repr(settings) and "p%40ss" not in repr(settings)
    assert describe_url(settings.store_url) == "host=db dbname=x user=u"
    whole = pg_agent(workspace, "${MEMORYD_TEST_URL}").index_settings()
    assert whole.store_url == "postgresql://u@h:6543/db"


def test_an_unreachable_server_answers_store_unavailable_through_the_service(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(workspace / "MEMORY.md", "# M\n\ntea\n")
    monkeypatch.setenv("MEMORYD_TEST_PW", "s3cret-pw")
    url = f"postgresql://memoryd:${{MEMORYD_TEST_PW}}@/memoryd?host={tmp_path}&connect_timeout=2"
    cfg = validate_config(
        {"agents": {"defaults": {"memorySearch": {"store": {"driver": "postgres", "url": url}}}}}
    )
    svc = MemoryService(cfg, workspace=workspace)
    out = svc.memory_search("tea")
    assert out["disabled"] and out["code"] == "store_unavailable", out
    assert "PostgreSQL store unreachable" in out["error"] and "s3cret" not in out["error"]
    # reading a memory file opens no index: the files are the source of truth, still readable
    got = svc.memory_get("MEMORY.md")
    assert got == {"path": "MEMORY.md", "text": "# M\n\ntea\n"}
    svc.close()


def test_tenants_are_separate_by_agent_and_workspace(pg_url: str) -> None:
    stores = [
        PgStore(pg_url, agent_id=a, workspace=w)
        for a, w in [("a", "/w1"), ("b", "/w1"), ("a", "/w2")]
    ]
    for i, s in enumerate(stores):
        s.replace_file("MEMORY.md", "/x", "memory", "h", 1.0, 1, [chunk(1, f"shared word{i}")])
    assert len({s.tenant_id for s in stores}) == 3
    for i, s in enumerate(stores):
        hits = s.keyword_search(match("shared"), 10)
        assert len(hits) == 1 and s.chunk_rows([hits[0][0]])[hits[0][0]].text == f"shared word{i}"
        assert s.counts()["chunks"] == 1
    # the same (agent, workspace) opens the same tenant
    again = PgStore(pg_url, agent_id="a", workspace="/w1", migrate=False)
    assert again.tenant_id == stores[0].tenant_id
    for s in [*stores, again]:
        s.close()


@pytest.fixture
def two_hosts(pg_server: PgServer, pg_db: str) -> Iterator[dict[str, str]]:
    """Roles host_a (agent a) and host_b (agent b), granted by the owner as docs/postgres.md says."""
    suffix = pg_db[-6:]
    roles = {f"host_a_{suffix}": "a", f"host_b_{suffix}": "b"}
    for role, agent in roles.items():
        pg_server.execute(f"create role {role} login")
        pg_server.execute(f"select memoryd.allow_host('{role}', '{agent}')", pg_db)
    yield {agent: pg_server.url(pg_db, user=role) for role, agent in roles.items()}
    pg_server.drop_database(pg_db)
    for role in roles:
        pg_server.execute(f"drop role if exists {role}")


def test_row_security_keeps_each_host_role_to_its_agents(two_hosts: dict[str, str]) -> None:
    a = PgStore(two_hosts["a"], agent_id="a", workspace="/w", migrate=False)
    b = PgStore(two_hosts["b"], agent_id="b", workspace="/w", migrate=False)
    for s, word in ((a, "alpha"), (b, "beta")):
        s.replace_file(
            "MEMORY.md", "/w/MEMORY.md", "memory", "h", 1.0, 1, [chunk(1, f"{word} secret")]
        )
        s.write_vectors([(s.pending_chunks(1)[0][0], np.ones(4, np.float32))])
        s.cache_put(KEY, [("x", np.ones(4, np.float32))], 10)
    with pytest.raises(IndexError_, match="may not use memoryd agent b"):
        PgStore(two_hosts["a"], agent_id="b", workspace="/w", migrate=False)
    # host_a's own store answers; b's tenant is out of reach by any path
    assert len(a.keyword_search(match("secret"), 10)) == 1
    a_tenant, b_tenant = a.tenant_id, b.tenant_id
    with psycopg.connect(two_hosts["a"], autocommit=True) as conn:
        for table in (
            "chunks",
            "files",
            "chunk_vectors",
            "embedding_cache",
            "meta",
            "tenant_stats",
        ):
            tenants = conn.execute(f"select distinct tenant_id from memoryd.{table}").fetchall()
            assert set(tenants) <= {(a_tenant,)}, table
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # only through functions
            conn.execute("select count(*) from memoryd.tenants")
        for sql in (
            f"select * from memoryd.keyword_hits({b_tenant}, array['secret'], 10)",
            f"select * from memoryd.substring_hits({b_tenant}, array['secret'], 10)",
            f"select * from memoryd.vector_hits({b_tenant}, '[1,1,1,1]', 10, 0)",
            f"select memoryd.begin_rebuild({b_tenant})",
            f"select memoryd.retire_tenant({b_tenant})",
            f"select memoryd.attach_tenant({b_tenant})",
            f"select memoryd.ensure_tenant_vector_index({b_tenant}, 4)",
            "select memoryd.drop_retired_partitions()",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # WITH CHECK: no writes into b
            conn.execute(
                "insert into memoryd.meta (tenant_id, key, value) values (%s, 'k', 'v')",
                (b_tenant,),
            )
        assert (
            conn.execute(
                "update memoryd.chunks set text = 'x' where tenant_id = %s", (b_tenant,)
            ).rowcount
            == 0
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select memoryd.allow_host(current_user, 'b')")
    assert b.keyword_search(match("beta"), 10) and b.counts()["chunks"] == 1
    a.close()
    b.close()


def test_a_role_that_cannot_migrate_gets_a_clear_error(pg_server: PgServer) -> None:
    name = f"empty_{uuid.uuid4().hex[:8]}"
    pg_server.execute(f"create database {name}")
    pg_server.execute(f"create role {name}_r login")
    pg_server.execute(f"revoke create on database {name} from public")
    try:
        with pytest.raises(IndexError_, match="run the migrations once as the database owner"):
            PgStore(pg_server.url(name, user=f"{name}_r"), agent_id="a", workspace="/w")
    finally:
        pg_server.drop_database(name)
        pg_server.execute(f"drop role if exists {name}_r")


def test_migrations_are_numbered_recorded_and_applied_once(pg_server: PgServer) -> None:
    name = pg_server.create_database()
    try:
        with psycopg.connect(pg_server.url(name), autocommit=True) as conn:
            assert migrate(conn, name) == []  # the template is up to date: no DDL on open
            rows = conn.execute("select version, name from memoryd.schema_version order by 1")
            recorded = rows.fetchall()
            assert recorded == [(v, name) for v, name, _ in MIGRATIONS]
            assert recorded[-1][0] == LATEST
            assert all(name.startswith(f"m{v:03d}_") for v, name in recorded)
    finally:
        pg_server.drop_database(name)


@pytest.mark.parametrize("migrate_on_open", [True, False])
def test_a_schema_a_development_build_left_part_way_is_refused(
    pg_server: PgServer, migrate_on_open: bool
) -> None:
    name = f"dev_{uuid.uuid4().hex[:8]}"
    pg_server.execute(f"create database {name}")
    try:
        with psycopg.connect(pg_server.url(name), autocommit=True) as conn:
            conn.execute("create schema memoryd")
            conn.execute(
                "create table memoryd.schema_version (version integer primary key, "
                "name text not null, applied_at timestamptz not null default now())"
            )
            conn.execute(
                "insert into memoryd.schema_version values (1, 'm001_base'), (2, 'm002_access')"
            )
        with pytest.raises(IndexError_) as err:
            PgStore(pg_server.url(name), agent_id="a", workspace="/w", migrate=migrate_on_open)
        assert "is at version 2, left by a development build" in str(err.value)
        assert "drop schema memoryd cascade" in str(err.value) and "\n" not in str(err.value)
    finally:
        pg_server.drop_database(name)


def test_unreachable_server_is_a_clear_error_that_hides_the_password(tmp_path: Path) -> None:
    url = f"postgresql://memoryd:s3cret-pw@/memoryd?host={tmp_path}&connect_timeout=2"
    with pytest.raises(IndexError_) as err:
        PgStore(url, agent_id="a", workspace="/w")
    assert "PostgreSQL store unreachable" in str(err.value) and "s3cret" not in str(err.value)
    assert err.value.code == "store_unavailable"
    assert "s3cret" not in describe_url(url) and "dbname=memoryd" in describe_url(url)


def test_a_dropped_connection_is_reopened_for_the_next_read(
    pg_server: PgServer, open_store: Callable[..., PgStore]
) -> None:
    s = open_store()
    s.replace_file("a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(1, "alpha")])
    pg_server.execute(
        "select pg_terminate_backend(pid) from pg_stat_activity "
        "where application_name = 'memoryd' and pid <> pg_backend_pid()"
    )
    assert len(s.keyword_search(match("alpha"), 10)) == 1
    s.replace_file("b.md", "/w/b.md", "memory", "h", 1.0, 1, [chunk(1, "beta")])
    assert s.counts()["files"] == 2
    s.close()


def test_searches_see_only_committed_state_during_a_transaction(
    open_store: Callable[..., PgStore],
) -> None:
    s = open_store()
    s.replace_file("a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(1, "old words")])
    inside, seen = threading.Event(), threading.Event()

    def sync() -> None:
        with s.transaction():
            s.replace_file("a.md", "/w/a.md", "memory", "h2", 2.0, 1, [chunk(1, "new words")])
            assert s.files()["a.md"][0] == "h2"  # the writing thread sees its own writes
            inside.set()
            seen.wait(30)

    t = threading.Thread(target=sync)
    t.start()
    assert inside.wait(30)
    assert len(s.keyword_search(match("old"), 10)) == 1 and not s.keyword_search(match("new"), 10)
    assert s.files()["a.md"][0] == "h"
    seen.set()
    t.join(30)
    assert not s.keyword_search(match("old"), 10) and len(s.keyword_search(match("new"), 10)) == 1


def test_a_failed_transaction_leaves_the_previous_state(open_store: Callable[..., PgStore]) -> None:
    s = open_store()
    s.replace_file("a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(1, "old words")])
    with pytest.raises(RuntimeError), s.transaction():
        s.replace_file("a.md", "/w/a.md", "memory", "h2", 2.0, 1, [chunk(1, "new words")])
        s.remove_file("a.md")
        raise RuntimeError("the sync died")
    assert s.files()["a.md"][0] == "h" and len(s.keyword_search(match("old"), 10)) == 1
    assert s.counts()["chunks"] == 1


def test_rebuild_fills_a_new_tenant_and_publishes_it_atomically(
    open_store: Callable[..., PgStore],
) -> None:
    s = open_store()
    other = open_store(migrate=False)  # another process
    s.replace_file("a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(1, "old words")])
    s.cache_put(KEY, [("x", np.ones(4, np.float32))], 10)
    new = s.open_scratch()
    assert new.cache_get(KEY, ["x"]).keys() == {"x"}  # the embedding cache carries over
    new.replace_file("a.md", "/w/a.md", "memory", "h2", 2.0, 1, [chunk(1, "new words")])
    assert other.keyword_search(match("old"), 10) and not other.keyword_search(match("new"), 10)
    s.publish(new)
    assert len(other.keyword_search(match("new"), 10)) == 1  # follows the published tenant
    assert other.tenant_id == new.tenant_id and not other.keyword_search(match("old"), 10)
    assert other.counts()["chunks"] == 1
    for x in (s, other, new):
        x.close()


def test_a_dead_rebuild_is_dropped_by_the_next_one(
    open_store: Callable[..., PgStore], pg_server: PgServer, pg_db: str, pg_url: str
) -> None:
    s = open_store()
    dead = s.open_scratch()
    dead.replace_file("a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(1, "partial")])
    live = s.open_scratch()  # dead's builder is alive: both builds stay
    dead_id = dead.tenant_id
    dead.close()  # its process died: the lock is gone once the server has ended its backend
    with psycopg.connect(pg_url, autocommit=True) as conn:
        key = conn.execute("select memoryd.tenant_lock(%s)", (dead_id,)).fetchone()[0]
        while not conn.execute("select pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
            time.sleep(0.05)
        conn.execute("select pg_advisory_unlock(%s)", (key,))
    again = s.open_scratch()
    states = pg_server.execute("select id, state from memoryd.tenants order by id", pg_db)
    assert dead_id not in {r[0] for r in states}
    assert {live.tenant_id, again.tenant_id} <= {r[0] for r in states if r[1] == "building"}
    live.discard()
    again.discard()
    s.close()


def test_hnsw_answers_above_the_exact_threshold(open_store: Callable[..., PgStore]) -> None:
    s = open_store(exact_max_vectors=20)
    s.replace_file(
        "a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(i, f"t{i}") for i in range(1, 81)]
    )
    rng = np.random.default_rng(3)
    vecs = {cid: rng.standard_normal(16).astype(np.float32) for cid, _, _ in s.pending_chunks(100)}
    s.write_vectors(list(vecs.items())[:10])
    assert s.search_engine == "pgvector-exact"
    s.write_vectors(list(vecs.items())[10:])
    assert s.search_engine == "pgvector-hnsw"
    recall = []
    for target in list(vecs)[:10]:
        approx = s.vector_search(vecs[target], 5)
        assert approx[0][0] == target
        exact = sorted(
            vecs, key=lambda c: -float(vecs[c] @ vecs[target] / np.linalg.norm(vecs[c]))
        )[:5]
        recall.append(len({c for c, _ in approx} & set(exact)) / 5)
    assert np.mean(recall) >= 0.8
    s.close()


def test_hnsw_is_built_once_the_pending_backlog_is_short(
    open_store: Callable[..., PgStore],
) -> None:
    """A sync that takes a tenant past the limit keeps the exact scan while most of its vectors
    are still to come, and builds the index over all of them at the end."""
    s = open_store(exact_max_vectors=20)
    n = HNSW_BUILD_MAX_PENDING + 200
    s.replace_file(
        "a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(i, f"t{i}") for i in range(1, n + 1)]
    )
    rng = np.random.default_rng(5)
    vecs = {cid: rng.standard_normal(8).astype(np.float32) for cid, _, _ in s.pending_chunks(n)}
    items = list(vecs.items())
    s.write_vectors(items[:100])  # past the limit, with more than the backlog still pending
    assert s.search_engine == "pgvector-exact"
    target = items[7][0]
    assert s.vector_search(vecs[target], 3)[0][0] == target
    s.write_vectors(items[100:300])  # the backlog is now short: the index is built
    assert s.pending_count() <= HNSW_BUILD_MAX_PENDING
    assert s.search_engine == "pgvector-hnsw"
    s.write_vectors(items[300:])
    assert s.search_engine == "pgvector-hnsw"
    assert s.vector_search(vecs[target], 3)[0][0] == target


def test_zero_vectors_and_nul_characters_are_stored_safely(
    open_store: Callable[..., PgStore],
) -> None:
    s = open_store()
    s.replace_file(
        "a.md", "/w/a.md", "memory", "h", 1.0, 1, [chunk(1, "nul\x00here"), chunk(2, "b")]
    )
    ids = [cid for cid, _, _ in s.pending_chunks(10)]
    s.write_vectors([(ids[0], np.zeros(4, np.float32)), (ids[1], np.ones(4, np.float32))])
    assert s.pending_count() == 0
    assert [c for c, _ in s.vector_search(np.ones(4, np.float32), 5)] == [ids[1]]
    assert s.chunk_rows([ids[0]])[ids[0]].text == "nul\ufffdhere"
    s.close()
