"""Isolation, tried from separate processes: two workspaces under one agent id never share state,
a `serve` answers only callers it serves, and no agent id can build a path outside the state dir.

Every reproduction from the isolation issue is a test here; each ran against 0.1 and failed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli_support import run_memoryd, spawn_memoryd
from helpers import agent_for, index_for, write
from memoryd.config import resolve_agent, validate_config
from memoryd.errors import ConfigError, InvalidAgentId, WorkspaceMismatch
from memoryd.orchestrator import MemoryService
from memoryd.paths import agent_state, socket_path, validate_agent_id, workspace_key
from memoryd.server import ping


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path]:
    a = tmp_path / "ws-a"
    b = tmp_path / "ws-b"
    write(a / "MEMORY.md", "# A\n\nThe aardvark password hint is apricot.\n")
    write(a / "memory" / "only-in-a.md", "# only A\n\nAlpha project kickoff.\n")
    write(b / "MEMORY.md", "# B\n\nThe badger password hint is blueberry.\n")
    write(b / "memory" / "only-in-b.md", "# only B\n\nBravo project kickoff.\n")
    return a, b


@pytest.fixture
def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "memoryd.toml"
    cfg.write_text('[agents.defaults.memorySearch]\nprovider = "none"\n')
    return cfg


def cli(
    *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full.pop("MEMORYD_WORKSPACE", None) if "MEMORYD_WORKSPACE" not in (env or {}) else None
    return run_memoryd(argv, env=full, cwd=cwd, timeout=120)


def search_paths(out: subprocess.CompletedProcess[str]) -> list[str]:
    assert out.returncode == 0, out.stderr
    return [r["path"] for r in json.loads(out.stdout)["results"]]


def texts(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    return " ".join(r["snippet"] for r in json.loads(out.stdout)["results"])


# ---------------------------------------------------------------- one index per workspace


def test_two_workspaces_under_one_agent_never_share_an_index(
    two: tuple[Path, Path], config: Path
) -> None:
    a, b = two
    for ws in (a, b, a, b):  # interleaved, each its own process
        assert cli("index", "--config", str(config), "--workspace", str(ws)).returncode == 0
    assert agent_state("main", a).index_db.exists() and agent_state("main", b).index_db.exists()
    assert agent_state("main", a).root != agent_state("main", b).root
    for _ in range(2):
        got_a = cli(
            "search", "--json", "--config", str(config), "--workspace", str(a), "password hint"
        )
        got_b = cli(
            "search", "--json", "--config", str(config), "--workspace", str(b), "password hint"
        )
        assert "apricot" in texts(got_a) and "blueberry" not in texts(got_a)
        assert "blueberry" in texts(got_b) and "apricot" not in texts(got_b)
    st = json.loads(cli("status", "--json", "--config", str(config), "--workspace", str(a)).stdout)
    assert st["workspaceDir"] == str(a.resolve()) and st["files"] == 2
    assert st["builtin"]["dbPath"] == str(agent_state("main", a).index_db)


def test_a_shared_store_path_is_refused_not_resynced(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = two
    shared = {"provider": "none", "store": {"path": str(tmp_path / "one.sqlite")}}
    idx = index_for(agent_for(a, shared), None)
    idx.store.close()
    with pytest.raises(WorkspaceMismatch, match=r"built for workspace .*ws-a"):
        index_for(agent_for(b, shared), None)
    # {workspaceKey} keeps one file per workspace
    keyed = {
        "provider": "none",
        "store": {"path": str(tmp_path / "{agentId}-{workspaceKey}.sqlite")},
    }
    assert agent_for(a, keyed).index_path != agent_for(b, keyed).index_path
    assert agent_for(a, keyed).index_path.name == f"main-{workspace_key(a)}.sqlite"


# ---------------------------------------------------------------- serve answers for the caller


@pytest.fixture
def served_a(
    two: tuple[Path, Path], config: Path, tmp_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    a, _ = two
    log = tmp_path / "serve.log"
    env = {**os.environ, "MEMORYD_WORKSPACE": str(a)}
    with log.open("w") as err:
        proc = spawn_memoryd(["serve", "--config", str(config)], env=env, stderr=err)
    deadline = time.monotonic() + 30
    while ping(socket_path()) is None:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "serve did not come up"
        time.sleep(0.1)
    yield proc
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)


def test_forwarding_answers_for_the_callers_workspace(
    two: tuple[Path, Path], config: Path, served_a: subprocess.Popen[bytes]
) -> None:
    a, b = two
    base = ("--json", "--config", str(config))
    # the served workspace: answered by serve
    st = json.loads(cli("status", *base, env={"MEMORYD_WORKSPACE": str(a)}).stdout)
    assert st["servedBy"].startswith("serve (pid") and st["workspaceDir"] == str(a.resolve())
    # another workspace, by env or by cwd: never answered from A
    by_env = cli("search", *base, "password hint", env={"MEMORYD_WORKSPACE": str(b)})
    assert "blueberry" in texts(by_env) and "apricot" not in texts(by_env)
    by_cwd = cli("search", *base, "password hint", cwd=b)
    assert "blueberry" in texts(by_cwd) and "apricot" not in texts(by_cwd)
    got = cli("get", *base, "memory/only-in-b.md", cwd=b)
    assert got.returncode == 0 and "Bravo" in json.loads(got.stdout)["text"]
    st_b = json.loads(cli("status", *base, cwd=b).stdout)
    assert st_b.get("servedBy") is None and st_b["workspaceDir"] == str(b.resolve())
    # another config file is not this serve's either
    other = config.with_name("other.toml")
    other.write_text(config.read_text() + "\n")
    st_other = json.loads(cli("status", "--json", "--config", str(other), cwd=a).stdout)
    assert st_other.get("servedBy") is None


# ---------------------------------------------------------------- agent ids


BAD_IDS = [
    "../../etc",
    "../x",
    "a/b",
    "",
    ".",
    "..",
    "x" * 65,
    "-leading-dash",
    "a b",
    "a\x00b",
    "ö",
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_agent_ids_are_refused_everywhere_they_enter(bad: str, workspace: Path) -> None:
    with pytest.raises(InvalidAgentId, match="letters, digits"):
        validate_agent_id(bad)
    with pytest.raises(ConfigError):
        resolve_agent(validate_config({}), bad, workspace=workspace)
    with pytest.raises(ConfigError):
        validate_config({"agents": {"list": [{"id": bad}]}})


@pytest.mark.parametrize(
    "argv",
    [
        ("search", "tea"),
        ("get", "MEMORY.md"),
        ("status",),
        ("index",),
        ("append", "hello"),
        ("context",),
        ("flush-check", "--tokens", "190000", "--context-window", "200000"),
        ("forget", "MEMORY.md#L3"),
        ("reset", "--yes"),
    ],
)
def test_the_cli_refuses_a_path_like_agent_id_and_writes_nothing(
    argv: tuple[str, ...], workspace: Path, isolated_env: Path, tmp_path: Path
) -> None:
    write(workspace / "MEMORY.md", "# M\n\ntea\n")
    before = set(tmp_path.rglob("*"))
    out = cli(argv[0], "--workspace", str(workspace), "--agent", "../../x", *argv[1:])
    assert out.returncode != 0
    assert out.stderr.startswith("memoryd: error: invalid agent id '../../x'")
    assert "Traceback" not in out.stderr
    created = set(tmp_path.rglob("*")) - before
    assert not [p for p in created if not p.is_relative_to(isolated_env)], created
    assert not (isolated_env.parent / "x").exists() and not (tmp_path.parent / "x").exists()


@pytest.mark.anyio
async def test_python_api_and_socket_refuse_bad_ids(workspace: Path) -> None:
    import anyio

    from memoryd.server import dispatch

    write(workspace / "MEMORY.md", "# M\n\ntea\n")
    svc = MemoryService(validate_config({}), workspace=workspace)
    out = svc.memory_search("tea", agent_id="../../etc")
    assert out["disabled"] and out["code"] == "invalid_agent_id"
    got = svc.memory_get("MEMORY.md", agent_id="../x")
    assert got["disabled"] and got["code"] == "invalid_agent_id"
    reply: dict[str, Any] = await dispatch(
        svc, {"op": "search", "query": "tea", "agent": "../x"}, {}, anyio.CapacityLimiter(1)
    )
    assert reply["code"] == "invalid_agent_id"
    svc.close()


def test_agent_ids_are_case_insensitive(workspace: Path) -> None:
    assert validate_agent_id("Ops_Bot-2") == "ops_bot-2"
    cfg = validate_config({"agents": {"list": [{"id": "Ops"}]}})
    assert resolve_agent(cfg, "OPS", workspace=workspace).agent_id == "ops"
    with pytest.raises(ConfigError, match="duplicate agent id"):
        validate_config({"agents": {"list": [{"id": "ops"}, {"id": "OPS"}]}})
