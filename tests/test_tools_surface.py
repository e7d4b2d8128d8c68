"""One tool contract over three surfaces: MCP (real client session), the serve socket, and warm."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from cli_support import run_memoryd, spawn_memoryd
from memoryd.config import validate_config
from memoryd.mcp_server import build_server
from memoryd.orchestrator import MemoryService
from memoryd.paths import socket_path
from memoryd.server import ping, request


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / "MEMORY.md").write_text("# Memory\nThe deploy target is fly.io.\nSecond line.\n")
    (workspace / "memory" / "2026-11-29.md").write_text(
        "# 2026-11-29\nRotated the webhook secret today.\n"
    )
    return workspace


def service(ws: Path, **memory: Any) -> MemoryService:
    cfg = validate_config(
        {
            "memory": memory,
            "agents": {"defaults": {"workspace": str(ws), "memorySearch": {"provider": "none"}}},
        }
    )
    return MemoryService(cfg)


def structured(result: Any) -> dict[str, Any]:
    data = result.structured_content
    assert result.is_error is (data.get("disabled") is True), result  # a failure is a tool error
    return data  # type: ignore[no-any-return]


@pytest.mark.anyio
async def test_mcp_tools_in_a_real_client_session(ws: Path) -> None:
    svc = service(ws)
    async with Client(build_server(svc)) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert names == [
            "memory_search",
            "memory_get",
            "memory_append",
            "memory_context",
            "memory_flush_check",
            "memory_status",
        ]
        hits = structured(
            await client.call_tool("memory_search", {"query": "webhook secret", "maxResults": 2})
        )
        assert hits["backend"] == "builtin" and hits["results"][0]["path"] == "memory/2026-11-29.md"
        got = structured(
            await client.call_tool("memory_get", {"path": "MEMORY.md", "from": 2, "lines": 1})
        )
        assert got == {"path": "MEMORY.md", "text": "The deploy target is fly.io.\n"}
        refused = structured(await client.call_tool("memory_get", {"path": "../x.md"}))
        assert refused["disabled"] is True and "escapes" in refused["error"]
        denied = structured(
            await client.call_tool(
                "memory_search", {"query": "deploy", "sessionKey": "agent:main:discord:group:1"}
            )
        )
        assert denied["scopeDenied"] is True
        empty = structured(await client.call_tool("memory_search", {"query": " "}))
        assert empty == {
            "disabled": True,
            "error": "query must not be empty",
            "code": "invalid_input",
        }
        st = structured(await client.call_tool("memory_status", {}))
        assert st["backend"] == "builtin" and st["files"] == 2
    svc.close()


@pytest.mark.anyio
async def test_serve_answers_on_the_socket_and_stops_cleanly(ws: Path) -> None:
    from memoryd.server import serve

    svc = service(ws)
    ready = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve(svc, ready=ready))
        with anyio.fail_after(20):
            await ready.wait()
        sock = socket_path()
        assert (await anyio.to_thread.run_sync(ping, sock))["ok"] is True
        me = {"config": {"path": None, "sha256": None}, "workspace": str(ws), "cwd": str(ws)}
        out = await anyio.to_thread.run_sync(
            request, sock, {"op": "search", "query": "deploy target", "identity": me}
        )
        assert out and out["results"][0]["path"] == "MEMORY.md"
        bad = await anyio.to_thread.run_sync(request, sock, {"op": "nope", "identity": me})
        assert bad is not None and bad["code"] == "invalid_input" and "unknown op" in bad["error"]
        anonymous = await anyio.to_thread.run_sync(request, sock, {"op": "search", "query": "x"})
        assert anonymous is not None and anonymous["code"] == "not_served"
        tg.cancel_scope.cancel()
    assert not socket_path().exists()


def test_cli_forwards_to_a_running_server_and_sigterm_shuts_it_down(
    ws: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n[agents.defaults.memorySearch]\nprovider = "none"\n'
    )
    env = {**os.environ, "MEMORYD_CONFIG": str(cfg)}
    log = tmp_path / "serve.log"
    with log.open("w") as err_file:
        proc = spawn_memoryd(["serve"], env=env, stderr=err_file)
    try:
        deadline = time.monotonic() + 30
        while ping(socket_path()) is None:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "serve did not come up"
            time.sleep(0.1)
        # the served index answers; a file the CLI process never opened proves the forward
        t = time.perf_counter()
        out = run_memoryd(["search", "--json", "webhook"], env=env, timeout=60)
        wall = time.perf_counter() - t
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["results"][0]["path"] == "memory/2026-11-29.md"
        assert wall < 10
        st = run_memoryd(["status", "--json"], env=env, timeout=60)
        assert json.loads(st.stdout)["backend"] == "builtin"
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    assert rc == 0
    assert not socket_path().exists()


def test_warm_builtin(ws: Path) -> None:
    from memoryd.orchestrator.warm import warm

    steps: list[tuple[str, bool, str]] = []
    svc = service(ws)
    assert warm(svc, None, lambda s, ok, d: steps.append((s, ok, d)))
    assert [s for s, ok, _ in steps if ok] == ["built-in index", "embedding model loaded"]
    svc.close()


def test_warm_cli_fails_with_a_clear_message_when_qmd_is_missing(ws: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[memory]\nbackend = "qmd"\n[memory.qmd]\ncommand = "{tmp_path / "no-qmd"}"\n'
        f'[agents.defaults]\nworkspace = "{ws}"\n[agents.defaults.memorySearch]\nprovider = "none"\n'
    )
    out = run_memoryd(["warm", "--config", str(cfg)], timeout=120)
    assert out.returncode == 1
    assert "memoryd: error: warm failed: qmd (QmdUnavailable" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.anyio
async def test_lifecycle_tools_over_mcp(ws: Path) -> None:
    svc = service(ws)
    async with Client(build_server(svc)) as client:
        wrote = structured(
            await client.call_tool(
                "memory_append", {"target": "daily", "text": "The kiwi fruit order ships Monday."}
            )
        )
        assert wrote["created"] is True and wrote["path"].startswith("memory/20")
        hits = structured(await client.call_tool("memory_search", {"query": "kiwi fruit order"}))
        assert hits["results"][0]["path"] == wrote["path"]
        ctx = structured(
            await client.call_tool("memory_context", {"sessionKey": "agent:main:main"})
        )
        assert "kiwi fruit" in ctx["text"] and "deploy target" in ctx["text"]
        group = structured(
            await client.call_tool("memory_context", {"sessionKey": "agent:main:discord:group:1"})
        )
        assert "deploy target" not in group["text"]  # no MEMORY.md in group chats
        first = structured(
            await client.call_tool(
                "memory_flush_check",
                {
                    "tokenEstimate": 190_000,
                    "contextWindow": 200_000,
                    "compactionCount": 1,
                    "sessionKey": "agent:main:main",
                },
            )
        )
        again = structured(
            await client.call_tool(
                "memory_flush_check",
                {
                    "tokenEstimate": 195_000,
                    "contextWindow": 200_000,
                    "compactionCount": 1,
                    "sessionKey": "agent:main:main",
                },
            )
        )
        assert first["run"] is True and "NO_REPLY" in first["prompt"]
        assert again["run"] is False and again["reason"] == "already_flushed"
    svc.close()


def test_lifecycle_cli(ws: Path, tmp_path: Path) -> None:
    env = {**os.environ, "MEMORYD_NO_SERVER": "1"}

    def cli(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_memoryd([*argv, "--workspace", str(ws)], input=stdin, env=env, timeout=60)

    out = cli("append", "--target", "long-term", "--json", "-", stdin="- Carol owns the budget.\n")
    assert out.returncode == 0, out.stderr
    assert (ws / "MEMORY.md").read_text().endswith("- Carol owns the budget.\n")
    ctx = cli("context", "--session-key", "agent:main:main")
    assert ctx.returncode == 0 and "Carol owns the budget" in ctx.stdout
    fc = cli("flush-check", "--tokens", "1000", "--context-window", "200000", "--json")
    assert json.loads(fc.stdout)["reason"] == "below_threshold"
    empty = cli("append", "   ")
    assert empty.returncode == 2 and empty.stderr.startswith("memoryd: error:")


def test_status_is_a_typed_model(ws: Path) -> None:
    from memoryd.orchestrator.status import MemoryStatus

    svc = service(ws)
    svc.memory_search("deploy")
    st = svc.status_model()
    assert isinstance(st, MemoryStatus)
    assert st.backend == "builtin" and st.requested_backend == "builtin" and st.fallback is None
    assert st.builtin is not None and st.builtin.vector.engine in ("sqlite-vec", "numpy")
    assert st.builtin.fts.available and st.files == 2
    as_json = st.to_dict()
    assert as_json["requestedBackend"] == "builtin" and as_json["workspaceDir"] == str(ws.resolve())
    svc.close()
