"""`memoryd mcp` driven by a client nobody here wrote: the official MCP Inspector CLI (npm
`@modelcontextprotocol/inspector`, installed by scripts/install-inspector), over stdio and
Streamable HTTP with the bearer token (given as `--header`, and in an Inspector config file as
the README shows it); without the token the server answers 401.

Without the Inspector these tests skip with the reason; under CI (`CI` set) they fail instead.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli_support import launcher_argv

REPO = Path(__file__).resolve().parents[1]
SIX_TOOLS = [
    "memory_search",
    "memory_get",
    "memory_append",
    "memory_context",
    "memory_flush_check",
    "memory_status",
]


def inspector_cli() -> str:
    """The Inspector CLI wrapper, or skip (fail under CI) saying how to install it."""
    path = os.environ.get("MEMORYD_TEST_INSPECTOR") or str(
        REPO / ".tools" / "inspector" / "bin" / "mcp-inspector-cli"
    )
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        reason = f"MCP Inspector CLI not found at {path} (run scripts/install-inspector)"
        if os.environ.get("CI"):
            pytest.fail(f"CI requires the MCP Inspector: {reason}", pytrace=False)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="module")
def inspector() -> str:
    return inspector_cli()


@pytest.fixture
def setup(tmp_path: Path, workspace: Path) -> dict[str, Any]:
    (workspace / "MEMORY.md").write_text("# Memory\nThe deploy target is fly.io.\nSecond line.\n")
    (workspace / "memory" / "2026-11-29.md").write_text(
        "# 2026-11-29\nRotated the webhook secret today.\n"
    )
    cfg = tmp_path / "memoryd.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{workspace}"\n'
        '[agents.defaults.memorySearch]\nprovider = "none"\n'
    )
    # the Inspector starts stdio servers with a minimal environment: state goes in explicitly
    server_env = {
        k: os.environ[k]
        for k in ("MEMORYD_STATE_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME")
    }
    home = tmp_path / "inspector-home"  # the Inspector keeps its catalog and secrets under ~
    home.mkdir()
    return {"config": cfg, "workspace": workspace, "server_env": server_env, "home": home}


def run_inspector(
    inspector: str, setup: dict[str, Any], target: list[str], *args: str
) -> tuple[int, dict[str, Any], str]:
    out = subprocess.run(
        [inspector, "--format", "json", *args, *target],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(setup["home"])},
        cwd=setup["home"],
    )
    try:
        data: dict[str, Any] = json.loads(out.stdout or out.stderr)
    except json.JSONDecodeError:
        pytest.fail(f"Inspector printed no JSON (rc {out.returncode}): {out.stdout}{out.stderr}")
    return out.returncode, data, out.stderr


def stdio_target(setup: dict[str, Any]) -> list[str]:
    env: list[str] = []
    for key, value in setup["server_env"].items():
        env += ["-e", f"{key}={value}"]
    # `--`: the Inspector would read the server's own --config as its option
    return [*env, "--", *launcher_argv(["mcp", "--config", str(setup["config"])])]


def the_token() -> str:
    return (Path(os.environ["MEMORYD_STATE_DIR"]) / "mcp-token").read_text().strip()


@pytest.fixture
def http_url(setup: dict[str, Any], tmp_path: Path) -> Iterator[str]:
    err = tmp_path / "http-stderr.txt"
    with err.open("w") as err_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memoryd",
                "mcp",
                "--http",
                "0",
                "--config",
                str(setup["config"]),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err_file,
        )
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"listening on (http://\S+/mcp)", err.read_text())):
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        yield found.group(1)
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, err.read_text()


# one call per tool, and the keys each documented result carries
CALLS: list[tuple[str, dict[str, Any], set[str]]] = [
    (
        "memory_search",
        {"query": "webhook secret", "maxResults": 2},
        {"results", "backend", "provider", "mode", "citations"},
    ),
    ("memory_get", {"path": "MEMORY.md", "from": 2, "lines": 1}, {"path", "text"}),
    ("memory_append", {"target": "daily", "text": "- Inspector was here."}, {"path", "created"}),
    ("memory_context", {"sessionKey": "agent:main:main"}, {"text"}),
    (
        "memory_flush_check",
        {"tokenEstimate": 1000, "contextWindow": 200000, "sessionKey": "agent:main:main"},
        {"run", "reason", "threshold"},
    ),
    ("memory_status", {}, {"backend", "requestedBackend", "files", "workspaceDir"}),
]


def call(
    inspector: str, setup: dict[str, Any], target: list[str], name: str, args: dict[str, Any]
) -> dict[str, Any]:
    rc, called, err = run_inspector(
        inspector,
        setup,
        target,
        "--method",
        "tools/call",
        "--tool-name",
        name,
        "--tool-args-json",
        json.dumps(args),
    )
    assert rc == 0, err
    result: dict[str, Any] = called["result"]
    assert result["isError"] is False, result
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    return result


def check_listing(inspector: str, setup: dict[str, Any], target: list[str]) -> None:
    rc, listed, err = run_inspector(inspector, setup, target, "--method", "tools/list", "--strict")
    assert rc == 0, err  # --strict: no error-severity schema portability problem either
    tools = listed["result"]["tools"]
    assert [t["name"] for t in tools] == SIX_TOOLS
    assert all(t["inputSchema"]["additionalProperties"] is False for t in tools)


def check_refusal(inspector: str, setup: dict[str, Any], target: list[str]) -> None:
    # a refused call is a tool error (isError): the Inspector's CLI prints it and fails
    rc, called, _err = run_inspector(
        inspector,
        setup,
        target,
        "--method",
        "tools/call",
        "--tool-name",
        "memory_search",
        "--tool-args-json",
        json.dumps({"query": "webhook", "maxResults": 0, "dryRun": True}),
    )
    assert rc != 0 and called["result"]["isError"] is True, called
    bad = called["result"]["structuredContent"]
    assert bad["disabled"] is True and bad["code"] == "invalid_input"
    assert "maxResults must be ≥ 1" in bad["error"] and "'dryRun'" in bad["error"]


def test_inspector_over_stdio(inspector: str, setup: dict[str, Any]) -> None:
    # Each stdio call starts a server: the transport is what is under test here (listing, a
    # write and a read that finds it); every tool's result and the refusal are checked over HTTP.
    target = stdio_target(setup)
    check_listing(inspector, setup, target)
    wrote = call(inspector, setup, target, "memory_append", CALLS[2][1])["structuredContent"]
    assert CALLS[2][2] <= set(wrote)
    hits = call(inspector, setup, target, "memory_search", {"query": "Inspector was here"})
    assert hits["structuredContent"]["results"][0]["path"] == wrote["path"]


@pytest.fixture
def http_target(http_url: str) -> list[str]:
    """The server's URL and the header with its token, as the Inspector takes them."""
    return ["--header", f"Authorization: Bearer {the_token()}", "--", http_url]


