"""`memoryd mcp`: validated tools in a real client session, one-line startup errors, a handshake
that never waits for memory, Streamable HTTP with qmd's Origin/Host screen, and clean stops."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from cli_support import spawn_memoryd
from memoryd.cli import parse_http_address
from memoryd.config import validate_config
from memoryd.mcp_server import (
    OriginGuard,
    build_server,
    check_request_origin,
    is_loopback_hostname,
    resolve_origin_guard,
)
from memoryd.orchestrator import MemoryService
from memoryd.tools import TOOLS, input_schema
from second_user import as_nobody, needs_root

SIX_TOOLS = [
    "memory_search",
    "memory_get",
    "memory_append",
    "memory_context",
    "memory_flush_check",
    "memory_status",
]


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / "MEMORY.md").write_text("# Memory\nThe deploy target is fly.io.\nSecond line.\n")
    (workspace / "memory" / "2026-11-29.md").write_text(
        "# 2026-11-29\nRotated the webhook secret today.\nThe deploy went fine.\n"
    )
    return workspace


def keyword_service(ws: Path) -> MemoryService:
    cfg = validate_config(
        {"agents": {"defaults": {"workspace": str(ws), "memorySearch": {"provider": "none"}}}}
    )
    return MemoryService(cfg)


def structured(result: Any) -> dict[str, Any]:
    data: dict[str, Any] = result.structured_content
    # hosts that ignore structuredContent read the same JSON as text
    assert json.loads(result.content[0].text) == data
    return data


# ----------------------------------------------------------------------------- in-process


@pytest.mark.anyio
async def test_tools_list_advertises_six_tools_with_the_contract_schemas(ws: Path) -> None:
    svc = keyword_service(ws)
    async with Client(build_server(svc)) as client:
        tools = (await client.list_tools()).tools
    svc.close()
    assert [t.name for t in tools] == SIX_TOOLS
    for tool in tools:
        assert tool.input_schema == input_schema(tool.name)
        assert tool.input_schema["additionalProperties"] is False
        assert tool.description == TOOLS[tool.name].description
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is TOOLS[tool.name].read_only
    assert {t.name for t in tools if t.annotations and not t.annotations.read_only_hint} == {
        "memory_append",
        "memory_flush_check",
    }


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    # what MCP used to accept (2 results, 1 result, silently ignored arguments)
    ("memory_search", {"query": "deploy", "maxResults": 0}, "maxResults must be ≥ 1"),
    ("memory_search", {"query": "deploy", "minScore": 2}, "minScore must be ≤ 1"),
    ("memory_search", {"query": "deploy", "bogus": 1}, "unknown argument 'bogus'"),
    ("memory_search", {"query": "deploy", "dryRun": True}, "unknown argument 'dryRun'"),
    ("memory_search", {"query": "deploy", "maxResult": 2}, "did you mean 'maxResults'?"),
    # what used to come back as raw pydantic text with isError
    ("memory_search", {"query": "deploy", "maxResults": "lots"}, "maxResults must be an integer"),
    ("memory_search", {"query": " "}, "query must not be empty"),
    ("memory_get", {"path": "MEMORY.md", "from": 0}, "from must be ≥ 1"),
    ("memory_get", {"path": "MEMORY.md", "lines": 0}, "lines must be ≥ 1"),
    ("memory_get", {}, "path is required"),
    ("memory_append", {"target": "weekly", "text": "x"}, "target must be one of"),
    ("memory_append", {"target": "daily"}, "text is required"),
    ("memory_context", {"sessionKey": 3}, "sessionKey must be a string"),
    ("memory_context", {"session": "agent:main:main"}, "unknown argument 'session'"),
    ("memory_flush_check", {"tokenEstimate": 5}, "contextWindow is required"),
    ("memory_flush_check", {"tokenEstimate": -1, "contextWindow": 9}, "tokenEstimate must be ≥ 0"),
    ("memory_status", {"deep": True}, "memory_status takes no arguments"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("tool", "args", "message"), BAD_CALLS)
async def test_bad_input_on_every_tool_is_a_structured_invalid_input_result(
    ws: Path, tool: str, args: dict[str, Any], message: str
) -> None:
    svc = keyword_service(ws)
    async with Client(build_server(svc)) as client:
        result = await client.call_tool(tool, args)
    svc.close()
    assert result.is_error is True  # a failed call is a tool error, whatever the host reads
    data = structured(result)
    assert set(data) == {"disabled", "error", "code"}
    assert data["disabled"] is True and data["code"] == "invalid_input"
    assert message in data["error"] and "pydantic" not in data["error"]


@pytest.mark.anyio
async def test_nothing_is_written_when_an_append_is_rejected(ws: Path) -> None:
    before = sorted(p.name for p in (ws / "memory").iterdir())
    svc = keyword_service(ws)
    async with Client(build_server(svc)) as client:
        await client.call_tool("memory_append", {"target": "daily", "text": "x", "dryRun": 1})
    svc.close()
    assert sorted(p.name for p in (ws / "memory").iterdir()) == before


@pytest.mark.anyio
async def test_valid_bounds_reach_the_service(ws: Path) -> None:
    svc = keyword_service(ws)
    async with Client(build_server(svc)) as client:
        one = structured(
            await client.call_tool("memory_search", {"query": "deploy", "maxResults": 1})
        )
        two = structured(
            await client.call_tool("memory_search", {"query": "deploy", "maxResults": 2})
        )
        mem = structured(
            await client.call_tool("memory_search", {"query": "deploy", "corpus": "memory"})
        )
        got = structured(
            await client.call_tool("memory_get", {"path": "MEMORY.md", "from": 2, "lines": 1})
        )
    svc.close()
    assert len(one["results"]) == 1 and len(two["results"]) == 2
    assert {r["path"] for r in mem["results"]} == {"MEMORY.md", "memory/2026-11-29.md"}
    assert got == {"path": "MEMORY.md", "text": "The deploy target is fly.io.\n"}


@pytest.mark.anyio
async def test_corpus_selects_what_is_searched_and_get_never_reads_transcripts(ws: Path) -> None:
    svc = keyword_service(ws)
    async with Client(build_server(svc)) as client:
        sessions = structured(
            await client.call_tool("memory_search", {"query": "deploy", "corpus": "sessions"})
        )
        everything = structured(
            await client.call_tool("memory_search", {"query": "deploy", "corpus": "all"})
        )
        get = structured(
            await client.call_tool("memory_get", {"path": "MEMORY.md", "corpus": "sessions"})
        )
    svc.close()
    assert sessions["results"] == []  # transcripts are not a source of this agent
    assert {r["path"] for r in everything["results"]} == {"MEMORY.md", "memory/2026-11-29.md"}
    assert get["code"] == "invalid_input" and "never readable" in get["error"]


@pytest.mark.anyio
async def test_an_unknown_tool_is_a_protocol_error(ws: Path) -> None:
    svc = keyword_service(ws)
    async with Client(build_server(svc)) as client:
        with pytest.raises(MCPError, match="Unknown tool: memory_delete"):
            await client.call_tool("memory_delete", {})
    svc.close()


@pytest.mark.anyio
async def test_a_service_factory_runs_on_the_first_tool_call_not_on_listing(ws: Path) -> None:
    built: list[MemoryService] = []

    def factory() -> MemoryService:
        built.append(keyword_service(ws))
        return built[-1]

    async with Client(build_server(factory)) as client:
        await client.list_tools()
        await client.call_tool("memory_search", {"query": "x", "maxResults": 0})
        assert built == []  # neither listing nor a rejected call needs memory
        st = structured(await client.call_tool("memory_status", {}))
        await client.call_tool("memory_status", {})
    assert len(built) == 1 and st["backend"] == "builtin"
    built[0].close()


# ----------------------------------------------------------------------------- processes


def write_config(tmp_path: Path, ws: Path, extra: str = "") -> Path:
    cfg = tmp_path / "memoryd.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n'
        '[agents.defaults.memorySearch]\nprovider = "none"\n' + extra
    )
    return cfg


def memoryd(*argv: str) -> list[str]:
    return [sys.executable, "-m", "memoryd", *argv]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Running:
    proc: subprocess.Popen[str]
    stderr: Path

    def err(self) -> str:
        return self.stderr.read_text()

    def wait_for_stderr(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.err())
            if found:
                return found
            assert self.proc.poll() is None, f"memoryd exited: {self.err()}"
            assert time.monotonic() < deadline, f"no {pattern!r} on stderr: {self.err()}"
            time.sleep(0.05)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> tuple[int, float]:
        sent = time.monotonic()
        self.proc.send_signal(sig)
        # a hang detector, not a speed target: a stop that waits for input would never end
        rc = self.proc.wait(30)
        return rc, time.monotonic() - sent


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Any]:
    started: list[Running] = []

    def run(*argv: str, stdin: int | IO[str] | None = subprocess.PIPE) -> Running:
        err = tmp_path / f"stderr-{len(started)}.txt"
        with err.open("w") as err_file:
            proc = spawn_memoryd(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=err_file)
        started.append(Running(proc, err))
        return started[-1]

    yield run
    for r in started:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait(10)
        for stream in (r.proc.stdin, r.proc.stdout):
            if stream is not None:
                stream.close()


def rpc(proc: subprocess.Popen[str], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()


def read_reply(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "memoryd closed stdout"
    reply: dict[str, Any] = json.loads(line)
    return reply


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test_mcp", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def startup_cases(tmp_path: Path, ws: Path) -> dict[str, tuple[list[str], str]]:
    bad = tmp_path / "bad.toml"
    bad.write_text('[agents.defaults.memorySearch]\nprovder = "none"\n')
    agents = write_config(tmp_path, ws, '[[agents.list]]\nid = "work"\n')
    return {
        "no workspace": (
            ["--workspace", str(tmp_path / "nope")],
            f"memoryd: error: workspace {tmp_path / 'nope'} does not exist or is not a directory",
        ),
        "bad config": (
            ["--config", str(bad)],
            f"memoryd: error: invalid {bad}: agents.defaults.memorySearch.provder: unknown key",
        ),
        "missing config": (
            ["--config", str(tmp_path / "missing.toml")],
            "memoryd: error: config file not found:",
        ),
        "unknown agent": (
            ["--config", str(agents), "--agent", "play"],
            "memoryd: error: unknown agent 'play' (configured: work)",
        ),
    }


@pytest.mark.parametrize("case", ["no workspace", "bad config", "missing config", "unknown agent"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_startup_errors_are_one_line_and_exit_1(
    tmp_path: Path, ws: Path, case: str, transport: str
) -> None:
    argv, message = startup_cases(tmp_path, ws)[case]
    if transport == "http":
        argv = [*argv, "--http", "127.0.0.1:0"]
    out = subprocess.run(
        memoryd("mcp", *argv), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1
    assert out.stderr.startswith(message), out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stdout == ""


def test_http_refuses_a_non_loopback_bind_unless_asked(tmp_path: Path, ws: Path) -> None:
    cfg = write_config(tmp_path, ws)
    out = subprocess.run(
        memoryd("mcp", "--config", str(cfg), "--http", f"0.0.0.0:{free_port()}"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith(
        "memoryd: error: refusing to serve MCP on non-loopback address '0.0.0.0'"
    )
    assert "--allow-remote" in out.stderr


def test_http_reports_a_busy_port_in_one_line(tmp_path: Path, ws: Path) -> None:
    cfg = write_config(tmp_path, ws)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run(
            memoryd("mcp", "--config", str(cfg), "--http", str(port)),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert out.stderr.startswith(f"memoryd: error: cannot listen on 127.0.0.1:{port}:")


@pytest.mark.parametrize("value", ["abc", "127.0.0.1:99999", "::1:80", ":80"])
def test_a_malformed_http_address_is_a_usage_error(value: str) -> None:
    out = subprocess.run(
        memoryd("mcp", "--http", value), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "argument --http" in out.stderr


def test_help_describes_every_tool_with_examples() -> None:
    out = subprocess.run(memoryd("mcp", "--help"), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for spec in TOOLS.values():
        assert spec.name in out.stdout and spec.summary in out.stdout
    assert "examples:" in out.stdout and "memoryd mcp --http 8181" in out.stdout
    assert "--allow-remote" in out.stdout


def test_initialize_is_answered_before_memory_starts_loading(
    spawn: Any, tmp_path: Path, ws: Path
) -> None:
    r = spawn("mcp", "--config", str(write_config(tmp_path, ws)), "-v")
    rpc(r.proc, INITIALIZE)
    reply = read_reply(r.proc)
    assert reply["result"]["serverInfo"]["name"] == "memoryd"
    assert reply["result"]["capabilities"]["tools"] is not None
    # the service (numpy, SQLite, the index sync) starts only once the handshake is done...
    assert "memory service started" not in r.err()
    rpc(r.proc, INITIALIZED)
    # ...and then by itself, without waiting for a tool call
    r.wait_for_stderr(r"memory service started in [\d.]+s")
    rpc(
        r.proc,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "memory_search", "arguments": {"query": "webhook"}},
        },
    )
    hits = read_reply(r.proc)["result"]["structuredContent"]
    assert hits["results"][0]["path"] == "memory/2026-11-29.md"
    rc, _ = r.stop()
    assert rc == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stdio_stops_on_a_signal_while_the_host_sends_nothing(
    spawn: Any, tmp_path: Path, ws: Path, sig: signal.Signals
) -> None:
    r = spawn("mcp", "--config", str(write_config(tmp_path, ws)))
    rpc(r.proc, INITIALIZE)
    read_reply(r.proc)
    rpc(r.proc, INITIALIZED)
    rc, _ = r.stop(sig)
    assert rc == 0
    assert f"memoryd mcp: {sig.name}, shutting down" in r.err()
    assert "Traceback" not in r.err()


PUMP_CANCELLED = """
import os, threading, anyio
r, w = os.pipe()
os.dup2(r, 0)
errors = []
threading.excepthook = lambda a: errors.append(f"{a.thread.name}: {a.exc_value!r}")
from memoryd.mcp_server import _StdinLines
async def main():
    _StdinLines()
    os.write(w, b'{"jsonrpc": "2.0"}\\n')
    await anyio.sleep(0.2)  # the stdin thread waits to hand over a line nobody takes
