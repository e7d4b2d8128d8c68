"""The engine contract, run against both engines: the built-in index and the real qmd sidecar.

The built-in index runs it on both of its stores: a SQLite file and a tenant of a real
PostgreSQL with pgvector (tests/pg_support.py: one server per test process).

Whatever engine answers, an agent gets the same promises: ranked results whose path and line
range `memory_get` reads back, snippets within the cap, no budget trim below the orchestrator,
the same memory_get rule (what is refused, what is empty), typed status, and changes picked up.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import agent_for, index_for, write
from memoryd.core.engine import SearchOutput, SearchRequest
from memoryd.core.results import MAX_SNIPPET_CHARS, FileText
from memoryd.core.status import BuiltinStatus, QmdStatus
from memoryd.errors import InvalidInput, PathNotAllowed
from memoryd.memfiles import read_memory_file
from qmd_support import make_manager, require_qmd, seed_workspace


@pytest.fixture(scope="module")
def contract_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One workspace for the module: the engines only read it (the one test that writes a note
    removes it again), so qmd's collections are built once and every later start trusts them."""
    root = tmp_path_factory.mktemp("contract")
    ws = seed_workspace(root / "ws")
    write(
        ws / "memory" / "long.md",
        "# Long\n\n" + "\n".join(f"line {i} about quokkas" for i in range(300)) + "\n",
    )
    outside = write(root / "outside.md", "outside secret\n")
    os.symlink(outside, ws / "memory" / "link.md")
    os.link(outside, ws / "memory" / "hard.md")
    write(ws / "memory" / ".git" / "notes.md", "git internals\n")
    write(ws / "README.md", "not memory\n")
    return ws


@pytest.fixture(params=["builtin", "builtin-postgres", pytest.param("qmd", marks=pytest.mark.qmd)])
def engine(request: pytest.FixtureRequest, contract_ws: Path) -> Iterator[Any]:
    ws = contract_ws
    if request.param == "builtin":
        eng: Any = index_for(agent_for(ws, {"provider": "none"}), None)
    elif request.param == "builtin-postgres":
        store = {"driver": "postgres", "url": request.getfixturevalue("pg_url")}
        eng = index_for(agent_for(ws, {"provider": "none", "store": store}), None)
    else:
        agent = agent_for(ws, memory={"backend": "qmd"})
        eng = make_manager(agent, require_qmd(), ws.parent / "qmd-home")
    eng.start()
    eng.sync()
    yield eng
    eng.close()


def memory_get(engine: Any, path: str, from_line: int | None, lines: int | None) -> FileText:
    """`memory_get` as the supervisor serves it: by the roots of the engine that indexes the files."""
    if engine.name == "qmd":
        return read_memory_file(engine.roots(), engine.settings.workspace, path, from_line, lines)
    return read_memory_file(engine.cfg.roots, engine.cfg.workspace, path, from_line, lines)


def test_search_answers_are_ranked_and_readable_back(engine: Any) -> None:
    answer = engine.search(SearchRequest("zeppelin budget"))
    assert isinstance(answer, SearchOutput) and answer.engine == engine.name
    assert answer.results, answer
    assert answer.results[0].path == "memory/2026-01-03.md"
    scores = [r.score for r in answer.results]
    assert scores == sorted(scores, reverse=True)
    for r in answer.results:
        assert 1 <= r.start_line <= r.end_line and len(r.snippet) <= MAX_SNIPPET_CHARS
        got = memory_get(engine, r.path, r.start_line, r.end_line - r.start_line + 1)
        first = next(line for line in r.snippet.splitlines() if line.strip())
        assert first in got.text


@pytest.mark.parametrize("min_score", [0.0, 0.35, 0.6])
def test_no_result_scores_below_the_requested_min_score(engine: Any, min_score: float) -> None:
    answer = engine.search(SearchRequest("zeppelin budget", min_score=min_score))
    assert all(r.score >= min_score for r in answer.results)


def test_a_query_about_nothing_in_memory_returns_no_results(engine: Any) -> None:
    # scores mean the same in every query: the default minScore drops what is unrelated,
    # even when one common word of the query (a name every other note holds) matches
    assert (engine.search(SearchRequest("Alice's banana bread recipe"))).results == []
    assert (engine.search(SearchRequest("zeppelin budget"))).results


def test_engines_do_not_apply_the_injected_budget(engine: Any) -> None:
    answer = engine.search(SearchRequest("quokkas", max_results=6))
    assert answer.max_injected_chars == 4000
    # snippets are capped one by one; the sum may exceed the budget (the orchestrator trims once)
    assert all(len(r.snippet) <= MAX_SNIPPET_CHARS for r in answer.results)


def test_max_results_is_honoured(engine: Any) -> None:
    assert len((engine.search(SearchRequest("the", max_results=1))).results) <= 1


@pytest.mark.parametrize(
    "path",
    [
        "../outside.md",
        "README.md",
        "memory/.git/notes.md",
        "memory/link.md",
        "memory/hard.md",
        "memory/notes.txt",
        "/etc/passwd.md",
    ],
)
def test_memory_get_refuses_the_same_paths(engine: Any, path: str) -> None:
    with pytest.raises(PathNotAllowed):
        memory_get(engine, path, None, None)


def test_memory_get_reads_slices_and_empties(engine: Any) -> None:
    assert (memory_get(engine, "MEMORY.md", None, None)).text.startswith("# Memory")
    assert (memory_get(engine, "MEMORY.md", 3, 1)).text == "Alice likes green tea.\n"
    assert (memory_get(engine, "MEMORY.md", 99, None)).text == ""
    assert (memory_get(engine, "memory/2099-01-01.md", None, None)).text == ""
    with pytest.raises(InvalidInput):
        memory_get(engine, "MEMORY.md", 0, None)
    with pytest.raises(InvalidInput):
        memory_get(engine, "MEMORY.md", 1, 0)


def test_status_is_the_engines_typed_model(engine: Any) -> None:
    st = engine.status()
    assert isinstance(st, BuiltinStatus if engine.name == "builtin" else QmdStatus)
    assert st.to_dict()  # JSON-ready, camelCase


def test_a_new_note_is_found_after_a_sync(engine: Any, contract_ws: Path) -> None:
    note = write(contract_ws / "memory" / "2026-02-01.md", "# 2026-02-01\n\nThe okapi arrived.\n")
    try:
        engine.notify_changed()
        engine.sync()
        answer = engine.search(SearchRequest("okapi"))
        assert [r.path for r in answer.results][:1] == ["memory/2026-02-01.md"]
    finally:
        note.unlink()
