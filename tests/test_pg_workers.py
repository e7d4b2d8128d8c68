"""Many memoryd processes on one PostgreSQL: one writer per tenant, nothing lost or duplicated,
a worker killed mid-sync leaves the previous complete state and another worker takes over.

The workers are real processes (`python tests/pg_support.py sync|search …`) on a real server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memoryd.builtin_index._pg_store import PgStore
from memoryd.core.chunking import chunk_lines
from memoryd.core.text import fts_match_expression, query_terms
from memoryd.paths import workspace_key
from pg_support import (
    kill_worker,
    read_event,
    spawn_worker,
)

pytestmark = pytest.mark.timeout(300)
FILES = 24


def make_workspace(root: Path, version: str, files: int = FILES) -> Path:
    for i in range(files):
        lines = [f"# note {i}"] + [
            f"{version} line {j} of note{i} about topic{i % 5} and more words" for j in range(30)
        ]
        path = root / "memory" / f"n{i:02d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def expected_chunks(root: Path, tokens: int = 64) -> int:
    return sum(
        len(chunk_lines(p.read_text(encoding="utf-8"), tokens=tokens, overlap=0))
        for p in root.rglob("*.md")
    )


def hits(store: PgStore, query: str) -> set[str]:
    found = store.keyword_search(fts_match_expression(query_terms(query)) or "", 500)
    rows = store.chunk_rows([h[0] for h in found])
    return {rows[h[0]].path for h in found}


def assert_complete(store: PgStore, root: Path, version: str, *, tokens: int | None = None) -> None:
    """Every file's chunks exactly once, all of `version`, every vector written (with
    `tokens`: chunked by MemoryIndex with that size, keyword only, so no vectors)."""
    counts = store.counts()
    assert counts["files"] == FILES
    assert counts["chunks"] == expected_chunks(root, tokens or 64)
    if tokens is None:
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


# --------------------------------------------------------------------------- the real CLI


def memoryd(config: Path, state: Path, *args: str) -> subprocess.Popen[str]:
    """`memoryd <args> --json` as its own process with its own state dir (a host of its own:
    nothing but the database is shared, so the database alone coordinates them)."""
    return subprocess.Popen(
        [sys.executable, "-m", "memoryd", *args, "--json", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MEMORYD_STATE_DIR": str(state), "MEMORYD_TEST_PW": "s3cret-pw"},
    )


def answers(procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=240)
        assert p.returncode == 0, stderr[-2000:]
        out.append(json.loads(stdout))
    return out


def test_two_memoryd_processes_index_and_search_one_agent_concurrently(
    pg_url: str, tmp_path: Path
) -> None:
    root = make_workspace(tmp_path / "ws", "v1")
    config = tmp_path / "memoryd.toml"
    config.write_text(
        f"[agents.defaults]\nworkspace = {json.dumps(str(root))}\n"
        '[agents.defaults.memorySearch]\nprovider = "none"\n'
        "[agents.defaults.memorySearch.chunking]\ntokens = 64\noverlap = 0\n"
        '[agents.defaults.memorySearch.store]\ndriver = "postgres"\n'
        # the password through the environment (the test server trusts local connections)
        f"url = {json.dumps(pg_url.replace('://postgres@', '://postgres:${MEMORYD_TEST_PW}@'))}\n"
    )
    assert "${MEMORYD_TEST_PW}" in config.read_text()
    hosts = [tmp_path / "host-a", tmp_path / "host-b"]
    store = PgStore(pg_url, agent_id="main", workspace=workspace_key(root), migrate=False)
    for version in ("v1", "v2"):
        make_workspace(root, version)  # v2: every file changed
        # both hosts index at once while both search (a one-off search syncs first, too)
        procs = [memoryd(config, h, "index") for h in hosts]
        procs += [memoryd(config, h, "search", "--max-results", "50", "topic3") for h in hosts]
        reports, searches = answers(procs[:2]), answers(procs[2:])
        # one host wrote every file, the other found them written (or a search got there first)
        assert sum(r["filesChanged"] for r in reports) <= FILES
        assert all(r["files"] == FILES for r in reports)
        for s in searches:
            assert "disabled" not in s and s["backend"] == "builtin", s
            # an answer is one committed state: every hit is of one version
            assert len({v for r in s["results"] for v in ("v1", "v2") if v in r["snippet"]}) <= 1
        assert_complete(store, root, version, tokens=64)
        assert hits(store, "topic3") == {f"memory/n{i:02d}.md" for i in range(3, FILES, 5)}
    status = answers([memoryd(config, hosts[0], "status")])[0]
    assert "postgres host=" in json.dumps(status) and "s3cret" not in json.dumps(status)
    store.close()
