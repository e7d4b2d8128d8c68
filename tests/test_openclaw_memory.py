"""OpenClaw 2026.9's memory rules end to end: USER.md as long-term memory on both engines,
importance annotations in the built-in ranking (abstention intact), per-agent `extraPaths`
combined with the global ones (`agents.list` and `agents.entries`), and the OpenClaw keys memoryd
refuses, each with a one-line reason (docs/openclaw.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cli_support import run_memoryd
from helpers import agent_for, index_for, write
from memoryd.builtin_index import MemoryIndex
from memoryd.config import resolve_agent, validate_config
from memoryd.config_files import load_config
from memoryd.core.engine import SearchOutput
from qmd_support import make_agent, make_manager, memory_get, require_qmd

# --------------------------------------------------------------------------- USER.md

USER = "# User\n\n- Prefers answers in British English.\n- Drinks oolong tea, never coffee.\n"


def synced(
    ws: Path, search: dict[str, Any] | None = None, provider: Any = "hashing"
) -> MemoryIndex:
    idx = index_for(agent_for(ws, search), provider)
    idx.sync()
    return idx


def paths_of(out: SearchOutput) -> list[str]:
    return [r.path for r in out.results]


def test_user_md_is_indexed_and_served_by_the_builtin_index(workspace: Path) -> None:
    write(workspace / "USER.md", USER)
    write(workspace / "MEMORY.md", "# Memory\n\n- The deploy target is fly.io.\n")
    idx = synced(workspace)
    assert idx.status().to_dict()["files"] == 2
    assert paths_of(idx.search("which tea does the user drink?"))[:1] == ["USER.md"]
    assert "oolong" in idx.get("USER.md").to_dict()["text"]
    idx.close()


def test_user_md_never_decays(workspace: Path) -> None:
    text = "Rod has standup at 14:15 with the platform team.\n"
    write(workspace / "USER.md", text)
    write(workspace / "memory" / "2025-01-15.md", text)
    write(workspace / "memory" / "2026-02-10.md", text)
    idx = synced(workspace, {"query": {"hybrid": {"temporalDecay": {"enabled": True}}}})
    out = idx.search("Rod standup", min_score=0, now=datetime(2026, 2, 10, tzinfo=UTC))
    scores = {r.path: r.score for r in out.results}
    assert scores["USER.md"] == pytest.approx(scores["memory/2026-02-10.md"])
    assert scores["memory/2025-01-15.md"] < scores["USER.md"] / 100
    idx.close()


@pytest.mark.qmd
def test_user_md_is_a_qmd_collection_searched_and_served(tmp_path: Path) -> None:
    qmd = require_qmd()
    ws = tmp_path / "ws"
    write(ws / "USER.md", USER)
    write(ws / "MEMORY.md", "# Memory\n\n- The deploy target is fly.io.\n")
    mgr = make_manager(make_agent(ws), qmd, tmp_path / "home")
    mgr.start()
    assert mgr.list_collections()["memory-user-main"].pattern == "USER.md"
    hits = mgr.search("oolong tea").results
    assert [h.path for h in hits] == ["USER.md"]
    assert "British English" in memory_get(mgr, "USER.md").to_dict()["text"]


# --------------------------------------------------------------------------- importance

FACTS = {
    "MEMORY.md": "# Memory\n\n- The staging database password rotates every Monday morning.{a}\n",
    "USER.md": "# User\n\n- The staging database rotates on Mondays.{a}\n",
}


def importance_ws(ws: Path, memory: str = "", user: str = "") -> None:
    write(ws / "MEMORY.md", FACTS["MEMORY.md"].format(a=memory))
    write(ws / "USER.md", FACTS["USER.md"].format(a=user))


@pytest.mark.parametrize("provider", ["hashing", None], ids=["hybrid", "keyword-only"])
def test_importance_reorders_the_curated_files(tmp_path: Path, provider: str | None) -> None:
    query = "when does the staging database password rotate?"
    neutral, boosted = tmp_path / "neutral", tmp_path / "boosted"
    # the same characters in both, so only the multiplier differs: 5 is neutral
    importance_ws(neutral, " <!-- importance: 5 -->", " <!-- importance: 5 -->")
    importance_ws(boosted, " <!-- importance: 5 -->", " <!-- importance: 9 -->")
    before = synced(neutral, provider=provider).search(query)
    after = synced(boosted, provider=provider).search(query)
    assert paths_of(before) == ["MEMORY.md", "USER.md"]
    assert paths_of(after) == ["USER.md", "MEMORY.md"]
    was = {r.path: r.score for r in before.results}
    now = {r.path: r.score for r in after.results}
    assert now["MEMORY.md"] == pytest.approx(was["MEMORY.md"])
    assert now["USER.md"] == pytest.approx(was["USER.md"] * 1.20, rel=1e-5)


def test_importance_outside_the_curated_files_is_plain_text(workspace: Path) -> None:
    write(workspace / "MEMORY.md", FACTS["MEMORY.md"].format(a=" <!-- importance: 5 -->"))
    write(workspace / "memory" / "db.md", FACTS["USER.md"].format(a=" <!-- importance: 5 -->"))
    query = "when does the staging database password rotate?"
    before = {r.path: r.score for r in synced(workspace, provider=None).search(query).results}
    write(workspace / "memory" / "db.md", FACTS["USER.md"].format(a=" <!-- importance: 9 -->"))
    after = {r.path: r.score for r in synced(workspace, provider=None).search(query).results}
    assert after == pytest.approx(before)


@pytest.mark.parametrize("provider", ["hashing", None], ids=["hybrid", "keyword-only"])
@pytest.mark.parametrize(
    "query", ["xyzzy", "banana bread recipe", "quantum chromodynamics lecture notes"]
)
def test_an_off_topic_query_abstains_however_important_the_files_are(
    workspace: Path, provider: str | None, query: str
) -> None:
    loud = " <!-- importance: 10 --> <!-- trigger: rotation, staging -->"
    importance_ws(workspace, loud, loud)
    write(
        workspace / "memory" / "2026-11-28.md",
        "# 2026-11-28\n\nPgBouncer idle timeout raised to 600s.\n",
    )
    assert synced(workspace, provider=provider).search(query).results == []


# --------------------------------------------------------------------------- per-agent extraPaths


def roots(config: dict[str, Any], agent: str, ws: Path) -> list[str]:
    resolved = resolve_agent(validate_config(config), agent, workspace=ws)
    return [r.path for r in resolved.extra_roots()]


@pytest.mark.parametrize(
    ("own", "expected"),
    [
        (None, ["/global/a", "/global/b"]),
        ([], ["/global/a", "/global/b"]),  # an empty list keeps the global roots (#134256)
        (["/agent/c", "/global/a"], ["/global/a", "/global/b", "/agent/c"]),
    ],
)
@pytest.mark.parametrize("shape", ["agents.entries", "agents.list", "memory.search"])
def test_per_agent_extra_paths_add_to_the_global_ones(
    tmp_path: Path, shape: str, own: list[str] | None, expected: list[str]
) -> None:
    search = {"extraPaths": own} if own is not None else {}
    overrides: dict[str, Any]
    if shape == "agents.entries":
        overrides = {"entries": {"coach": {"memory": {"search": search}}}}
    else:
        overrides = {"list": [{"id": "coach", "memorySearch": search}]}
    glob = {"extraPaths": ["/global/a", "/global/b"]}
    if shape == "memory.search":
        config = {"memory": {"search": glob}, "agents": overrides}
    else:
        config = {"agents": {"defaults": {"memorySearch": glob}, **overrides}}
    assert roots(config, "coach", tmp_path) == expected
    assert roots(config, "main", tmp_path) == ["/global/a", "/global/b"]


def test_an_openclaw_json_with_keyed_agents_searches_both_roots(tmp_path: Path) -> None:
    ws, shared, own = tmp_path / "ws", tmp_path / "shared", tmp_path / "coach-notes"
    write(ws / "MEMORY.md", "# Memory\n\n- nothing here\n")
    write(shared / "team.md", "The quokka roster lives in the shared handbook.\n")
    write(own / "drills.md", "Coach runs wombat drills on Thursdays.\n")
    cfg = tmp_path / "openclaw.json"
    cfg.write_text(
        json.dumps(
            {
                "gateway": {"port": 18789},  # not memoryd's: ignored
                "memory": {"search": {"provider": "none", "extraPaths": [str(shared)]}},
                "agents": {
                    "defaults": {"workspace": str(ws)},
                    "entries": {
                        "coach": {
                            "model": "anthropic/claude",  # not memoryd's: ignored
                            "memory": {"search": {"extraPaths": [str(own)]}},
                        }
                    },
                },
            }
        )
    )
    coach = resolve_agent(load_config(cfg), "coach")
    idx = index_for(coach, None)
    idx.sync()
    assert paths_of(idx.search("quokka roster")) == [str(shared / "team.md")]
    assert paths_of(idx.search("wombat drills")) == [str(own / "drills.md")]
    idx.close()


# --------------------------------------------------------------------------- refused keys


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            "[memory.search]\nrememberAcrossConversations = true\n",
            "memory.search.rememberAcrossConversations: rememberAcrossConversations is not "
            "supported",
        ),
        (
            "[memory.search.multimodal]\nenabled = true\n",
            "memory.search.multimodal: multimodal is not supported",
        ),
        (
            '[memory.search.store.fts]\ntokenizer = "trigram"\n',
            "memory.search.store.fts: store.fts.tokenizer is not supported",
        ),
        (
            '[memory.search]\nqueryInputType = "search_query"\n',
            "queryInputType is written remote.inputType.query",
        ),
        (
            "[memory.search.local]\ncontextSize = 4096\n",
            "contextSize is not supported",
        ),
        (
            '[memory.search]\nprovider = "openai-compatible"\n',
            "memory.search.provider: Input should be 'auto', 'local', 'openai'",
        ),
        (
            "[agents.entries.coach.memorySearch]\nextraPaths = []\n",
            "agents.entries.coach.memorySearch: memorySearch is OpenClaw's pre-2026.8 "
            "per-agent key: write it as agents.entries.<id>.memory.search",
        ),
        (
            "[agents.entries.coach.memory.search.qmd]\nextraCollections = []\n",
            "agents.entries.coach.memory.search.qmd: memory.search.qmd is not a memoryd key",
        ),
    ],
)
def test_a_refused_openclaw_key_is_one_clear_line(
    tmp_path: Path, workspace: Path, toml: str, message: str
) -> None:
    cfg = tmp_path / "memoryd.toml"
    cfg.write_text(toml)
    done = run_memoryd(["status", "--workspace", str(workspace), "--config", str(cfg)])
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr
