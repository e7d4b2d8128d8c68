"""Many memoryd processes on one PostgreSQL: one writer per tenant, nothing lost or duplicated,
a worker killed mid-sync leaves the previous complete state and another worker takes over.

The workers are real processes (`python tests/pg_support.py sync|search …`) on a real server.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.builtin_index._pg_store import PgStore
from memoryd.core.chunking import chunk_lines
from memoryd.core.text import fts_match_expression, query_terms
from pg_support import (
    PgServer,
    fresh_database,
    kill_worker,
    read_event,
    shared_server,
    spawn_worker,
)

pytestmark = pytest.mark.timeout(300)
FILES = 24


@pytest.fixture(scope="session")
def pg_server() -> PgServer:
    return shared_server()


@pytest.fixture
def pg_db(pg_server: PgServer) -> Iterator[str]:
    yield from fresh_database(pg_server)


@pytest.fixture
def pg_url(pg_server: PgServer, pg_db: str) -> str:
    """A superuser URL of a fresh database with memoryd's schema."""
    return pg_server.url(pg_db)


def make_workspace(root: Path, version: str, files: int = FILES) -> Path:
    for i in range(files):
        lines = [f"# note {i}"] + [
            f"{version} line {j} of note{i} about topic{i % 5} and more words" for j in range(30)
        ]
        path = root / "memory" / f"n{i:02d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def expected_chunks(root: Path) -> int:
    return sum(
        len(chunk_lines(p.read_text(encoding="utf-8"), tokens=64, overlap=0))
        for p in root.rglob("*.md")
    )


def hits(store: PgStore, query: str) -> set[str]:
    found = store.keyword_search(fts_match_expression(query_terms(query)) or "", 500)
    rows = store.chunk_rows([h[0] for h in found])
    return {rows[h[0]].path for h in found}


def assert_complete(store: PgStore, root: Path, version: str) -> None:
    """Every file's chunks exactly once, all of `version`, every vector written."""
    counts = store.counts()
    assert counts["files"] == FILES
    assert counts["chunks"] == expected_chunks(root)
    assert counts["pending_vectors"] == 0
    ids = store.chunk_ids_for_paths(sorted(store.paths()), limit_per_path=1000)
    rows = store.chunk_rows(ids)
    keys = [(r.path, r.start_line) for r in rows.values()]
    assert len(keys) == len(set(keys)) == counts["chunks"]  # no duplicated chunk
    assert all(version in r.text for r in rows.values() if r.start_line > 1)


def sync(url: str, root: Path, *extra: str) -> list[str]:
    return ["sync", "--url", url, "--agent", "main", "--workspace", str(root), *extra]


def test_two_workers_sync_and_search_one_database_concurrently(pg_url: str, tmp_path: Path) -> None:
    roots = {a: make_workspace(tmp_path / a, "v1") for a in ("alice", "bob")}
    stores = {a: PgStore(pg_url, agent_id=a, workspace=str(r)) for a, r in roots.items()}
    procs = []
    for agent in ("alice", "bob"):
        args = ["--url", pg_url, "--agent", agent, "--workspace", str(roots[agent])]
        # two writers per tenant (they take turns), one searcher per tenant meanwhile
        procs += [spawn_worker("sync", *args, "--wait") for _ in range(2)]
        procs.append(
            spawn_worker("search", *args, "--rounds", "20", "--queries", "topic1,note3,v1 words")
        )
    events = [
        [read_event(p, 180) for _ in range(2 if i % 3 != 2 else 60)] for i, p in enumerate(procs)
    ]
    for p in procs:
        assert p.wait(60) == 0
        kill_worker(p)
    for i in range(0, len(procs), 3):
        writes = sorted(e[-1]["written"] for e in events[i : i + 2])
        assert writes == [0, FILES]  # one worker indexed every file, the other found it done
        for e in events[i + 2]:
            assert e["event"] == "hits"
    for agent, store in stores.items():
        assert_complete(store, roots[agent], "v1")
        assert hits(store, "note3") == {"memory/n03.md"}
        store.close()


def test_a_worker_that_finds_the_tenant_locked_does_not_wait(pg_url: str, tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", "v1")
    first = spawn_worker(*sync(pg_url, root, "--pause-after", "1"))
    try:
        assert read_event(first)["event"] == "locked"
        assert read_event(first)["event"] == "paused"
        second = spawn_worker(*sync(pg_url, root))
        assert read_event(second) == {"event": "busy"}
        assert second.wait(30) == 0
        kill_worker(second)
    finally:
        kill_worker(first)


def test_a_worker_killed_mid_sync_leaves_the_previous_state_and_another_takes_over(
    pg_url: str, tmp_path: Path
) -> None:
    root = make_workspace(tmp_path / "ws", "v1")
    store = PgStore(pg_url, agent_id="main", workspace=str(root))
    done = spawn_worker(*sync(pg_url, root))
    assert read_event(done)["event"] == "locked" and read_event(done)["event"] == "synced"
    kill_worker(done)
    assert_complete(store, root, "v1")

    make_workspace(root, "v2")  # every file changed
    dying = spawn_worker(*sync(pg_url, root, "--pause-after", str(FILES // 2)))
    successor = None
    try:
        assert read_event(dying)["event"] == "locked"
        assert read_event(dying) == {"event": "paused", "written": FILES // 2}
        # half the files are rewritten inside the open transaction: nobody else sees them
        # (v1 and v2 files chunk alike, so the v1 state has the same chunk count)
        assert_complete(store, root, "v1")
        assert len(hits(store, "v1")) == FILES and hits(store, "v2") == set()
        successor = spawn_worker(*sync(pg_url, root, "--wait"))
        time.sleep(1.5)  # it waits for the lock: still nothing of v2 visible
        assert hits(store, "v2") == set()
        kill_worker(dying)  # SIGKILL: PostgreSQL rolls back and frees the writer lock
        assert read_event(successor, 120)["event"] == "locked"
        final = read_event(successor, 180)
        assert final["event"] == "synced" and final["written"] == FILES
    finally:
        kill_worker(dying)
        if successor is not None:
            kill_worker(successor)
    assert_complete(store, root, "v2")
    assert hits(store, "v1") == set() and len(hits(store, "v2")) == FILES
    store.close()
