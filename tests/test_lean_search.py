"""A one-off search without numpy (`MemoryIndex.lean`): same answers as the numpy path.

A one-off command (the CLI) on a SQLite index with sqlite-vec keeps the query's vector as the
engine's float32 buffer, runs the KNN and the background cosines in SQL and reads the reference
background stored with the index, so the process never imports numpy (~80 ms of a cold hybrid
search). These tests run the real local model on real files and compare that path with the
numpy path result by result, including the ways the stored reference can be missing, stale or
damaged, and check from a separate process that a CLI search really leaves numpy unloaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memoryd.builtin_index import MemoryIndex
from memoryd.builtin_index import _stats as index_mod
from memoryd.builtin_index._search import Searcher
from memoryd.builtin_index._stats import CorpusStatistics
from memoryd.builtin_index._store import Store
from memoryd.config import resolve_agent, validate_config
from memoryd.core.engine import SearchOutput
from memoryd.embeddings.selection import select_provider

NOTES = {
    "MEMORY.md": "# Memory\n- Production deploys go to fly.io, region ams.\n- Postgres is 16.4.\n",
    "memory/2026-11-25.md": "# 2026-11-25\n- Rotated the webhook secret; the old one stops on Dec 2.\n",
    "memory/2026-11-26.md": "# 2026-11-26\n- Alice adopted a grey kitten named Miso.\n",
    "memory/2026-11-27.md": "# 2026-11-27\n- Decided: pgbouncer timeout stays at 30s.\n",
    "memory/trip.md": "# 出張\n我们决定把数据中心迁移到上海。\n",
    "memory/tokyo.md": "# 東京\n来週の会議は東京オフィスで行います。\n",
}
QUERIES = [
    "when does the old webhook secret stop working",
    "postgres version",
    "who adopted a kitten",
    "pgbouncer timeout",
    "数据中心迁移",
    "where is next week's meeting",
    "xyzzy",
    "banana bread recipe",
]


def _workspace(root: Path) -> Path:
    for rel, text in NOTES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _default_index(ws: Path) -> MemoryIndex:
    cfg = validate_config({"agents": {"defaults": {"workspace": str(ws)}}})
    resolved = resolve_agent(cfg)
    return MemoryIndex(
        resolved.index_settings(), select_provider(resolved.memory_search, resolved.models)
    )


@pytest.fixture
def idx(workspace: Path) -> Iterator[MemoryIndex]:
    index = _default_index(_workspace(workspace))
    index.sync()
    try:
        yield index
    finally:
        index.close()


def _answer(out: SearchOutput) -> list[tuple[str, int, int, str]]:
    return [(r.path, r.start_line, r.end_line, r.snippet) for r in out.results]


class _Paths:
    """Counts which way `MemoryIndex` computed a search's vector side."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.scans = self.in_memory = self.numpy_backgrounds = 0
        for name, attr in (
            ("_scan_search", "scans"),
            ("_numpy_search", "in_memory"),
        ):
            real = getattr(Store, name)

            def spy(store: Store, *a: Any, _real: Any = real, _attr: str = attr) -> Any:
                setattr(self, _attr, getattr(self, _attr) + 1)
                return _real(store, *a)

            monkeypatch.setattr(Store, name, spy)
        real_sample = CorpusStatistics.background_sample

        def sample(store: Store) -> Any:
            self.numpy_backgrounds += 1
            return real_sample(store)

        monkeypatch.setattr(CorpusStatistics, "background_sample", staticmethod(sample))


def _one_off(idx: MemoryIndex, query: str, *, lean: bool, mp: pytest.MonkeyPatch) -> Any:
    """A search as a one-off process runs it (`lean`) or as a long-lived one does."""
    mp.setattr(idx, "one_off", lean)
    mp.setattr(idx.provider, "one_off", True)  # a one-off process's query engine either way
    idx.stats.cache = None  # as in a new process: nothing computed yet
    idx.searcher._query_cache.clear()
    return idx.search(query)


