"""No request can crash `serve`: a table of bad payloads, floods of idle connections, and SIGTERM.

After every payload the listener must still answer a good request; every bad one gets one error
line with a code (never a dropped connection without an answer, never a traceback).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import write
from memoryd.server import MAX_REQUEST, ping, request, socket_path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, Any]]:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n\nThe deploy target is fly.io.\n")
    write(ws / "memory" / "2026-11-29.md", "# 2026-11-29\n\nRotated the webhook secret.\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n[agents.defaults.memorySearch]\nprovider = "none"\n'
    )
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "serve", "--config", str(cfg)], stderr=err
        )
    deadline = time.monotonic() + 30
    while ping(socket_path()) is None:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "serve did not come up"
        time.sleep(0.1)
    identity = {
        "config": {
            "path": str(cfg),
            "sha256": __import__("hashlib").sha256(cfg.read_bytes()).hexdigest(),
        },
        "workspace": None,
        "cwd": str(ws),
    }
    yield {"proc": proc, "identity": identity, "log": log}
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


def raw(payload: bytes, *, timeout: float = 15) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(socket_path()))
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def good(identity: dict[str, Any]) -> dict[str, Any] | None:
    return request(socket_path(), {"op": "search", "query": "deploy", "identity": identity})


def nested(depth: int) -> bytes:
    return b'{"op": "search", "query": ' + b"[" * depth + b"]" * depth + b"}\n"


def payloads(identity: dict[str, Any]) -> list[tuple[str, bytes]]:
    def req(**kw: Any) -> bytes:
        return json.dumps({"identity": identity, **kw}).encode() + b"\n"

    long_name = "memory/" + "x" * 300 + ".md"
    cases: list[tuple[str, bytes]] = [
        ("empty line", b"\n"),
        ("not json", b"hello there\n"),
        ("binary", bytes(range(256)) + b"\n"),
        ("json array", b"[1, 2, 3]\n"),
        ("json string", b'"search"\n'),
        ("json null", b"null\n"),
        ("no op", req()),
        ("unknown op", req(op="drop_tables")),
        ("op not a string", req(op=7)),
        ("query int", req(op="search", query=42)),
        ("query list", req(op="search", query=["a"])),
        ("query dict", req(op="search", query={"a": 1})),
        ("query null", req(op="search", query=None)),
        ("query empty", req(op="search", query="   ")),
        ("query 900 KB", req(op="search", query="x" * 200_000)),
        ("query NUL", req(op="search", query="a\x00b")),
        ("sessionKey int", req(op="search", query="deploy", sessionKey=5)),
        ("maxResults 0", req(op="search", query="deploy", maxResults=0)),
        ("maxResults huge", req(op="search", query="deploy", maxResults=10**12)),
        ("maxResults string", req(op="search", query="deploy", maxResults="lots")),
        ("maxResults bool", req(op="search", query="deploy", maxResults=True)),
        ("minScore 2", req(op="search", query="deploy", minScore=2)),
        ("minScore NaN", b'{"op": "search", "query": "deploy", "minScore": NaN}\n'),
        ("corpus bad", req(op="search", query="deploy", corpus="everything")),
        ("unknown argument", req(op="search", query="deploy", bogus=1)),
        ("agent traversal", req(op="search", query="deploy", agent="../../etc")),
        ("agent int", req(op="search", query="deploy", agent=3)),
        ("identity missing", json.dumps({"op": "search", "query": "deploy"}).encode() + b"\n"),
        (
            "identity not a dict",
            json.dumps({"op": "search", "query": "x", "identity": 1}).encode() + b"\n",
        ),
        (
            "identity cwd int",
            json.dumps({"op": "search", "query": "x", "identity": {**identity, "cwd": 5}}).encode()
            + b"\n",
        ),
        ("path int", req(op="get", path=5)),
        ("path null", req(op="get", path=None)),
        ("path 300-char name", req(op="get", path=long_name)),
        ("path traversal", req(op="get", path="../../etc/passwd.md")),
        ("path absolute", req(op="get", path="/etc/shadow")),
        ("path NUL", req(op="get", path="memory/a\x00.md")),
        ("from 0", req(op="get", path="MEMORY.md", **{"from": 0})),
        ("from string", req(op="get", path="MEMORY.md", **{"from": "one"})),
        ("lines negative", req(op="get", path="MEMORY.md", lines=-1)),
        ("status with args", req(op="status", verbose=True)),
        ("deep nesting", nested(100_000)),
        (
            "over the line limit",
            b'{"op": "search", "query": "' + b"y" * (MAX_REQUEST + 10) + b'"}\n',
        ),
        ("no newline", b'{"op": "ping"'),
    ]
    return cases


def test_no_payload_stops_the_listener(served: dict[str, Any]) -> None:
    identity = served["identity"]
    cases = payloads(identity)
    assert len(cases) >= 43
    for name, payload in cases:
        data = raw(payload)
        if name == "no newline":
            assert data == b"" or json.loads(data).get("code"), name  # closed without a line
        else:
            reply = json.loads(data)
            assert reply.get("code") or "results" in reply or "path" in reply, (name, reply)
            if "results" not in reply:
                assert reply.get("disabled") is True, (name, reply)
        answer = good(identity)
        assert answer is not None and answer["results"], (name, served["log"].read_text())
    assert served["proc"].poll() is None
    assert "Traceback" not in served["log"].read_text()


def test_idle_connections_are_dropped_and_excess_ones_refused_at_once(
    served: dict[str, Any],
) -> None:
    held = []
    try:
        for _ in range(80):  # more than MAX_CONNECTIONS, none sends a request
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(socket_path()))
            held.append(s)
        time.sleep(0.5)
        # the 65th and later were answered `server_busy` at once
        busy = 0
        for s in held:
            s.settimeout(0.2)
            try:
                line = s.recv(65536)
            except TimeoutError:
                continue
            if line and json.loads(line).get("code") == "server_busy":
                busy += 1
        assert busy >= 80 - 64
    finally:
        for s in held:
            s.close()
    # a good request is answered again once the idle ones are gone
    deadline = time.monotonic() + 15
    while (answer := good(served["identity"])) is None or answer.get("code") == "server_busy":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert answer["results"]


def test_sigterm_stops_serve_within_a_second(served: dict[str, Any]) -> None:
    proc = served["proc"]
    # a request in flight does not hold the shutdown
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(socket_path()))
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    elapsed = time.monotonic() - t
    s.close()
    assert proc.returncode == 0, served["log"].read_text()
    assert not os.path.exists(socket_path())
    assert "stopped" in served["log"].read_text()
    # measured, not asserted tightly (a loaded CI machine): the target is ≤ 1 s
    assert elapsed < 5, elapsed