anyio.run(main)  # the run ends: the pending hand-over is cancelled
import time; time.sleep(0.2)
print(errors)
"""


def test_the_stdin_thread_stops_quietly_when_shutdown_cancels_a_pending_line() -> None:
    # the signal-stop test above failed now and then this way: a line read just before the
    # signal was still being handed over when the loop stopped, and its thread printed a traceback
    proc = subprocess.run(
        [sys.executable, "-c", PUMP_CANCELLED], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_stdio_exits_cleanly_when_the_host_closes_stdin(
    spawn: Any, tmp_path: Path, ws: Path
) -> None:
    r = spawn("mcp", "--config", str(write_config(tmp_path, ws)))
    rpc(r.proc, INITIALIZE)
    read_reply(r.proc)
    assert r.proc.stdin is not None
    r.proc.stdin.close()
    assert r.proc.wait(30) == 0
    assert r.err() == ""


def test_requests_written_before_the_host_closes_stdin_are_answered(
    spawn: Any, tmp_path: Path, ws: Path
) -> None:
    """`printf '…' | memoryd mcp`: every request gets its answer, then a clean exit (the SDK
    alone ends the session at EOF and answers what is still running "Connection closed")."""
    r = spawn("mcp", "--config", str(write_config(tmp_path, ws)))
    calls = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "memory_search", "arguments": {"query": "webhook secret"}},
        },
        {
            "jsonrpc": "2.0",
            "id": "2",  # another id than 2
            "method": "tools/call",
            "params": {"name": "memory_get", "arguments": {"path": "../x/MEMORY.md"}},
        },
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list"},
    ]
    assert r.proc.stdin is not None and r.proc.stdout is not None
    r.proc.stdin.write("".join(json.dumps(c) + "\n" for c in calls))
    r.proc.stdin.close()  # at once: the search has not even started
    replies = [json.loads(line) for line in r.proc.stdout]
    assert r.proc.wait(60) == 0
    by_id = {json.dumps(m["id"]): m for m in replies}
    assert sorted(by_id) == sorted(["1", "2", '"2"', "4"]), replies
    assert all("error" not in m for m in replies), replies
    found = structured_reply(by_id["2"])
    assert found["results"][0]["path"] == "memory/2026-11-29.md"
    assert structured_reply(by_id['"2"'])["code"] == "path_not_allowed"


def structured_reply(reply: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = reply["result"]["structuredContent"]
    return out


def test_stdio_with_the_sdk_client(tmp_path: Path, ws: Path) -> None:
    import anyio
    from mcp import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd", "mcp", "--config", str(write_config(tmp_path, ws))],
        env=dict(os.environ),
    )

    async def session() -> tuple[list[str], dict[str, Any], dict[str, Any]]:
        async with Client(params) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            bad = structured(
                await client.call_tool("memory_get", {"path": "MEMORY.md", "lines": 0})
            )
            ok = structured(await client.call_tool("memory_get", {"path": "MEMORY.md", "lines": 1}))
        return names, bad, ok

    names, bad, ok = anyio.run(session)
    assert names == SIX_TOOLS
    assert bad["code"] == "invalid_input" and ok == {"path": "MEMORY.md", "text": "# Memory\n"}


# ----------------------------------------------------------------------------- HTTP


@pytest.fixture
def http_server(spawn: Any, tmp_path: Path, ws: Path) -> Iterator[tuple[Running, str]]:
    r = spawn(
        "mcp", "--config", str(write_config(tmp_path, ws)), "--http", "0", stdin=subprocess.DEVNULL
    )
    url = r.wait_for_stderr(r"listening on (http://127\.0\.0\.1:\d+/mcp)").group(1)
    yield r, url


def authed(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextlib.asynccontextmanager
async def http_client(url: str, token: str) -> AsyncIterator[Client]:
    """An MCP SDK client for `url` that sends the bearer token."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(authed(token))  # ours to close, not the SDK's
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def the_token(state: Path) -> str:
    return (state / "mcp-token").read_text().strip()


@contextlib.contextmanager
def serving_http(config: Path, env: dict[str, str], err: Path) -> Iterator[str]:
    """`memoryd mcp --http 0` in a process with `env`, stderr to `err`: its URL, until exit."""
    with err.open("w") as err_file:
        proc = subprocess.Popen(
            memoryd("mcp", "--config", str(config), "--http", "0"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err_file,
            env=env,
        )
    try:
        r = Running(proc, err)  # type: ignore[arg-type]
        yield r.wait_for_stderr(r"listening on (http://127\.0\.0\.1:\d+/mcp)").group(1)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def shared_http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """One server for the many header checks (each process start costs seconds here)."""
    root = tmp_path_factory.mktemp("shared_http")
    ws = root / "workspace"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n")
    env = {**os.environ, "MEMORYD_STATE_DIR": str(root / "state"), "XDG_CONFIG_HOME": str(root)}
    with serving_http(write_config(root, ws), env, root / "stderr.txt") as url:
        yield url, the_token(root / "state")


def test_http_serves_the_tools_to_the_sdk_client(http_server: tuple[Running, str]) -> None:
    import anyio

    r, url = http_server

    async def session() -> tuple[list[str], dict[str, Any], dict[str, Any]]:
        async with http_client(url, the_token(Path(os.environ["MEMORYD_STATE_DIR"]))) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            bad = structured(await client.call_tool("memory_search", {"query": "x", "bogus": 1}))
            hits = structured(await client.call_tool("memory_search", {"query": "webhook"}))
        return names, bad, hits

    names, bad, hits = anyio.run(session)
    assert names == SIX_TOOLS
    assert bad["code"] == "invalid_input" and "unknown argument 'bogus'" in bad["error"]
    assert hits["results"][0]["path"] == "memory/2026-11-29.md"
    rc, _ = r.stop()
    assert rc == 0 and "Traceback" not in r.err()


def test_http_health(shared_http: tuple[str, str]) -> None:
    url, _token = shared_http
    got = httpx.get(url.removesuffix("/mcp") + "/health", timeout=30)
    assert got.status_code == 200
    assert got.json()["status"] == "ok" and got.json()["version"]


HEADER_CASES: list[tuple[dict[str, str], int, str]] = [
    ({}, 200, ""),
    ({"Origin": "http://localhost:5173"}, 200, ""),
    ({"Origin": "http://127.0.0.1:6274"}, 200, ""),
    ({"Origin": "http://evil.example"}, 403, "Forbidden: Origin not allowed: http://evil.example"),
    ({"Origin": "http://0.0.0.0:8181"}, 403, "Forbidden: Origin not allowed: http://0.0.0.0:8181"),
    ({"Origin": "null"}, 403, "Forbidden: Origin not allowed: null"),
    ({"Host": "evil.example:8181"}, 403, "Forbidden: Host not allowed: evil.example:8181"),
    ({"Host": "localhost"}, 200, ""),
    ({"Host": "127.0.0.2:1"}, 200, ""),
]


@pytest.mark.parametrize(("headers", "status", "message"), HEADER_CASES)
@pytest.mark.parametrize("path", ["/health", "/mcp"])
def test_http_rejects_foreign_origin_and_host_headers(
    shared_http: tuple[str, str], headers: dict[str, str], status: int, message: str, path: str
) -> None:
    url, token = shared_http
    base = url.removesuffix("/mcp")
    if path == "/health":
        got = httpx.get(base + path, headers=headers, timeout=30)
    else:
        got = httpx.post(
            base + path,
            headers={
                **headers,
                **authed(token),
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
            content=json.dumps(INITIALIZE),
            timeout=30,
        )
    if status == 403:
        assert got.status_code == 403
        assert got.json() == {
            "jsonrpc": "2.0",
            "error": {"code": -32003, "message": message},
            "id": None,
        }
    else:
        assert got.status_code == 200, got.text


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """A throwaway certificate and key for 127.0.0.1 (openssl's CLI; CI must have it)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    try:
        subprocess.run(
            [
                *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
                *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
                *("-keyout", str(key), "-out", str(cert)),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
    except FileNotFoundError:
        if os.environ.get("CI"):
            pytest.fail("CI needs openssl to make a test certificate", pytrace=False)
        pytest.skip("openssl is not installed")
    return cert, key


def test_http_on_a_wildcard_bind_when_asked_with_tls_extra_origins_and_hosts(
    spawn: Any, tmp_path: Path, ws: Path
) -> None:
    cert, key = self_signed_cert(tmp_path)
    r = spawn(
        "mcp",
        "--config",
        str(write_config(tmp_path, ws)),
        "--http",
        "0.0.0.0:0",
        "--allow-remote",
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
        "--allow-origin",
        "https://app.example",
        "--allow-host",
        "box.lan",
        stdin=subprocess.DEVNULL,
    )
    port = r.wait_for_stderr(r"listening on https://0\.0\.0\.0:(\d+)/mcp").group(1)
    health = f"https://127.0.0.1:{port}/health"

    trust = ssl.create_default_context(cafile=str(cert))

    def status(**headers: str) -> int:
        return httpx.get(health, headers=headers, timeout=30, verify=trust).status_code

    with pytest.raises(httpx.RemoteProtocolError):  # plain HTTP gets nothing on a TLS port
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=30)
    token = the_token(Path(os.environ["MEMORYD_STATE_DIR"]))
    mcp_url = f"https://127.0.0.1:{port}/mcp"
    post = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    assert httpx.post(mcp_url, headers=post, json=INITIALIZE, verify=trust).status_code == 401
    ok = httpx.post(mcp_url, headers={**post, **authed(token)}, json=INITIALIZE, verify=trust)
    assert ok.status_code == 200, ok.text

    assert status() == 200
    assert status(Host=f"box.lan:{port}") == 200
    assert status(Host="other.lan") == 403
    assert status(Origin="https://app.example") == 200
    assert status(Origin="https://evil.example") == 403
    rc, _ = r.stop()
    assert rc == 0


@pytest.mark.parametrize(
    ("extra", "status", "message"),
    [
        # flags that cannot go together: a usage error, as a non-loopback bind without them
        (["--allow-remote"], 2, "--allow-remote needs TLS (--tls-cert FILE --tls-key FILE)"),
        (["--allow-remote", "--tls-cert", "c.pem"], 2, "--tls-cert and --tls-key go together"),
        (
            ["--allow-remote", "--tls-cert", "nowhere.pem", "--tls-key", "nowhere.key"],
            1,
            "--tls-cert nowhere.pem: no such file",
        ),
        (
            ["--allow-remote", "--tls-cert", "garbage.pem", "--tls-key", "garbage.key"],
            1,
            "cannot use --tls-cert garbage.pem with --tls-key garbage.key",
        ),
    ],
)
def test_http_allow_remote_without_tls_is_refused_in_one_line(
    tmp_path: Path, ws: Path, extra: list[str], status: int, message: str
) -> None:
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    (tmp_path / "garbage.key").write_text("not a key\n")
    out = subprocess.run(
        memoryd("mcp", "--config", str(write_config(tmp_path, ws)), "--http", "0.0.0.0:0", *extra),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == status and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"memoryd: error: {message}"), out.stderr


POST = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def test_http_requires_the_bearer_token_and_never_logs_a_wrong_one(
    spawn: Any, tmp_path: Path, ws: Path
) -> None:
    r = spawn(
        "mcp",
        "--config",
        str(write_config(tmp_path, ws)),
        "--http",
        "0",
        "-v",
        stdin=subprocess.DEVNULL,
    )
    url = r.wait_for_stderr(r"listening on (http://127\.0\.0\.1:\d+/mcp)").group(1)
    state = Path(os.environ["MEMORYD_STATE_DIR"])
    token = the_token(state)
    assert (state / "mcp-token").stat().st_mode & 0o777 == 0o600
    # said once, on stderr, where the token is; the token itself is never printed
    assert r.err().count(f"the token is in {state / 'mcp-token'}") == 1
    wrong = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    refused = [
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {wrong}"},
        {"Authorization": f"Bearer {token}x"},
        {"Authorization": f"Basic {token}"},
        {"Authorization": f"bearer  {wrong}"},
        {"X-Api-Key": token},
    ]
    for headers in refused:
        got = httpx.post(url, headers={**POST, **headers}, json=INITIALIZE, timeout=30)
        assert got.status_code == 401, (headers, got.text)
        assert got.headers["www-authenticate"] == 'Bearer realm="memoryd"'
        assert got.json()["error"]["code"] == -32001 and token not in got.text
    for method in ("get", "delete"):
        assert getattr(httpx, method)(url, timeout=30).status_code == 401
    health = httpx.get(url.removesuffix("/mcp") + "/health", timeout=30)
    assert health.status_code == 200 and token not in health.text
    for scheme in ("Bearer", "bearer", "BEARER"):
        ok = httpx.post(
            url, headers={**POST, "Authorization": f"{scheme} {token}"}, json=INITIALIZE
        )
        assert ok.status_code == 200, ok.text
    rc, _ = r.stop()
    log = r.err()
    # A refusal is not logged: no status line, whatever digits a port or session id holds.
    assert rc == 0 and wrong not in log and token not in log, log
    assert not re.search(r"\b401\b", log), log


def test_print_token_prints_the_token_the_server_requires(tmp_path: Path) -> None:
    state = Path(os.environ["MEMORYD_STATE_DIR"])
    first = subprocess.run(memoryd("mcp", "--print-token"), capture_output=True, text=True)
    again = subprocess.run(memoryd("mcp", "--print-token"), capture_output=True, text=True)
    assert first.returncode == again.returncode == 0 and first.stderr == ""
    assert first.stdout == again.stdout == the_token(state) + "\n"
    assert len(first.stdout.strip()) >= 43  # 32 random bytes, base64url


def test_concurrent_first_uses_agree_on_one_token(tmp_path: Path) -> None:
    import multiprocessing

    from memoryd.mcp_server import load_token

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(6) as pool:
        tokens = pool.starmap(load_token, [()] * 12)
    assert len({t for t, _ in tokens}) == 1
    assert tokens[0][0] == the_token(Path(os.environ["MEMORYD_STATE_DIR"]))
    assert sorted(os.listdir(os.environ["MEMORYD_STATE_DIR"])) == ["mcp-token"]  # no temp left


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("Bearer TOKEN", True),
        ("bearer TOKEN", True),
        ("  Bearer   TOKEN  ", True),
        ("Bearer TOKEN2", False),
        ("Bearer TOKE", False),
        ("Bearer", False),
        ("", False),
        (None, False),
        ("Basic TOKEN", False),
        ("TOKEN", False),
        ("Bearer TOKEN TOKEN", False),
    ],
)
def test_token_matches(header: str | None, ok: bool) -> None:
    from memoryd.mcp_server import token_matches

    token = "A" * 10 + "TOKEN"
    header = header.replace("TOKEN", token) if header is not None else None
    assert token_matches(header, token) is ok


@needs_root
def test_another_local_user_cannot_use_the_loopback_server(
    shared_base: Path, tmp_path: Path, ws: Path
) -> None:
    """The trial: as `nobody`, a plain HTTP client on 127.0.0.1 read MEMORY.md and appended to
    it. Now the call needs the token, and the token file is the owner's alone."""
    state = shared_base / "state"
    env = {**os.environ, "MEMORYD_STATE_DIR": str(state)}
    with serving_http(write_config(tmp_path, ws), env, tmp_path / "stderr.txt") as url:
        before = (ws / "MEMORY.md").read_bytes()

        # imported here, before the fork: `nobody` may not read the interpreter's own files
        import encodings.idna  # noqa: F401
        import urllib.error
        import urllib.request

        def client() -> str:
            seen = []
            token = ""
            try:
                token = (state / "mcp-token").read_text().strip()
            except OSError as err:
                seen.append(f"token: {type(err).__name__}")
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "memory_append",
                    "arguments": {"target": "longterm", "text": "pwned"},
                },
            }
            for name, body in (("initialize", INITIALIZE), ("append", call)):
                req = urllib.request.Request(
                    url,
                    data=json.dumps(body).encode(),
                    headers={**POST, "Authorization": f"Bearer {token}"},
                )
                try:
                    with urllib.request.urlopen(req, timeout=30) as got:
                        seen.append(f"{name}: {got.status}")
                except urllib.error.HTTPError as err:
                    seen.append(f"{name}: {err.code}")
            return "\n".join(seen)

        assert as_nobody(client).splitlines() == [
            "token: PermissionError",
            "initialize: 401",
            "append: 401",
        ]
        assert (ws / "MEMORY.md").read_bytes() == before


