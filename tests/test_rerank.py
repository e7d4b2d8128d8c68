"""The rerank stage and monotonic top-k on the built-in index, against a loopback rerank API.

The reranker (tests/rerank_server.py) scores documents by how often they say its favourite
word, so a test knows which order it should give; it also misbehaves on request (slow, erroring,
wrong length, bad indices, non-numbers, HTML). Everything else is real: the SQLite index, the
hashing embedder, HTTP through the embedding providers' client.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from embedding_servers import serve
from helpers import agent_for, index_for, write
from memoryd.builtin_index import MemoryIndex
from memoryd.config import RerankConfig, RerankRemoteConfig, validate_config
from memoryd.core.engine import SearchRequest
from memoryd.errors import ConfigError
from memoryd.orchestrator import MemoryService
from memoryd.rerank import RerankStage, parse_scores, read_degraded
from rerank_server import QUERIES, FakeRerank, favourite_score, seed

SECRET = "sk-rerank-secret-4242"


def remote(url: str, **kw: Any) -> dict[str, Any]:
    return {
        "provider": "remote",
        "timeoutMs": kw.pop("timeout_ms", 1500),
        "candidates": kw.pop("candidates", 24),
        "remote": {"baseUrl": url, "apiKey": SECRET, "model": "rerank-test", **kw},
    }


_OPEN: list[MemoryIndex] = []


def index(ws: Path, rerank: dict[str, Any] | None = None, **query: Any) -> MemoryIndex:
    q: dict[str, Any] = {**query}
    if rerank is not None:
        q["rerank"] = rerank
    idx = index_for(agent_for(ws, {"query": q} if q else None))
    _OPEN.append(idx)
    idx.sync()
    return idx


@pytest.fixture(autouse=True)
def _close_indexes() -> Any:
    yield
    while _OPEN:
        _OPEN.pop().close()


def shown(out: Any) -> list[tuple[str, int, int, float, str]]:
    return [(r.path, r.start_line, r.end_line, r.score, r.snippet) for r in out.results]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return seed(tmp_path / "ws")


# --------------------------------------------------------------------------- reordering


@pytest.mark.parametrize("shape", ["cohere", "voyage", "tei"])
def test_the_reranker_reorders_what_passed_and_scores_stay_calibrated(ws: Path, shape: str) -> None:
    api = FakeRerank(key=SECRET, shape=shape)  # type: ignore[arg-type]
    plain = index(ws, minScore=0.0)
    before = plain.search("the deploy pipeline canary plan")
    with serve(api) as url:
        fmt = {} if shape == "cohere" else {"format": shape}
        idx = index(ws, remote(url, **fmt), minScore=0.0)
        after = idx.search("the deploy pipeline canary plan")
    assert api.seen, "the reranker was never asked"
    body = api.seen[0]
    if shape == "tei":
        assert set(body) == {"query", "texts"}
    else:
        assert body["model"] == "rerank-test" and body["query"].startswith("the deploy")
        assert body["top_k" if shape == "voyage" else "top_n"] == len(body["documents"])
    assert api.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    # the reranker's favourite comes first; every result keeps its calibrated score
    assert "zebra" in after.results[0].snippet
    assert "zebra" not in before.results[0].snippet
    scores_before = {(r.path, r.start_line): r.score for r in before.results}
    for r in after.results:
        if (r.path, r.start_line) in scores_before:
            assert r.score == scores_before[(r.path, r.start_line)]
    assert after.notes == before.notes


def test_a_file_the_query_names_stays_first_and_is_not_sent(ws: Path) -> None:
    api = FakeRerank(key=SECRET)
    with serve(api) as url:
        idx = index(ws, remote(url), minScore=0.0)
        out = idx.search(SearchRequest("the deploy pipeline in 2026-03-05.md", explain=True))
    named, second = out.results[:2]
    assert named.path == "memory/2026-03-05.md" and "zebra" in second.snippet
    assert not any("note 5 says" in d for d in api.seen[0]["documents"])
    rr = named.explain["rerank"]  # type: ignore[index]
    assert (rr["score"], rr["before"], rr["after"]) == (None, 1, 1)
    assert second.explain["rerank"]["score"] is not None  # type: ignore[index]


def test_tei_gets_at_most_32_texts_a_request(ws: Path) -> None:
    for day in range(1, 21):  # 50 chunks in all, more than one TEI request holds
        write(ws / "memory" / f"2026-04-{day:02d}.md", f"# 2026-04-{day:02d}\n\n- plans {day}\n")
    api = FakeRerank(key=SECRET, shape="tei", tei_limit=32)
    with serve(api) as url:
        idx = index(ws, remote(url, format="tei", candidates=60), minScore=0.0, maxResults=20)
        out = idx.search("plans")
    sizes = [len(b["texts"]) for b in api.seen]
    assert len(sizes) >= 2 and max(sizes) <= 32, sizes
    assert not any("rerank degraded" in n for n in out.notes)


@pytest.mark.parametrize(
    ("base", "path"),
    [("", "/v1/rerank"), ("/v1", "/v1/rerank"), ("/api/rerank", "/api/rerank")],
)
def test_the_path_follows_the_base_url(ws: Path, base: str, path: str) -> None:
    api = FakeRerank(key=SECRET)
    with serve(api) as url:
        index(ws, remote(url + base), minScore=0.0).search("deploy pipeline")
    assert [r.path for r in api.requests] == [path]


# --------------------------------------------------------------------------- fail-open


@pytest.mark.parametrize(
    ("misbehave", "reason"),
    [
        ("slow", "no answer within 300 ms"),
        ("error", "HTTP 500"),
        ("short", "scores for"),
        ("bad_index", "is not one of the"),
        ("not_a_number", "is not a number"),
        ("html", "not JSON"),
    ],
)
def test_a_failing_reranker_leaves_the_order_and_says_why(
    ws: Path, misbehave: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    query = "the deploy pipeline canary plan"
    plain = index(ws, minScore=0.0).search(query)
    api = FakeRerank(key=SECRET, misbehave=misbehave, slow_s=3.0)  # type: ignore[arg-type]
    caplog.set_level(logging.DEBUG)
    with serve(api) as url:
        # the slow server is cut at 300 ms; the others answer at once, given all the time a
        # loaded machine may need
        timeout_ms = 300 if misbehave == "slow" else 20_000
        idx = index(ws, remote(url, timeout_ms=timeout_ms), minScore=0.0)
        out = idx.search(SearchRequest(query, explain=True))
    assert shown(out) == shown(plain)  # the unreranked order, the same results
    notes = [n for n in out.notes if n.startswith("rerank degraded")]
    assert len(notes) == 1 and reason in notes[0], out.notes
    rr = out.results[0].explain["rerank"]  # type: ignore[index]
    assert reason in rr["degraded"]
    # the stage's own time, measured by the stage: bounded by timeoutMs + 0.2 s
    assert rr["seconds"] <= timeout_ms / 1000 + 0.2
    degraded = read_degraded(idx.cfg.state_dir)  # type: ignore[arg-type]
    assert degraded is not None and reason in degraded
    assert SECRET not in caplog.text and SECRET not in json.dumps(out.to_dict())


def test_status_says_degraded_until_a_rerank_succeeds(ws: Path) -> None:
    api = FakeRerank(key=SECRET, misbehave="error")
    with serve(api) as url:
        config = validate_config(
            {
                "agents": {
                    "defaults": {
                        "workspace": str(ws),
                        "memorySearch": {"provider": "none", "query": {"rerank": remote(url)}},
                    }
                }
            }
        )
        with MemoryService(config, background=False) as svc:
            svc.search("deploy pipeline")
            st = svc.status()
            assert "rerank: degraded, HTTP 500" in " ".join(st["issues"]), st["issues"]
            assert st["rerank"].startswith("degraded, ")
            assert SECRET not in json.dumps(st)
            api.misbehave = "none"
            svc.search("deploy pipeline")
            st = svc.status()
            assert st["rerank"] is None
            assert not any(i.startswith("rerank") for i in st["issues"])
    state = (Path(st["stateDir"]) / "rerank.json").read_text()
    assert SECRET not in state


def test_a_wrong_key_is_a_degraded_note_that_does_not_repeat_the_key(ws: Path) -> None:
    api = FakeRerank(key="the-right-key")
    with serve(api) as url:
        out = index(ws, remote(url), minScore=0.0).search("deploy pipeline")
    note = next(n for n in out.notes if n.startswith("rerank degraded"))
    assert "HTTP 401" in note and SECRET not in note


def test_the_key_can_come_from_the_environment(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_RERANK_API_KEY", "from-env")
    api = FakeRerank(key="from-env")
    with serve(api) as url:
        cfg = remote(url)
        del cfg["remote"]["apiKey"]
        out = index(ws, cfg, minScore=0.0).search("deploy pipeline")
    assert api.requests[0].headers["authorization"] == "Bearer from-env"
    assert not any(n.startswith("rerank degraded") for n in out.notes)


def test_the_stage_itself_stops_waiting_at_its_timeout() -> None:
    calls: list[float] = []

    def hangs(query: str, docs: Any, deadline: float) -> list[float]:
        import time

        calls.append(deadline)
        time.sleep(2.0)
        return [1.0] * len(docs)

    remote = RerankRemoteConfig(base_url="http://127.0.0.1:9")
    cfg = RerankConfig(provider="remote", timeout_ms=100, remote=remote)
    outcome = RerankStage(cfg).apply("q", ["a", "b", "c"], hangs)
    assert outcome.order == [0, 1, 2] and outcome.degraded == "no answer within 100 ms"
    assert outcome.seconds <= 0.1 + 0.2
    assert calls  # it was asked, and its deadline was the stage's


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"results": [{"index": 0, "relevance_score": 1}]}, "1 scores for 2 documents"),
        ({"results": [{"index": 0, "relevance_score": 1}] * 2}, "scored twice"),
        (
            {"results": [{"index": -1, "relevance_score": 1}, {"index": 1, "relevance_score": 1}]},
            "not one of",
        ),
        (
            {
                "results": [
                    {"index": 0, "relevance_score": float("nan")},
                    {"index": 1, "relevance_score": 1},
                ]
            },
            "not a number",
        ),
        (
            {
                "results": [
                    {"index": True, "relevance_score": 1},
                    {"index": 1, "relevance_score": 1},
                ]
            },
            "not one of",
        ),
        ({"answer": "yes"}, "no list"),
        ("<html>", "no list"),
        ([1, 2], "not an object"),
    ],
)
def test_garbage_answers_are_refused(body: Any, problem: str) -> None:
    from memoryd.rerank import RerankFailed

    with pytest.raises(RerankFailed, match=problem):
        parse_scores(body, 2)


def test_every_shape_parses() -> None:
    assert parse_scores(
        {"results": [{"index": 1, "relevance_score": 0.2}, {"index": 0, "relevance_score": 0.9}]}, 2
    ) == [0.9, 0.2]
    assert parse_scores(
        {"data": [{"index": 0, "relevance_score": 0.1}, {"index": 1, "relevance_score": 0.3}]}, 2
    ) == [0.1, 0.3]
    assert parse_scores([{"index": 1, "score": 2.0}, {"index": 0, "score": -1.0}], 2) == [-1.0, 2.0]


# --------------------------------------------------------------------------- abstention, monotonic top-k


def test_an_off_topic_query_abstains_even_when_the_reranker_likes_everything(ws: Path) -> None:
    api = FakeRerank(key=SECRET, constant=0.99)
    with serve(api) as url:
        idx = index(ws, remote(url))
        out = idx.search("what is the boiling point of water on Mount Everest?")
        assert out.results == []
        on_topic = idx.search("the deploy pipeline canary plan")
    assert on_topic.results  # the same reranker on a real question
    assert len(api.seen) == 1  # nothing passed for the off-topic query: nothing to rerank


@pytest.mark.parametrize("reranked", [False, True])
@pytest.mark.parametrize("fusion", ["auto", "rrf"])
def test_the_first_k_results_of_n_are_the_results_of_k(
    ws: Path, reranked: bool, fusion: str
) -> None:
    api = FakeRerank(key=SECRET)
    with serve(api) as url:
        idx = index(ws, remote(url) if reranked else None, hybrid={"fusion": fusion}, minScore=0.0)
        for query in QUERIES:
            full = shown(idx.search(SearchRequest(query, max_results=6)))
            assert len(full) == 6, query
            for k in range(1, 6):
                assert shown(idx.search(SearchRequest(query, max_results=k))) == full[:k], (
                    query,
                    k,
                )
    assert bool(api.seen) == reranked


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("rerank", "message"),
    [
        ({"provider": "remote"}, "remote.baseUrl is not set"),
        ({"provider": "cohere"}, "provider"),
        ({"candidates": 0}, "candidates"),
        ({"timeoutMs": 0}, "timeoutMs"),
        ({"provider": "remote", "remote": {"baseUrl": "ftp://x"}}, "http:// or https://"),
        ({"remote": {"format": "xml"}}, "format"),
        ({"remote": {"apikey": "x"}}, "apikey"),
    ],
)
def test_bad_rerank_settings_fail_in_one_line(
    tmp_path: Path, rerank: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        validate_config({"agents": {"defaults": {"memorySearch": {"query": {"rerank": rerank}}}}})
    text = str(info.value)
    assert message in text and "query.rerank" in text


def test_the_key_is_not_in_the_settings_repr() -> None:
    cfg = RerankConfig(
        provider="remote", remote=RerankRemoteConfig(base_url="http://x", api_key=SECRET)
    )
    assert SECRET not in repr(cfg)


def test_qmd_rerank_true_is_read_as_the_qmd_provider(tmp_path: Path) -> None:
    agent = agent_for(tmp_path, memory={"backend": "qmd", "qmd": {"rerank": True}})
    assert agent.qmd_settings().rerank.provider == "qmd"
    agent = agent_for(
        tmp_path,
        {"query": {"rerank": {"provider": "remote", "remote": {"baseUrl": "http://x"}}}},
        memory={"backend": "qmd", "qmd": {"rerank": True}},
    )
    assert agent.qmd_settings().rerank.provider == "remote"  # the stage's own key wins


def test_favourite_score_is_what_the_tests_assume() -> None:
    assert favourite_score("q", "a zebra and a zebra", "zebra") > favourite_score(
        "q", "otter", "zebra"
    )


def test_a_config_holding_the_rerank_key_is_never_cached(tmp_path: Path) -> None:
    from memoryd import paths
    from memoryd.config_files import load_config

    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[agents.defaults.memorySearch.query.rerank]\nprovider = "remote"\n'
        f'[agents.defaults.memorySearch.query.rerank.remote]\nbaseUrl = "http://x"\napiKey = "{SECRET}"\n'
    )
    for _ in range(2):
        loaded = load_config(cfg)
    assert loaded.agents.defaults.memory_search.query.rerank.remote.api_key == SECRET
    cache = paths.config_cache_dir()
    cached = [p.read_text() for p in cache.glob("*")] if cache.is_dir() else []
    assert not any(SECRET in text for text in cached)
    plain = tmp_path / "plain.toml"
    plain.write_text('[agents.defaults.memorySearch.query.rerank]\nprovider = "none"\n')
    load_config(plain)
    assert cache.is_dir() and list(cache.glob("*")), "the cache works for a config without a key"
