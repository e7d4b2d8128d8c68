"""One table of bad inputs fed to every surface — the CLI, MCP over stdio and over HTTP, the serve
socket and the Python API — each answering with the same stable `code`.

A surface may phrase its message its own way; it may not disagree about *whether* an input is
acceptable or what kind of failure it is.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from cli_support import launcher_argv, run_memoryd, spawn_memoryd
from helpers import write
from memoryd.config import validate_config
from memoryd.orchestrator import MemoryService
from memoryd.server import ping, request

# (tool, arguments, the CLI's argv for the same call or None, expected code)
CASES: list[tuple[str, dict[str, Any], list[str] | None, str]] = [
    ("memory_search", {"query": "   "}, ["search", "   "], "invalid_input"),
    ("memory_search", {"query": "x" * 2001}, ["search", "x" * 2001], "invalid_input"),
    (
        "memory_search",
        {"query": "x", "maxResults": 0},
        ["search", "x", "--max-results", "0"],
        "invalid_input",
    ),
    (
        "memory_search",
        {"query": "x", "maxResults": 101},
        ["search", "x", "--max-results", "101"],
        "invalid_input",
    ),
    (
        "memory_search",
        {"query": "x", "minScore": 2},
        ["search", "x", "--min-score", "2"],
        "invalid_input",
    ),
    (
        "memory_search",
        {"query": "x", "minScore": -0.1},
        ["search", "x", "--min-score", "-0.1"],
        "invalid_input",
    ),
    ("memory_search", {"query": "x", "bogus": 1}, None, "invalid_input"),
    ("memory_search", {"query": 5}, None, "invalid_input"),
    ("memory_get", {"path": "../etc/passwd.md"}, ["get", "../etc/passwd.md"], "path_not_allowed"),
    ("memory_get", {"path": "README.md"}, ["get", "README.md"], "path_not_allowed"),
    ("memory_get", {"path": "memory/notes.txt"}, ["get", "memory/notes.txt"], "path_not_allowed"),
    (
        "memory_get",
        {"path": "MEMORY.md", "from": 0},
        ["get", "MEMORY.md", "--from", "0"],
        "invalid_input",
    ),
    (
        "memory_get",
        {"path": "MEMORY.md", "lines": 0},
        ["get", "MEMORY.md", "--lines", "0"],
        "invalid_input",
    ),
    ("memory_get", {"path": "MEMORY.md", "dryRun": True}, None, "invalid_input"),
    ("memory_get", {"path": 7}, None, "invalid_input"),
]
IDS = [f"{tool}-{i}" for i, (tool, *_rest) in enumerate(CASES)]
# cases the CLI can spell (the others are flags it does not have: argparse refuses them as usage)
CLI_CASES = [(c, i) for c, i in zip(CASES, IDS, strict=True) if c[2] is not None]
SOCKET_OPS = {"memory_search": "search", "memory_get": "get"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("surfaces")
    ws = root / "ws"
    write(ws / "MEMORY.md", "# Memory\n\nThe deploy target is fly.io.\n")
    write(ws / "memory" / "2026-11-29.md", "# 2026-11-29\n\nRotated the webhook secret.\n")
    cfg = root / "memoryd.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n[agents.defaults.memorySearch]\nprovider = "none"\n'
    )
    env = {**os.environ, "MEMORYD_STATE_DIR": str(root / "state"), "XDG_CONFIG_HOME": str(root)}
    env.pop("MEMORYD_WORKSPACE", None)
    procs: list[subprocess.Popen[bytes]] = []
    err = root / "http.log"
    with err.open("w") as fh:
        procs.append(
            spawn_memoryd(
                ["mcp", "--config", str(cfg), "--http", "0"],
                stdin=subprocess.DEVNULL,
                stderr=fh,
                env=env,
            )
        )
    with (root / "serve.log").open("w") as fh:
        procs.append(spawn_memoryd(["serve", "--config", str(cfg)], stderr=fh, env=env))
    deadline = time.monotonic() + 60
    url = None
    sock = root / "state" / "memoryd.sock"
    while url is None or ping(sock) is None:
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+/mcp)", err.read_text())
        url = found.group(1) if found else None
        assert all(p.poll() is None for p in procs), (
            err.read_text(),
            (root / "serve.log").read_text(),
        )
        assert time.monotonic() < deadline, "surfaces did not come up"
        time.sleep(0.1)
    from hashlib import sha256

    identity = {
        "config": {"path": str(cfg), "sha256": sha256(cfg.read_bytes()).hexdigest()},
        "workspace": None,
        "cwd": str(ws),
    }
    yield {"ws": ws, "cfg": cfg, "env": env, "url": url, "sock": sock, "identity": identity}
    for p in procs:
        p.send_signal(signal.SIGTERM)
        p.wait(30)


async def _mcp_calls(client_arg: Any) -> list[dict[str, Any]]:
    out = []
    async with Client(client_arg) as client:
        for tool, args, _cli, _code in CASES:
            result = await client.call_tool(tool, args)
            assert result.is_error is True, result  # every case is a failure: a tool error
            out.append(result.structured_content)
    return out


def test_mcp_stdio(world: dict[str, Any]) -> None:
    command = launcher_argv(["mcp", "--config", str(world["cfg"])])
    params = StdioServerParameters(command=command[0], args=command[1:], env=world["env"])
    got = anyio.run(_mcp_calls, params)
    assert [g["code"] for g in got] == [c[3] for c in CASES]
    assert all(g["disabled"] is True for g in got)


def test_mcp_http(world: dict[str, Any]) -> None:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    token = (Path(world["env"]["MEMORYD_STATE_DIR"]) / "mcp-token").read_text().strip()

    async def calls() -> list[dict[str, Any]]:
        http = create_mcp_http_client({"Authorization": f"Bearer {token}"})
        async with http:
            return await _mcp_calls(streamable_http_client(world["url"], http_client=http))

    got = anyio.run(calls)
    assert [g["code"] for g in got] == [c[3] for c in CASES]


@pytest.mark.parametrize(("tool", "args", "cli", "code"), CASES, ids=IDS)
def test_socket(
    world: dict[str, Any], tool: str, args: dict[str, Any], cli: Any, code: str
) -> None:
    reply = request(world["sock"], {"op": SOCKET_OPS[tool], **args, "identity": world["identity"]})
    assert reply is not None and reply.get("code") == code and reply.get("disabled"), reply


@pytest.mark.parametrize(
    ("tool", "args", "cli", "code"), [c for c, _ in CLI_CASES], ids=[i for _, i in CLI_CASES]
)
def test_cli(world: dict[str, Any], tool: str, args: dict[str, Any], cli: Any, code: str) -> None:
    for forwarded in (True, False):
        env = dict(world["env"])
        if not forwarded:
            env["MEMORYD_NO_SERVER"] = "1"
        out = run_memoryd(
            [*cli, "--config", str(world["cfg"]), "--json"], env=env, cwd=world["ws"], timeout=120
        )
        assert out.returncode == 2, (forwarded, out.stderr)
        assert out.stderr.count("\n") == 1 and out.stderr.startswith("memoryd"), out.stderr
        assert json.loads(out.stdout)["code"] == code, (forwarded, out.stdout)


@pytest.mark.parametrize(("tool", "args", "cli", "code"), CASES, ids=IDS)
def test_python_api(
    world: dict[str, Any], tool: str, args: dict[str, Any], cli: Any, code: str
) -> None:
    from memoryd.errors import InvalidInput
    from memoryd.tools import validate_tool_input

    svc = MemoryService(
        validate_config(
            {
                "agents": {
                    "defaults": {
                        "workspace": str(world["ws"]),
                        "memorySearch": {"provider": "none"},
                    }
                }
            }
        )
    )
    try:
        try:
            parsed = validate_tool_input(tool, args)
        except InvalidInput as err:
            assert code == err.code
            return
        if tool == "memory_search":
            got = svc.memory_search(
                parsed.query, max_results=parsed.max_results, min_score=parsed.min_score
            )  # type: ignore[attr-defined]
        else:
            got = svc.memory_get(parsed.path, from_line=parsed.from_line, lines=parsed.lines)  # type: ignore[attr-defined]
        assert got["code"] == code
    finally:
        svc.close()