def test_a_one_off_search_answers_as_the_numpy_path_does(
    idx: MemoryIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = _Paths(monkeypatch)
    answered = 0
    for query in QUERIES:
        lean = _one_off(idx, query, lean=True, mp=monkeypatch)
        assert (paths.scans, paths.in_memory, paths.numpy_backgrounds) == (1, 0, 0), query
        full = _one_off(idx, query, lean=False, mp=monkeypatch)
        assert (paths.scans, paths.in_memory, paths.numpy_backgrounds) == (1, 1, 1), query
        paths.scans = paths.in_memory = paths.numpy_backgrounds = 0
        assert lean.mode == full.mode == "hybrid"
        assert _answer(lean) == _answer(full), query
        assert [r.score for r in lean.results] == pytest.approx(
            [r.score for r in full.results], abs=1e-5
        )
        answered += bool(full.results)
    assert 4 <= answered < len(QUERIES)  # real answers and real abstentions both compared


def test_the_sql_knn_ranks_as_the_in_memory_one_ties_and_zero_vectors_included(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "index.sqlite")
    try:
        assert store.cosine_sql
        chunks = [(i, i, f"h{i}", f"chunk {i}", 2) for i in range(1, 9)]
        store.replace_file("a.md", "/w/a.md", "memory", "f", 1.0, 10, chunks)
        rng = np.random.default_rng(7)
        base = rng.standard_normal((6, 16)).astype(np.float32)
        base /= np.linalg.norm(base, axis=1, keepdims=True)
        vectors = [*base, base[2], np.zeros(16, np.float32)]  # a tie (rows 3 and 7), a zero row
        ids = [cid for cid, *_ in store.pending_chunks(100)]
        store.write_vectors(list(zip(ids, vectors, strict=True)))
        other = rng.standard_normal(16).astype(np.float32)
        for raw in (base[2], other / np.linalg.norm(other)):  # queries come normalized
            query = store.query_as_stored(raw)  # as the Searcher hands them over
            assert isinstance(query, np.ndarray)
            buf = array("f", query.tobytes())
            for k in (3, 8, 20):
                lean, full = store._scan_search(buf, k), store._numpy_search(query, k)
                assert [cid for cid, _ in lean] == [cid for cid, _ in full]
                assert [s for _, s in lean] == pytest.approx([s for _, s in full], abs=1e-6)
    finally:
        store.close()


def test_a_sync_stores_the_reference_background_a_lean_search_reads(
    idx: MemoryIndex, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = idx.store
    assert isinstance(store, Store)
    keys = store.sample_keys(index_mod.BACKGROUND_SAMPLE)
    stored = idx.stats.stored_reference(store, keys)
    assert stored  # written by the sync, for this very sample
    # the numpy path computes the same statistics
    _one_off(idx, "postgres version", lean=False, mp=monkeypatch)
    assert idx.stats.cache is not None and idx.stats.cache.reference is not None
    assert stored.keys() == idx.stats.cache.reference.keys()
    for pair, (mean, sd) in idx.stats.cache.reference.items():
        assert stored[pair] == pytest.approx((mean, sd), abs=1e-9)
    # a new note changes the sample: the next sync stores the reference of the new one
    (workspace / "memory" / "2026-11-29.md").write_text("# 2026-11-29\n- Grafana alert at 85%.\n")
    idx.sync()
    new_keys = store.sample_keys(index_mod.BACKGROUND_SAMPLE)
    assert new_keys != keys
    assert idx.stats.stored_reference(store, keys) is None
    assert idx.stats.stored_reference(store, new_keys)


@pytest.mark.parametrize("held", [None, "{not json", '{"fingerprint": "stale", "pairs": []}'])
def test_without_a_usable_stored_reference_a_one_off_search_computes_and_stores_it(
    idx: MemoryIndex, monkeypatch: pytest.MonkeyPatch, held: str | None
) -> None:
    store = idx.store
    assert isinstance(store, Store)
    full = _one_off(idx, "who adopted a kitten", lean=False, mp=monkeypatch)
    if held is None:
        store.delete_meta(index_mod.REFERENCE_META_KEY)
    else:
        store.set_meta({index_mod.REFERENCE_META_KEY: held})
    paths = _Paths(monkeypatch)
    first = _one_off(idx, "who adopted a kitten", lean=True, mp=monkeypatch)
    assert paths.numpy_backgrounds == 1  # computed the numpy way, once
    assert _answer(first) == _answer(full) and first.results
    assert idx.stats.stored_reference(store, store.sample_keys(index_mod.BACKGROUND_SAMPLE))
    again = _one_off(idx, "who adopted a kitten", lean=True, mp=monkeypatch)
    assert paths.numpy_backgrounds == 1 and paths.scans == 2  # the next one is lean throughout
    assert _answer(again) == _answer(full)


def test_a_long_lived_process_keeps_the_numpy_path(
    idx: MemoryIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = _Paths(monkeypatch)
    out = idx.search("postgres version")  # serve, MCP, the Python API: not one-off
    assert out.mode == "hybrid" and out.results
    assert (paths.scans, paths.in_memory) == (0, 1)


def test_status_names_the_engine_this_processs_searches_use(
    idx: MemoryIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert idx.status().vector.search_engine == "numpy"
    monkeypatch.setattr(idx, "one_off", True)
    monkeypatch.setattr(idx.provider, "one_off", True)
    assert idx.status().vector.search_engine == "sqlite-vec-scan"


def _search_in_own_process(ws: Path, query: str, env: dict[str, str]) -> tuple[Any, bool]:
    """`memoryd search --json` in a new interpreter: its answer, and whether numpy ran."""
    probe = (
        "import sys\n"
        "from memoryd.cli import main\n"
        f"rc = main(['search', '--json', '--workspace', {str(ws)!r}, {query!r}])\n"
        "np = sys.modules.get('numpy')\n"
        "print('numpy:', np is not None and type(np).__name__ != '_LazyModule', file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last in ("numpy: True", "numpy: False"), proc.stderr
    return json.loads(proc.stdout), last == "numpy: True"


def test_a_cli_hybrid_search_never_imports_numpy(tmp_path: Path) -> None:
    """From a separate process, as a user runs it: `memoryd index`, then a search."""
    ws = _workspace(tmp_path / "ws")
    env = {**os.environ, "MEMORYD_STATE_DIR": str(tmp_path / "state")}
    env.pop("MEMORYD_CONFIG", None)
    indexed = subprocess.run(
        [sys.executable, "-m", "memoryd", "index", "--workspace", str(ws), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert indexed.returncode == 0, indexed.stderr
    out, numpy_loaded = _search_in_own_process(ws, "who adopted a kitten", env)
    assert out["mode"] == "hybrid" and out["results"][0]["path"] == "memory/2026-11-26.md"
    assert not numpy_loaded


def test_a_first_search_with_too_much_to_embed_loads_no_numpy(tmp_path: Path) -> None:
    """Nothing embedded yet and a backlog beyond the search's budget: keywords and the note,
    and nothing of the vector side loads (not even to store a reference for vectors to come)."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(150):  # more chunks than FUTILE_BACKLOG_BUDGETS budgets would embed
        (ws / "memory" / f"note-{i}.md").write_text(f"# Note {i}\n- postgres migration step {i}\n")
    env = {**os.environ, "MEMORYD_STATE_DIR": str(tmp_path / "state")}
    env.pop("MEMORYD_CONFIG", None)
    out, numpy_loaded = _search_in_own_process(ws, "postgres migration", env)
    assert out["mode"] == "keyword" and out["results"]
    assert "150 chunks still waiting for embeddings" in out["notes"][0]
    assert not numpy_loaded


def test_a_reference_is_stored_under_the_sample_it_was_computed_from(
    idx: MemoryIndex, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process may change the index between a search's statistics and their saving:
    what is saved must not then pass for the new sample's."""
    store = idx.store
    assert isinstance(store, Store)
    store.delete_meta(index_mod.REFERENCE_META_KEY)
    old_keys = store.sample_keys(index_mod.BACKGROUND_SAMPLE)
    real = Searcher.search

    def then_a_write(self: Searcher, *a: Any) -> Any:
        out = real(self, *a)
        (workspace / "memory" / "2026-11-30.md").write_text("# 2026-11-30\n- New router.\n")
        other = _default_index(workspace)  # as another process would
        other.sync(embed=True)
        other.close()
        return out

    monkeypatch.setattr(Searcher, "search", then_a_write)
    monkeypatch.setattr(CorpusStatistics, "store_reference", lambda *a: _nothing())
    _one_off(idx, "who adopted a kitten", lean=True, mp=monkeypatch)
    new_keys = store.sample_keys(index_mod.BACKGROUND_SAMPLE)
    assert new_keys != old_keys
    assert idx.stats.stored_reference(store, old_keys)  # saved, under the sample it came from
    assert idx.stats.stored_reference(store, new_keys) is None


def _nothing() -> None:
    return None


_ORDER_PROBE = """
import sys
from memoryd.builtin_index import index
from memoryd.cli import main
from memoryd.embeddings import _prefetch
seen = []
real_start, real_init = _prefetch.start, index.MemoryIndex.__init__
def start(key, *a, **k):
    seen.append("prefetch")
    return real_start(key, *a, **k)
def init(self, *a, **k):
    seen.append("index")
    return real_init(self, *a, **k)
_prefetch.start, index.MemoryIndex.__init__ = start, init
rc = main(sys.argv[1:])
print("order:", " ".join(seen), file=sys.stderr)
sys.exit(rc)
"""


def _search_in_order(tmp_path: Path, argv: list[str]) -> tuple[int, Any, list[str]]:
    """`memoryd search --json ARGV` in a new interpreter: exit status, answer, and the order in
    which the query's prefetch started and the index was built."""
    env = {**os.environ, "MEMORYD_STATE_DIR": str(tmp_path / "state"), "MEMORYD_NO_SERVER": "1"}
    env.pop("MEMORYD_CONFIG", None)
    proc = subprocess.run(
        [sys.executable, "-c", _ORDER_PROBE, "search", "--json", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    order = proc.stderr.strip().splitlines()[-1].removeprefix("order:").split()
    return proc.returncode, json.loads(proc.stdout), order


@pytest.mark.parametrize(
    ("extra", "query", "expected"),
    [
        ([], "who adopted a kitten", "index prefetch"),  # once, by the index's search
        (["--max-results", "0"], "who adopted a kitten", ""),  # invalid: nothing embedded
        ([], "   ", ""),
    ],
)
def test_a_one_off_search_starts_its_query_once_from_the_index(
    tmp_path: Path, extra: list[str], query: str, expected: str
) -> None:
    ws = _workspace(tmp_path / "ws")
    rc, out, order = _search_in_order(tmp_path, ["--workspace", str(ws), *extra, query])
    assert (rc == 0) == (expected != ""), out
    if expected:
        assert out["results"] and not out.get("disabled")
    else:
        assert out["disabled"] and out["code"] == "invalid_input"
    if expected:  # from one place only: the search of the index that answers
        assert order == expected.split(), order
    else:
        assert "prefetch" not in order, order


def test_a_qmd_agent_does_not_embed_its_query_in_memoryd(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    cfg = tmp_path / "qmd.toml"
    cfg.write_text(
        f'[memory]\nbackend = "qmd"\n[memory.qmd]\ncommand = "/bin/false"\n'
        f'[agents.defaults]\nworkspace = "{ws}"\n'
    )
    rc, out, order = _search_in_order(tmp_path, ["--config", str(cfg), "who adopted a kitten"])
    assert rc == 0 and out["backend"] == "builtin" and out["fallback"]
    # qmd failed, so the built-in index answered: only then was the query embedded here
    assert order[0] == "index", order