def test_inspector_over_http(inspector: str, setup: dict[str, Any], http_target: list[str]) -> None:
    check_listing(inspector, setup, http_target)
    check_refusal(inspector, setup, http_target)
    for name, args, keys in CALLS:
        data = call(inspector, setup, http_target, name, args)["structuredContent"]
        assert keys <= set(data), (name, data)
        assert "disabled" not in data, (name, data)


def test_inspector_with_the_readme_config_file(
    inspector: str, setup: dict[str, Any], http_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "inspector.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "memoryd": {
                        "type": "streamable-http",
                        "url": http_url,
                        "headers": {"Authorization": f"Bearer {the_token()}"},
                    }
                }
            }
        )
    )
    target = ["--config", str(config), "--server", "memoryd"]
    data = call(inspector, setup, target, "memory_get", {"path": "MEMORY.md", "lines": 1})
    assert data["structuredContent"] == {"path": "MEMORY.md", "text": "# Memory\n"}


def test_inspector_without_the_token_is_refused(
    inspector: str, setup: dict[str, Any], http_url: str
) -> None:
    import httpx

    # the server's answer itself: 401, and the Inspector gets no tool list
    got = httpx.post(
        http_url,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        timeout=30,
    )
    assert got.status_code == 401 and got.headers["www-authenticate"].startswith("Bearer")
    for target in (
        ["--", http_url],
        ["--header", "Authorization: Bearer not-the-token", "--", http_url],
    ):
        rc, data, _err = run_inspector(inspector, setup, target, "--method", "tools/list")
        assert rc != 0 and "result" not in data, data
        assert "error" in data


def test_inspector_reports_its_version(inspector: str) -> None:
    out = subprocess.run([inspector, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and re.fullmatch(r"\d+\.\d+\.\d+\s*", out.stdout)
