"""The rerank stage, monotonic top-k and `explain` on the qmd backend, against the real qmd.

No rerank GGUF is available offline, so qmd's own reranker is proven by the flags it is sent
and by failing open when qmd cannot load the model; the remote reranker (tests/rerank_server.py)
shows the reordering itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from embedding_servers import serve
from memoryd.config import resolve_agent, validate_config
from memoryd.core.engine import SearchRequest
from memoryd.qmd_adapter import QmdManager
from qmd_support import NO_CI, OFFLINE_MODELS, require_qmd
from rerank_server import QUERIES, FakeRerank, seed, write

pytestmark = [pytest.mark.qmd]


def manager(ws: Path, home: Path, stage: dict[str, Any] | None = None, **qmd: Any) -> QmdManager:
    search: dict[str, Any] = {"provider": "none"}
    if stage is not None:
        search["query"] = {"rerank": stage}
    config = validate_config(
        {
            "memory": {"backend": "qmd", "qmd": {"models": OFFLINE_MODELS, **qmd}},
            "agents": {"defaults": {"workspace": str(ws), "memorySearch": search}},
        }
    )
    mgr = QmdManager(
        resolve_agent(config, "main").qmd_settings(),
        command=require_qmd(),
        home=home,
        shared_models_dir=None,
        env_overrides=NO_CI,
    )
    mgr.start()
    return mgr


def shown(out: Any) -> list[tuple[str, int, int, float, str]]:
    return [(r.path, r.start_line, r.end_line, r.score, r.snippet) for r in out.results]


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seed(tmp_path_factory.mktemp("qmd-rerank") / "ws")


@pytest.mark.parametrize("reranked", [False, True])
def test_the_first_k_results_of_n_are_the_results_of_k(
    ws: Path, tmp_path: Path, reranked: bool
) -> None:
    # session transcripts too: memory and session hits are interleaved, so a hit list that
    # grew with maxResults would change which source comes second
    export = tmp_path / "sessions"
    for i in range(3):
        write(
            export / f"s{i}.md",
            f"# session {i}\n\nuser: the deploy pipeline, postgres pooler and garden {i}\n",
        )
    api = FakeRerank(key=None)
    with serve(api) as url:
        cfg = {"provider": "remote", "remote": {"baseUrl": url}} if reranked else None
        sessions = {"enabled": True, "exportDir": str(export)}
        mgr = manager(ws, tmp_path / "home", cfg, sessions=sessions)
        try:
            for query in QUERIES[:3]:
                full = shown(mgr.search(SearchRequest(query, max_results=6)))
                assert len(full) == 6, query
                for k in (1, 2, 3, 5):
                    got = shown(mgr.search(SearchRequest(query, max_results=k)))
                    assert got == full[:k], (query, k)
        finally:
            mgr.close()
    assert bool(api.seen) == reranked


def test_a_remote_reranker_reorders_qmds_hits_and_explain_shows_the_query(
    ws: Path, tmp_path: Path
) -> None:
    query = "the deploy pipeline canary plan"
    plain = manager(ws, tmp_path / "home")
    api = FakeRerank(key=None)
    try:
        before = plain.search(SearchRequest(query, explain=True))
        pool = plain.search(SearchRequest(query, max_results=100))
        with serve(api) as url:
            mgr = manager(ws, tmp_path / "home", {"provider": "remote", "remote": {"baseUrl": url}})
            try:
                after = mgr.search(SearchRequest(query, explain=True))
            finally:
                mgr.close()
    finally:
        plain.close()
    assert "zebra" in after.results[0].snippet and "zebra" not in before.results[0].snippet
    # what passed without the reranker, each with the score qmd gave it there
    assert set(map(shown_key, after.results)) <= set(map(shown_key, pool.results))
    e = after.results[0].explain
    assert e is not None and e["engine"] == "qmd"
    assert any(line.startswith("lex: ") for line in e["qmd"]["query"])
    assert e["qmd"]["score"] == after.results[0].score == e["score"]
    assert e["rerank"]["provider"] == "remote" and e["rerank"]["after"] == 1
    assert e["rerank"]["before"] > 1
    assert before.results[0].explain["rerank"] is None  # type: ignore[index]


def shown_key(r: Any) -> tuple[str, int, float]:
    return (r.path, r.start_line, r.score)


def test_qmds_own_reranker_is_asked_without_no_rerank_and_fails_open(
    ws: Path, tmp_path: Path
) -> None:
    # `memory.qmd.rerank = true` turns the stage on with qmd's reranker; its model file does
    # not exist here, so qmd fails and the stage leaves qmd's `--no-rerank` order
    plain = manager(ws, tmp_path / "home")
    mgr = manager(ws, tmp_path / "home", {"provider": "none", "timeoutMs": 30_000}, rerank=True)
    sent: list[list[str]] = []
    run = mgr._run

    def recording(args: Any, timeout_ms: int, **kw: Any) -> Any:
        sent.append(list(args))
        return run(args, timeout_ms, **kw)

    mgr._run = recording  # type: ignore[method-assign]
    try:
        query = "the deploy pipeline canary plan"
        expected = shown(plain.search(query))
        out = mgr.search(SearchRequest(query, explain=True))
        assert shown(out) == expected
        searches = [a for a in sent if a and a[0] == "query"]
        assert len(searches) == 2
        assert "--no-rerank" in searches[0] and "--no-rerank" not in searches[1]
        assert searches[0][1] == searches[1][1]  # the same planned document, reranked
        note = next(n for n in out.notes if n.startswith("rerank degraded"))
        assert "No model file found" in note or "model" in note.lower(), note
        assert out.results[0].explain["rerank"]["degraded"]  # type: ignore[index]
        # off topic: nothing passes, so nothing is reranked (no second qmd call)
        sent.clear()
        assert mgr.search("quantum chromodynamics of lemurs").results == []
        assert [a for a in sent if a and a[0] == "query" and "--no-rerank" not in a] == []
    finally:
        mgr.close()
        plain.close()


def test_a_slow_qmd_reranker_is_cut_at_the_timeout(ws: Path, tmp_path: Path) -> None:
    mgr = manager(ws, tmp_path / "home", {"provider": "qmd", "timeoutMs": 200})
    try:
        out = mgr.search(SearchRequest("the deploy pipeline canary plan", explain=True))
    finally:
        mgr.close()
    rr = out.results[0].explain["rerank"]  # type: ignore[index]
    # qmd cannot load a model in 200 ms: the stage stops waiting, on its own clock
    assert rr["degraded"] and rr["seconds"] <= 0.2 + 0.2, rr