def test_http_sessions_are_capped_and_expire_when_idle(
    spawn: Any, tmp_path: Path, ws: Path
) -> None:
    r = spawn(
        "mcp",
        "--config",
        str(write_config(tmp_path, ws)),
        "--http",
        "0",
        "--max-sessions",
        "3",
        "--session-idle",
        "3",
        stdin=subprocess.DEVNULL,
    )
    url = r.wait_for_stderr(r"listening on (http://127\.0\.0\.1:\d+/mcp)").group(1)
    headers = {**POST, **authed(the_token(Path(os.environ["MEMORYD_STATE_DIR"])))}

    def open_session() -> httpx.Response:
        return httpx.post(url, headers=headers, json=INITIALIZE, timeout=30)

    opened = [open_session() for _ in range(3)]
    assert [o.status_code for o in opened] == [200, 200, 200]
    full = open_session()
    assert full.status_code == 503 and full.headers["retry-after"] == "30", full.text
    # a session that is used stays; idle ones are closed and make room again
    deadline = time.monotonic() + 60
    while open_session().status_code != 200:
        assert time.monotonic() < deadline, "idle sessions never expired"
        time.sleep(0.2)
    sid = opened[0].headers["mcp-session-id"]
    gone = httpx.post(
        url,
        headers={**headers, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"},
        json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        timeout=30,
    )
    assert gone.status_code == 404  # expired: the client has to initialize again
    rc, _ = r.stop()
    assert rc == 0 and "Traceback" not in r.err()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_http_stops_on_a_signal(http_server: tuple[Running, str], sig: signal.Signals) -> None:
    r, url = http_server
    assert httpx.get(url.removesuffix("/mcp") + "/health", timeout=30).status_code == 200
    rc, _ = r.stop(sig)
    assert rc == 0 and "Traceback" not in r.err()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url.removesuffix("/mcp") + "/health", timeout=5)


