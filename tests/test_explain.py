"""Searches that explain themselves: `--explain`, `explain: true` on MCP and the socket.

The explain block is checked against the score it explains: recomputed from its own parts with
the documented formula (docs/retrieval-quality.md), it must give the result's score. Without
`explain` nothing changes, byte for byte.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from cli_support import run_memoryd
from helpers import agent_for, index_for, write
from memoryd.config import validate_config
from memoryd.core.engine import SearchRequest
from memoryd.core.results import SearchResult
from memoryd.mcp_server import build_server
from memoryd.orchestrator import MemoryService

QUERIES = [
    "when does the old webhook secret stop working?",
    "what CI system will the platform team use?",
    "postgres",
    "network.md",
    "Lisbon offsite travel budget",
]


def seed(ws: Path) -> Path:
    write(
        ws / "MEMORY.md",
        "# Memory\n\n- Rod runs the platform team.\n- Postgres 16 on Neon, PgBouncer in front."
        " <!-- importance: 9 -->\n",
    )
    write(
        ws / "memory" / "2026-11-29.md",
        "# 2026-11-29\n\n- Rotated the Stripe webhook secret; the old one stops working on "
        "2026-12-06.\n- The platform team wants to move CI from GitHub Actions to Buildkite.\n",
    )
    write(
        ws / "memory" / "2026-10-02.md",
        "# 2026-10-02\n\n- Lisbon offsite: travel budget approved, 3 nights.\n- Postgres vacuum "
        "settings copied from prod.\n",
    )
    write(ws / "memory" / "network.md", "# Network\n\n- The home router is at 192.168.1.1.\n")
    return ws


def recompute(r: SearchResult) -> float:
    """The result's score from its explain block alone (docs/retrieval-quality.md)."""
    e = r.explain
    assert e is not None
    decay = e["decay"]["multiplier"] if e["decay"] else 1.0
    decay *= e["importance"]["multiplier"] if e["importance"] else 1.0
    cal = e["calibration"]
    if cal is None:  # a per-query fusion: its fused score, decayed
        return float(e["fused"]["score"]) * decay
    score = cal["confidence"] * e["fused"]["closeness"] ** cal["rankShape"]
    if cal["cappedAtEvidence"]:
        score = min(score, cal["evidence"])
    return float(score) * decay


@pytest.mark.parametrize("fusion", ["auto", "rrf", "relative"])
@pytest.mark.parametrize("decay", [False, True])
def test_the_explain_block_recomputes_each_score(tmp_path: Path, fusion: str, decay: bool) -> None:
    ws = seed(tmp_path / "ws")
    hybrid = {"fusion": fusion, "temporalDecay": {"enabled": decay, "halfLifeDays": 30}}
    idx = index_for(agent_for(ws, {"query": {"hybrid": hybrid, "minScore": 0.0}}))
    try:
        idx.sync()
        checked = weighted = 0
        for query in QUERIES:
            out = idx.search(SearchRequest(query, explain=True))
            for r in out.results:
                e = r.explain
                assert e is not None and e["engine"] == "builtin"
                assert math.isclose(recompute(r), r.score, rel_tol=1e-9, abs_tol=1e-12)
                assert e["score"] == r.score
                if e["calibration"] is not None:
                    # a chunk's evidence is either kind's, combined as independent chances
                    kw, vec = e["keyword"]["evidence"], (e["vector"] or {}).get("evidence", 0.0)
                    assert math.isclose(
                        e["calibration"]["evidence"], 1 - (1 - kw) * (1 - vec), abs_tol=1e-12
                    )
                    assert e["calibration"]["background"]["chunks"] > 0
                if e["vector"] is not None:
                    assert -1.0 <= e["vector"]["cosine"] <= 1.0
                if decay and "2026-" in r.path:
                    assert e["decay"]["multiplier"] < 1.0
                if e["importance"] is not None:
                    weighted += 1
                checked += 1
        assert checked >= 8 and weighted >= 1
        named = idx.search(SearchRequest("network.md", explain=True)).results[0]
        assert named.explain is not None and named.explain["path"]["match"] == "file name"
    finally:
        idx.close()


