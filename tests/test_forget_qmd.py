"""`forget` and `reset` on the qmd backend, against the real qmd (BM25: no model needed).

Skips when qmd is truly absent and fails instead under CI (see `qmd_support.require_qmd`).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from memoryd.config import validate_config
from memoryd.lifecycle.forget import load_tombstones
from memoryd.orchestrator import MemoryService
from memoryd.qmd_adapter._home import QmdHome
from qmd_support import require_qmd, write
from test_forget import mark, marked

pytestmark = [pytest.mark.qmd, pytest.mark.timeout(240)]

FACT = "Alice's favourite tea shop is Kettle and Crumb on Harbour Street."


@pytest.fixture(scope="module")
def qmd_bin() -> str:
    return require_qmd()


def service(ws: Path, qmd: str) -> MemoryService:
    cfg = validate_config(
        {
            "memory": {
                "backend": "qmd",
                "qmd": {
                    "command": qmd,
                    "sessions": {"enabled": True},
                    "update": {"onBoot": False, "interval": 0},
                },
            },
            "agents": {"defaults": {"workspace": str(ws), "memorySearch": {"provider": "none"}}},
        }
    )
    return MemoryService(cfg, workspace=ws, background=False)


def seed(ws: Path) -> None:
    write(
        ws / "MEMORY.md",
        f"# Memory\n\n- {FACT}\n- Deploys go out on Fridays after the standup.\n",
    )
    write(
        ws / "memory" / "2026-11-29.md", "# 2026-11-29\n\nThe zeppelin launch slipped to April.\n"
    )


def chat(svc: MemoryService, text: str) -> Path:
    agent = svc.agent()
    agent.state.sessions_dir.mkdir(parents=True, exist_ok=True)
    path = agent.state.sessions_dir / "s1.jsonl"
    line = {"type": "message", "role": "user", "content": [{"type": "text", "text": text}]}
    path.write_text(json.dumps(line) + "\n")
    return path


def found(svc: MemoryService, query: str) -> list[dict[str, Any]]:
    out = svc.search(query, min_score=0.0)
    assert out.engine == "qmd", out
    return [r.to_dict() for r in out.results]


def qmd_itself(svc: MemoryService, qmd: str, query: str) -> list[str]:
    """What qmd's own index answers (its `search --json`), memoryd's reading of hits aside."""
    home = QmdHome(svc.agent().state.qmd_home)
    proc = subprocess.run(
        [qmd, "search", query, "--json", "-n", "20"],
        env=home.env(overrides={"CI": None}),
        cwd=home.neutral_cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return sorted(hit["file"] for hit in json.loads(proc.stdout or "[]"))


def kettle(results: list[dict[str, Any]]) -> list[str]:
    return sorted({r["path"] for r in results if "kettle" in r["snippet"].lower()})


def test_forget_removes_the_fact_from_qmd_memory_and_session_exports(
    tmp_path: Path, qmd_bin: str
) -> None:
    ws = tmp_path / "ws"
    seed(ws)
    with service(ws, qmd_bin) as svc:
        chat(svc, f"As I said: {FACT} Also, the cake goes to the office.")
        svc.index()  # exports the transcript and updates qmd
        before = kettle(found(svc, "kettle crumb harbour"))
        assert "MEMORY.md" in before and any("s1" in p for p in before), before
        assert len(qmd_itself(svc, qmd_bin, "kettle")) == 2

        plan = svc.forget_plan("kettle crumb harbour", max_results=6)
        assert [s["path"] for s in plan["selections"]] == ["MEMORY.md"]
        out = svc.forget(plan["selections"])
        assert out["engines"]["qmd"] == {"updated": True}

        assert kettle(found(svc, "kettle crumb harbour")) == []
        assert qmd_itself(svc, qmd_bin, "kettle") == []
        assert len(qmd_itself(svc, qmd_bin, "cake office")) == 1  # the rest of the chat stays
        export = svc.agent().qmd_settings().exports_dir / "s1.md"
        assert "cake goes to the office" in export.read_text()
        assert "kettle" not in export.read_text().lower()
        # another process (a fresh service) finds nothing either: qmd's own index is purged
    with service(ws, qmd_bin) as again:
        assert kettle(found(again, "kettle crumb harbour")) == []


def test_reset_rebuilds_qmd_to_the_same_answers(tmp_path: Path, qmd_bin: str) -> None:
    ws = tmp_path / "ws"
    seed(ws)
    queries = ["zeppelin launch april", "deploys fridays standup", "kettle tea shop"]
    with service(ws, qmd_bin) as svc:
        src = chat(svc, "The zeppelin hangar is behind dock nine.")
        svc.index()
        svc.forget(svc.forget_plan("MEMORY.md#L3")["selections"])
        before = [
            [(r["path"], r["startLine"], r["endLine"]) for r in found(svc, q)] for q in queries
        ]
        assert before[0] and before[1]
        agent = svc.agent()
        tombstones = load_tombstones(agent)
        qmd_db = agent.state.qmd_home / "xdg-cache" / "qmd" / "index.sqlite"
        mark(qmd_db)
        out = svc.reset()
        assert str(qmd_db) in out["removed"]
        assert not marked(qmd_db)
        after = [
            [(r["path"], r["startLine"], r["endLine"]) for r in found(svc, q)] for q in queries
        ]
        assert after == before
        assert load_tombstones(agent) == tombstones
        assert src.is_file() and FACT not in (ws / "MEMORY.md").read_text()


def test_a_qmd_that_cannot_update_makes_forget_fail_saying_what_was_removed(
    tmp_path: Path, qmd_bin: str
) -> None:
    from memoryd.errors import MemorydError
    from qmd_support import fault_wrapper

    ws = tmp_path / "ws"
    seed(ws)
    flaky = tmp_path / "flaky"
    command = fault_wrapper(
        tmp_path / "qmd",
        qmd_bin,
        f'[ -e "{flaky}" ] && [ "$1" = update ] && exit 3\nexec "$REAL" "$@"',
    )
    with service(ws, command) as svc:
        svc.index()
        plan = svc.forget_plan("MEMORY.md#L3")
        flaky.touch()
        with pytest.raises(MemorydError, match=r"removed MEMORY.md \[\[3, 3\]\].*memoryd index"):
            svc.forget(plan["selections"])
        assert FACT not in (ws / "MEMORY.md").read_text()
        flaky.unlink()
        svc.index()
        assert qmd_itself(svc, qmd_bin, "kettle") == []