# ----------------------------------------------------------------------------- the guard rules


@pytest.mark.parametrize(
    ("hostname", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST", True),
        ("app.localhost", True),
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("0:0:0:0:0:0:0:1", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("localhost.evil.example", False),
        ("127.0.0.1.evil.example", False),
        ("128.0.0.1", False),
        ("evil.example", False),
        ("", False),
    ],
)
def test_loopback_hostnames(hostname: str, loopback: bool) -> None:
    assert is_loopback_hostname(hostname) is loopback


LOOPBACK = resolve_origin_guard("127.0.0.1")


@pytest.mark.parametrize(
    ("guard", "origin", "host", "refused"),
    [
        (LOOPBACK, None, "127.0.0.1:8181", None),
        (LOOPBACK, None, None, None),
        (LOOPBACK, "http://localhost:3000", "localhost:8181", None),
        (LOOPBACK, "https://[::1]:9", "[::1]:8181", None),
        (LOOPBACK, "http://evil.example", None, "Origin not allowed: http://evil.example"),
        (LOOPBACK, "file://", None, "Origin not allowed: file://"),
        (LOOPBACK, "http://localhost:x", None, "Origin not allowed: http://localhost:x"),
        (LOOPBACK, None, "evil.example:8181", "Host not allowed: evil.example:8181"),
        (
            resolve_origin_guard("127.0.0.1", allowed_origins=["https://app.example/"]),
            "https://app.example",
            None,
            None,
        ),
        (
            resolve_origin_guard("127.0.0.1", allowed_origins=["https://app.example"]),
            "https://app.example:8443",
            None,
            "Origin not allowed: https://app.example:8443",
        ),
        # a concrete non-loopback bind: its own address is a legitimate Host
        (resolve_origin_guard("10.0.0.5"), None, "10.0.0.5:8181", None),
        (resolve_origin_guard("10.0.0.5"), None, "evil.example", "Host not allowed: evil.example"),
        # a wildcard bind checks Host only against an explicit list
        (resolve_origin_guard("0.0.0.0"), None, "anything:1", None),
        (
            resolve_origin_guard("0.0.0.0"),
            "http://e.example",
            None,
            "Origin not allowed: http://e.example",
        ),
        (
            resolve_origin_guard("0.0.0.0", allowed_hosts=["box.lan"]),
            None,
            "other.lan:1",
            "Host not allowed: other.lan:1",
        ),
        (resolve_origin_guard("0.0.0.0", allowed_hosts=["box.lan"]), None, "box.lan:8181", None),
        # '*' turns the screen off
        (resolve_origin_guard("127.0.0.1", allowed_origins=["*"]), "http://evil", "x:1", None),
    ],
)
def test_origin_and_host_rules(
    guard: OriginGuard, origin: str | None, host: str | None, refused: str | None
) -> None:
    assert check_request_origin(origin, host, guard) == refused


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("8181", ("127.0.0.1", 8181)),
        ("0", ("127.0.0.1", 0)),
        ("localhost:8181", ("localhost", 8181)),
        ("127.0.0.1:8181", ("127.0.0.1", 8181)),
        ("[::1]:8181", ("::1", 8181)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
    ],
)
def test_http_addresses(value: str, parsed: tuple[str, int]) -> None:
    assert parse_http_address(value) == parsed


@pytest.mark.parametrize("value", ["", "http", "host:", ":8181", "::1:8181", "1:70000", "1:-1"])
def test_bad_http_addresses(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_http_address(value)