def test_without_explain_nothing_changes(tmp_path: Path) -> None:
    ws = seed(tmp_path / "ws")
    idx = index_for(agent_for(ws))
    try:
        idx.sync()
        for query in QUERIES:
            plain = idx.search(query).to_dict()
            explained = idx.search(SearchRequest(query, explain=True)).to_dict()
            assert all("explain" not in r for r in plain["results"])
            assert all("explain" in r for r in explained["results"])
            for r in explained["results"]:
                del r["explain"]
            assert json.dumps(explained) == json.dumps(plain)
    finally:
        idx.close()


def cli_env(ws: Path, tmp_path: Path) -> dict[str, str]:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n[agents.defaults.memorySearch]\nprovider = "none"\n'
    )
    return {**os.environ, "MEMORYD_CONFIG": str(cfg), "MEMORYD_NO_SERVER": "1"}


def test_the_cli_prints_one_block_per_result_and_json_an_object(tmp_path: Path) -> None:
    ws = seed(tmp_path / "ws")
    env = cli_env(ws, tmp_path)
    query = "when does the old webhook secret stop working?"
    plain = run_memoryd(["search", query], env=env)
    shown = run_memoryd(["search", "--explain", query], env=env)
    assert plain.returncode == 0 and shown.returncode == 0, shown.stderr
    blocks = re.findall(r"^    explain: score ", shown.stdout, re.M)
    results = re.findall(r"^\d\.\d{3} \S+:\d+-\d+$", shown.stdout, re.M)
    assert blocks and len(blocks) == len(results)
    assert "keyword   bm25" in shown.stdout and "boosts    path" in shown.stdout
    # the same output with the blocks taken out: --explain only adds
    kept = [
        line
        for line in shown.stdout.split("\n")
        if not re.match(r"    (explain: |  (keyword|vector|fused|boosts) |  \(the lines)", line)
    ]
    assert "\n".join(kept) == plain.stdout
    as_json = run_memoryd(["search", "--json", "--explain", query], env=env)
    out = json.loads(as_json.stdout)
    assert out["results"] and all("explain" in r for r in out["results"])
    plain_json = json.loads(run_memoryd(["search", "--json", query], env=env).stdout)
    assert all("explain" not in r for r in plain_json["results"])


@pytest.mark.anyio
async def test_explain_over_mcp_and_the_socket(tmp_path: Path) -> None:
    from memoryd.server import dispatch

    ws = seed(tmp_path / "ws")
    cfg = validate_config(
        {"agents": {"defaults": {"workspace": str(ws), "memorySearch": {"provider": "none"}}}}
    )
    svc = MemoryService(cfg)
    try:
        async with Client(build_server(svc)) as client:
            got = await client.call_tool(
                "memory_search", {"query": "webhook secret", "explain": True}
            )
            data: dict[str, Any] = got.structured_content  # type: ignore[assignment]
            assert data["results"] and all("keyword" in r["explain"] for r in data["results"])
            plain = await client.call_tool("memory_search", {"query": "webhook secret"})
            assert all("explain" not in r for r in plain.structured_content["results"])  # type: ignore[index]
        me = {"config": {"path": None, "sha256": None}, "workspace": str(ws), "cwd": str(ws)}
        reply = await dispatch(
            svc,
            {"op": "search", "query": "webhook secret", "explain": True, "identity": me},
            me,
            anyio.CapacityLimiter(1),
        )
        assert reply["results"] and all("explain" in r for r in reply["results"]), reply
        refused = await dispatch(
            svc,
            {"op": "search", "query": "webhook", "explain": "yes", "identity": me},
            me,
            anyio.CapacityLimiter(1),
        )
        assert refused["code"] == "invalid_input"
    finally:
        svc.close()
