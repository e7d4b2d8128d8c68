"""What an agent gets from the real qmd: planned queries, memoryd's own snippets, memoryd's rules.

Natural questions (English, CJK, identifiers) and qmd syntax (quoted phrases, negation) against a
real qmd 2.8.3 with no model; snippet windows with exact line ranges, also after the file changed
behind qmd's back; and hits that break memoryd's file rules — a fake qmd naming traversal,
unknown-collection and absolute paths, the real qmd over a hard link and a `venv/` folder —
dropped and counted, never shown.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from memoryd.config import ResolvedAgent
from memoryd.core.engine import SearchRequest
from memoryd.orchestrator import MemoryService
from memoryd.qmd_adapter import QmdManager
from qmd_support import NO_CI, fault_wrapper, make_agent, make_manager, require_qmd, write

pytestmark = [pytest.mark.qmd]


def chat(speakers: tuple[str, str], n: int, topic: str) -> list[str]:
    return [
        f"{speakers[i % 2]}: turn {i} was mostly about {topic} and nothing in particular."
        for i in range(n)
    ]


def seed(ws: Path) -> None:
    """Daily notes where every note names the same people, as a chat log does."""
    write(ws / "MEMORY.md", "# Memory\n\nAndrew likes green tea. Bob drinks tea that is green.\n")
    day1 = ["# 2026-03-01", "", *chat(("Andrew", "Bob"), 30, "work")]
    day1[20] = "Andrew: My girlfriend and I went hiking in the hills last weekend."
    write(ws / "memory" / "2026-03-01.md", "\n".join(day1) + "\n")
    write(
        ws / "memory" / "2026-03-02.md",
        "\n".join(["# 2026-03-02", "", *chat(("Andrew", "Bob"), 30, "the weekend plans")]) + "\n",
    )
    write(
        ws / "memory" / "2026-03-03.md",
        "# 2026-03-03\n\n我们下周在北京开会，讨论明年的预算。\nThe budget meeting moved to Friday.\n",
    )
    write(
        ws / "memory" / "errors.md",
        "# Errors\n\nERR_CART_TTL_EXPIRED fires when a cart outlives its TTL.\n"
        "Release v1.2.3 fixed the checkout.\n",
    )
    write(
        ws / "memory" / "carts.md",
        "# Carts\n\nAn expired cart is emptied; the err log keeps the TTL.\n"
        "Release v1.2.4 changed the cart page.\n",
    )
    write(ws / "memory" / "zeppelin.md", "# Zeppelin\n\nThe zeppelin budget belongs to Carol.\n")


class Shared:
    def __init__(self, root: Path, qmd: str) -> None:
        self.qmd = qmd
        self.ws = root / "ws"
        seed(self.ws)
        self.home = root / "home"

    def agent(self, **settings: Any) -> ResolvedAgent:
        return make_agent(self.ws, **settings)

    def manager(self, **settings: Any) -> QmdManager:
        mgr = make_manager(self.agent(**settings), self.qmd, self.home)
        mgr.start()
        return mgr


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    s = Shared(tmp_path_factory.mktemp("qmd-search"), require_qmd())
    s.manager()
    return s


def paths(results: list[Any]) -> list[str]:
    return list(dict.fromkeys(r.path for r in results))


# ---------------------------------------------------------------- planned queries


@pytest.mark.parametrize(
    ("question", "first"),
    [
        # every word of it in no note: qmd's `search` would find nothing at all
        ("What did Andrew and his girlfriend do on the weekend?", "memory/2026-03-01.md"),
        ("什么时候在北京开会？", "memory/2026-03-03.md"),
        ("北京开会", "memory/2026-03-03.md"),
        ("what does ERR_CART_TTL_EXPIRED mean?", "memory/errors.md"),
        ("which release was v1.2.3?", "memory/errors.md"),
        ("Who owns the zeppelin budget?", "memory/zeppelin.md"),
    ],
)
def test_a_natural_question_finds_its_note(shared: Shared, question: str, first: str) -> None:
    mgr = shared.manager()
    hits = mgr.search(question).results
    assert hits and hits[0].path == first, [(h.path, h.snippet[:40]) for h in hits]


def test_a_quoted_phrase_is_searched_as_written(shared: Shared) -> None:
    mgr = shared.manager()
    # "green tea" as a phrase: MEMORY.md holds it; "tea that is green" alone would not do
    hits = mgr.search('"green tea"').results
    assert paths(hits) == ["MEMORY.md"]
    assert mgr.search('"tea green"').results == []


def test_a_negated_term_excludes_its_notes(shared: Shared) -> None:
    mgr = shared.manager()
    with_it = paths(mgr.search("budget").results)
    assert "memory/zeppelin.md" in with_it and "memory/2026-03-03.md" in with_it
    without = paths(mgr.search("budget -zeppelin").results)
    assert without == ["memory/2026-03-03.md"]


def test_typed_lines_reach_qmd_as_written(shared: Shared) -> None:
    mgr = shared.manager()
    hits = mgr.search("lex: girlfriend hiking").results
    assert paths(hits) == ["memory/2026-03-01.md"]


def test_a_question_about_nothing_here_gets_nothing(shared: Shared) -> None:
    mgr = shared.manager()
    # one common word (a name every note holds) is not enough to answer
    assert mgr.search("Andrew's banana bread recipe with walnuts").results == []


def test_query_mode_without_embeddings_answers_by_keywords_and_says_so(
    shared: Shared,
) -> None:
    mgr = shared.manager(searchMode="query")
    answer = mgr.search(SearchRequest("Who owns the zeppelin budget?"))
    assert answer.results[0].path == "memory/zeppelin.md"
    assert answer.model is None and answer.mode == "query"
    assert any("no embeddings" in n for n in answer.notes)


# ---------------------------------------------------------------- snippets memoryd cuts


def test_windows_are_the_files_lines_exactly(shared: Shared) -> None:
    mgr = shared.manager()
    hits = mgr.search("What did Andrew and his girlfriend do on the weekend?").results
    best, more = hits[0], hits[1]
    lines = (shared.ws / best.path).read_text().splitlines()
    assert len(best.snippet) <= 700
    assert best.snippet.split("\n") == lines[best.start_line - 1 : best.end_line]
    assert "My girlfriend and I went hiking" in best.snippet
    # the best hit's continuation: the lines right after its window, the hit's score
    assert more.path == best.path and more.start_line == best.end_line + 1
    assert more.snippet.split("\n") == lines[more.start_line - 1 : more.end_line]
    assert more.score == best.score
    for h in hits:
        got = (shared.ws / h.path).read_text().splitlines()
        assert h.snippet.split("\n") == got[h.start_line - 1 : h.end_line], h


def test_an_edit_qmd_has_not_seen_is_found_again_or_dropped(shared: Shared, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    note = write(
        ws / "memory" / "2026-04-01.md",
        "\n".join(["# 2026-04-01", "", *chat(("Ann", "Ben"), 40, "travel")]) + "\n",
    )
    text = note.read_text().splitlines()
    text[25] = "Ann: The zebra migration finished on Friday, right on schedule."
    note.write_text("\n".join(text) + "\n")
    mgr = make_manager(make_agent(ws), shared.qmd, tmp_path / "home")
    mgr.start()
    (hit, *_) = mgr.search("When did the zebra migration finish?").results
    assert hit.start_line <= 26 <= hit.end_line

    # five lines added above it, qmd not told: memoryd finds the line by qmd's text
    note.write_text("\n".join(["# moved", "", "a", "b", "c", *text]) + "\n")
    (moved, *_) = mgr.search("When did the zebra migration finish?").results
    now = note.read_text().splitlines()
    assert moved.start_line <= 31 <= moved.end_line
    assert moved.snippet.split("\n") == now[moved.start_line - 1 : moved.end_line]
    assert mgr.status().dropped_hits == {}

    # the line qmd matched is gone: the hit is dropped, not shown from the old numbering
    note.write_text("# 2026-04-01\n\nAnn: Zebra notes moved to another file. Migration later.\n")
    assert mgr.search("When did the zebra migration finish?").results == []
    assert mgr.status().dropped_hits == {"stale": 1}
    # once qmd updates, the new text is served as it is
    mgr.update()
    (fresh,) = mgr.search("zebra migration").results
    assert fresh.snippet.endswith("Migration later.") and fresh.start_line == 1


# ---------------------------------------------------------------- memoryd's rules


FAKE_HITS = [
    {"docid": "#000001", "score": 1, "file": "qmd://memory-dir-main/../../outside_secret.md",
     "line": 1, "snippet": "@@ -1,1 @@\nTOP SECRET outside"},
    {"docid": "#000002", "score": 0.5, "file": "qmd://evilcoll/etc/passwd.md",
     "line": 1, "snippet": "@@ -1,1 @@\nroot:x:0:0 secret"},
    {"docid": "#000003", "score": 0.33, "file": "qmd://memory-root-main//tmp/secret.md",
     "line": 1, "snippet": "@@ -1,1 @@\nTOP SECRET tmp"},
    {"docid": "#000004", "score": 0.25, "file": "qmd://memory-dir-main/zeppelin.md",
     "line": 3, "snippet": "@@ -3,1 @@\nThe zeppelin budget belongs to Carol."},
]  # fmt: skip


def test_hits_outside_memorys_rules_never_reach_the_agent(shared: Shared, tmp_path: Path) -> None:
    # the traversal names a real file outside the workspace
    write(shared.ws.parent / "outside_secret.md", "TOP SECRET outside zeppelin budget\n")
    canned = tmp_path / "hits.json"
    canned.write_text(json.dumps(FAKE_HITS))
    # a qmd that answers every query with paths no collection may serve
    fake = fault_wrapper(
        tmp_path / "qmd",
        shared.qmd,
        f'if [ "$1" = query ]; then cat "{canned}"; exit 0; fi\nexec "$REAL" "$@"',
    )
    svc = MemoryService(
        _config(shared, fake),
        qmd_factory=lambda agent: QmdManager(
            agent.qmd_settings(),
            home=tmp_path / "home",
            shared_models_dir=None,
            env_overrides=NO_CI,
        ),
    )
    with svc:
        svc.backend().ensure_qmd_started()  # under a task group it starts in the background
        out = svc.memory_search("zeppelin budget")
        st = svc.status()
        # the issue holds while qmd has not updated since; the counts stay
        qmd = svc.backend().qmd
        assert isinstance(qmd, QmdManager)
        qmd.update()
        updated = svc.status()
        assert not any("would not serve" in i for i in updated["issues"]), updated["issues"]
        assert updated["qmd"]["droppedHits"] == st["qmd"]["droppedHits"]
        svc.memory_search("zeppelin budget")  # qmd still names them: true again
        assert any("would not serve" in i for i in (svc.status())["issues"])
    assert out["backend"] == "qmd"
    assert [r["path"] for r in out["results"]] == ["memory/zeppelin.md"]
    # memoryd's window of the file, with the citation footer the built-in index's results get
    (hit,) = out["results"]
    assert (hit["startLine"], hit["endLine"], hit["citation"]) == (1, 3, "memory/zeppelin.md#L1-L3")
    assert hit["snippet"] == (
        "# Zeppelin\n\nThe zeppelin budget belongs to Carol.\n\nSource: memory/zeppelin.md#L1-L3"
    )
    assert "SECRET" not in json.dumps(out) and "root:x" not in json.dumps(out)
    assert st["qmd"]["droppedHits"] == {
        "traversal": 1,
        "unknown_collection": 1,
        "absolute_path": 1,
    }
    assert any("would not serve" in i for i in st["issues"]), st["issues"]


def test_a_hard_link_and_a_venv_folder_qmd_indexed_are_not_served(
    shared: Shared, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    write(ws / "memory" / "ok.md", "# ok\n\nThe narwhal count is seven.\n")
    outside = write(tmp_path / "outside.md", "narwhal outside secret from a hard link\n")
    os.link(outside, ws / "memory" / "hard.md")
    write(ws / "memory" / "venv" / "v.md", "narwhal secret inside a virtualenv folder\n")
    write(ws / "memory" / "tools" / "pyvenv.cfg", "home = /usr\n")
    write(ws / "memory" / "tools" / "t.md", "narwhal secret inside an unnamed virtualenv\n")
    mgr = make_manager(make_agent(ws), shared.qmd, tmp_path / "home")
    mgr.start()
    # the real qmd indexed them all: it follows neither memoryd's skip list nor its link rule
    raw = mgr._run(
        ["query", "lex: narwhal", "--json", "-n", "10", "--no-rerank", "-c", "memory-dir-main"],
        30_000,
    )
    assert {h["file"] for h in json.loads(raw.stdout)} >= {
        "qmd://memory-dir-main/hard.md",
        "qmd://memory-dir-main/venv/v.md",
        "qmd://memory-dir-main/tools/t.md",
    }
    hits = mgr.search("narwhal").results
    assert paths(hits) == ["memory/ok.md"]
    assert all("secret" not in h.snippet for h in hits)
    dropped = mgr.status().dropped_hits
    assert dropped == {"refused": 2, "not_memory": 1}, dropped
    # the last hit dropped, in qmd's order (which ties between these three do not fix)
    last = mgr.status().last_dropped or ""
    assert last == (
        "qmd/memory-dir-main/venv/v.md: not_memory (in venv/, a folder memoryd never reads)"
    ) or re.fullmatch(r"qmd/memory-dir-main/(hard|tools/t)\.md: refused \(.+\)", last), last


def _config(shared: Shared, command: str) -> Any:
    from memoryd.config import validate_config

    return validate_config(
        {
            "memory": {"backend": "qmd", "qmd": {"command": command, "update": {"onBoot": False}}},
            "agents": {
                "defaults": {"workspace": str(shared.ws), "memorySearch": {"provider": "none"}}
            },
        }
    )
