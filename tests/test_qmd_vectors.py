"""qmd with the shared offline GGUF: embed, structured vector queries, and the model failure paths.

Query expansion and reranking need models qmd cannot have offline: their tests check the failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryd.config import ResolvedAgent
from memoryd.errors import QmdExitError
from memoryd.qmd_adapter import QmdManager
from qmd_support import (
    MISSING_MODEL,
    OFFLINE_MODELS,
    collections_of,
    make_agent,
    make_manager,
    require_gguf,
    require_qmd,
    seed_workspace,
)

pytestmark = [pytest.mark.qmd]


class Embedded:
    def __init__(self, root: Path, qmd: str) -> None:
        self.qmd = qmd
        self.ws = seed_workspace(root / "ws")
        self.home = root / "home"

    def agent(self, **settings: Any) -> ResolvedAgent:
        return make_agent(self.ws, **({"searchMode": "query", "models": OFFLINE_MODELS} | settings))

    def manager(self, **kw: Any) -> QmdManager:
        mgr = make_manager(self.agent(**kw.pop("settings", {})), self.qmd, self.home, **kw)
        mgr.start()
        return mgr

    def prepare(self) -> dict[str, Any]:
        mgr = self.manager()
        mgr.sync()
        return mgr.status().to_dict()


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    qmd = require_qmd()
    require_gguf()
    e = Embedded(tmp_path_factory.mktemp("qmd-vectors"), qmd)
    e.boot_status = e.prepare()  # type: ignore[attr-defined]
    yield e


def test_sync_embeds_with_the_pinned_offline_model(embedded: Embedded) -> None:
    status = embedded.boot_status  # type: ignore[attr-defined]
    assert status["lastUpdateAt"] is not None
    assert status["lastEmbedAt"] is not None, status["lastError"]
    assert status["embedFailures"] == 0
    assert (
        str(OFFLINE_MODELS["embed"])
        in (embedded.home / "xdg-config" / "qmd" / "index.yml").read_text()
    )


def test_structured_query_uses_vectors(embedded: Embedded) -> None:
    mgr = embedded.manager()
    hits = mgr.search("lex: zeppelin\nvec: when will the airship launch", timeout_ms=60_000).results
    assert hits and hits[0].path == "memory/2026-01-03.md"
    assert "zeppelin" in hits[0].snippet
    # A vector-only query finds documents without any shared keyword.
    vec_hits = mgr.search("vec: hot drinks people enjoy", timeout_ms=60_000).results
    assert vec_hits, "vector search returned nothing"
    assert all(0 <= h.score <= 1 for h in vec_hits)
    assert {h.path for h in vec_hits} <= {
        "MEMORY.md",
        "memory/2026-01-02.md",
        "memory/2026-01-03.md",
        "memory/projects/garden.md",
    }


def test_a_question_in_query_mode_needs_only_the_embed_model(embedded: Embedded) -> None:
    # memoryd plans the question (a vec: line beside the lex lines): qmd expands nothing, so the
    # generation model it cannot have offline is never asked for
    mgr = embedded.manager()
    answer = mgr.search("when does the zeppelin launch", max_results=3)
    assert answer.results and answer.results[0].path == "memory/2026-01-03.md"
    assert answer.model == str(OFFLINE_MODELS["embed"])  # the vector side was used
    assert answer.notes == []


def test_reranking_needs_the_rerank_model_and_fails_cleanly(embedded: Embedded) -> None:
    # the argv the rerank stage's qmd scorer sends (the stage itself fails open)
    mgr = embedded.manager()
    argv = mgr.search_argv(
        "lex: zeppelin\nvec: airship launch", list(collections_of(mgr)), 8, rerank=True
    )
    with pytest.raises(QmdExitError) as info:
        mgr._run(argv, 60_000)
    assert "No model file found" in info.value.stderr


def test_vsearch_mode_answers_by_vectors_alone(embedded: Embedded) -> None:
    mgr = embedded.manager(settings={"searchMode": "vsearch"})
    answer = mgr.search("hot drinks people enjoy")
    # no note shares a word with the question: only the vector line can find these
    assert answer.results, "vector search returned nothing"
    assert answer.model == str(OFFLINE_MODELS["embed"])
    assert mgr.search_mode == "vsearch"


def test_embed_failure_backs_off_without_failing_the_update(tmp_path: Path) -> None:
    qmd = require_qmd()
    ws = seed_workspace(tmp_path / "ws")
    clock = [1000.0]
    # An embed model file that does not exist: a real qmd embed failure, in seconds.
    models = OFFLINE_MODELS | {"embed": MISSING_MODEL}
    mgr = make_manager(
        make_agent(ws, searchMode="query", models=models, update={"debounceMs": 0}),
        qmd,
        tmp_path / "home",
        clock=lambda: clock[0],
    )
    mgr.start()
    mgr.sync()
    status = mgr.status().to_dict()
    assert status["lastUpdateAt"] is not None and status["lastEmbedAt"] is None
    assert status["embedFailures"] == 1 and status["embedRetryInS"] == 60
    assert "embed failed" in (status["lastError"] or "")
    mgr.sync()
    assert mgr.status().to_dict()["embedFailures"] == 1  # not retried during the backoff
    clock[0] += 61
    mgr.sync()
    assert (
        mgr.status().to_dict()["embedFailures"] == 2
        and mgr.status().to_dict()["embedRetryInS"] == 120
    )
    with pytest.raises(QmdExitError):
        mgr.embed()
    assert (
        mgr.status().to_dict()["embedFailures"] == 3
        and mgr.status().to_dict()["embedRetryInS"] == 240
    )
