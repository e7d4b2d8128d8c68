"""No request can crash `serve`: a table of bad payloads, floods of idle connections, and SIGTERM.

After every payload the listener must still answer a good request; every bad one gets one error
line with a code (never a dropped connection without an answer, never a traceback).
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli_support import spawn_memoryd
from embedding_servers import FakeOpenAI
from embedding_servers import serve as serve_api
from helpers import write
from memoryd.paths import socket_path
from memoryd.server import (
    MAX_REQUEST,
    ping,
    request,
)


def start_serve(
    tmp_path: Path, search: str, *, limits: tuple[float, int] | None = None
) -> dict[str, Any]:
    """`memoryd serve` in a child process on a two-note workspace; `search` is its memorySearch
    TOML; `limits`: its idle timeout and connection cap instead of the shipped ones."""
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n\nThe deploy target is fly.io.\n")
    write(ws / "memory" / "2026-11-29.md", "# 2026-11-29\n\nRotated the webhook secret.\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n[agents.defaults.memorySearch]\n{search}'
    )
    log = tmp_path / "serve.log"
    argv = ["serve", "--config", str(cfg)]
    with log.open("w") as err:
        if limits is None:
            proc: Any = spawn_memoryd(argv, stderr=err)
        else:
            code = (
                "import sys, memoryd.server as s; from memoryd.cli import main; "
                f"s.IDLE_TIMEOUT_S, s.MAX_CONNECTIONS = {limits!r}; sys.exit(main())"
            )
            proc = subprocess.Popen([sys.executable, "-c", code, *argv], stderr=err, text=True)
    deadline = time.monotonic() + 30
    while ping(socket_path()) is None:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "serve did not come up"
        time.sleep(0.1)
    identity = {
        "config": {"path": str(cfg), "sha256": hashlib.sha256(cfg.read_bytes()).hexdigest()},
        "workspace": None,
        "cwd": str(ws),
    }
    return {"proc": proc, "identity": identity, "log": log}


def stop_serve(served: dict[str, Any]) -> None:
    proc = served["proc"]
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, Any]]:
    running = start_serve(tmp_path, 'provider = "none"\n')
    yield running
    stop_serve(running)


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


IDLE_S = 1.0
CAP = 4


@pytest.fixture
def served_tight(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """serve with a 1 s idle timeout and a cap of 4 connections."""
    running = start_serve(tmp_path, 'provider = "none"\n', limits=(IDLE_S, CAP))
    yield running
    stop_serve(running)


def test_idle_connections_are_dropped_and_excess_ones_refused_at_once(
    served_tight: dict[str, Any],
) -> None:
    held: list[socket.socket] = []
    try:
        opened = time.monotonic()
        for _ in range(CAP + 3):  # none sends a request
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(socket_path()))
            held.append(s)
        # when each connection got its line, whatever order they come in
        replies: dict[socket.socket, tuple[float, bytes]] = {}
        while len(replies) < len(held):
            waiting = [s for s in held if s not in replies]
            ready, _, _ = select.select(waiting, [], [], IDLE_S + 5)
            assert ready, f"{len(waiting)} connections got no line within {IDLE_S + 5:g}s"
            for s in ready:
                replies[s] = (time.monotonic() - opened, s.recv(65536))
        busy, idle = 0, 0
        for s, (waited, line) in replies.items():
            reply = json.loads(line)
            s.settimeout(2)
            assert s.recv(65536) == b"", "the connection stays open after its error line"
            if reply.get("code") == "server_busy":
                # refused at once: well before the idle timeout could have fired
                assert waited < IDLE_S / 2, (waited, reply)
                busy += 1
            else:
                assert reply == {
                    "disabled": True,
                    "error": f"no request line within {IDLE_S:g}s",
                    "code": "invalid_input",
                }, reply
                assert IDLE_S * 0.9 <= waited < IDLE_S + 3, waited
                idle += 1
        assert (busy, idle) == (3, CAP)
    finally:
        for s in held:
            s.close()
    # the dropped ones freed their slots: a good request is answered at once
    answer = good(served_tight["identity"])
    assert answer is not None and answer["results"], answer
    assert "Traceback" not in served_tight["log"].read_text()


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
    print(f"serve stopped {elapsed:.3f}s after SIGTERM with an idle connection")


def test_sigterm_with_a_slow_search_in_flight_stops_serve_within_a_second(
    tmp_path: Path,
) -> None:
    # the query's embedding request is held by the fake API until the test ends: the search is
    # really in flight inside serve when SIGTERM arrives
    release = threading.Event()
    slow_word = "zeppelin"

    def delay(body: Any) -> float:
        inputs = body.get("input") if isinstance(body, dict) else None
        if slow_word in json.dumps(inputs):
            release.wait(30)
        return 0.0

    api = FakeOpenAI(key="sk-test", delay=delay)
    with serve_api(api) as root:
        search = (
            'provider = "openai"\nmodel = "text-embedding-3-small"\n'
            f'[agents.defaults.memorySearch.remote]\nbaseUrl = "{root}/v1"\napiKey = "sk-test"\n'
        )
        served = start_serve(tmp_path, search)
        proc = served["proc"]
        try:
            # indexed and embedded (serve embeds in the background; until a chunk has a vector,
            # a search embeds no query and answers by keywords)
            deadline = time.monotonic() + 30
            while True:
                answer = good(served["identity"])
                assert answer is not None and answer["results"], served["log"].read_text()
                if answer.get("mode") == "hybrid":
                    break
                assert time.monotonic() < deadline, f"never hybrid: {answer}"
                time.sleep(0.1)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(socket_path()))
            slow = {"op": "search", "query": f"{slow_word} deploy", "identity": served["identity"]}
            s.sendall(json.dumps(slow).encode() + b"\n")
            deadline = time.monotonic() + 15
            while not any(slow_word in json.dumps(r.body) for r in api.calls("/embeddings")):
                assert time.monotonic() < deadline, "the slow search never reached the API"
                time.sleep(0.02)
            t = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
            elapsed = time.monotonic() - t
            s.close()
        finally:
            release.set()
            stop_serve(served)
    log = served["log"].read_text()
    assert proc.returncode == 0, log
    assert not os.path.exists(socket_path())
    assert "stopped" in log and "Traceback" not in log, log
    # the target is 1 s; 2 s leaves room for a loaded 2-core machine
    assert elapsed < 2.0, f"serve took {elapsed:.2f}s to stop with a search in flight"
    print(f"serve stopped {elapsed:.3f}s after SIGTERM with a search in flight")


def wrong_shapes(identity: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Requests of the right syntax and the wrong shape (each once crashed `dispatch`)."""
    base = {"op": "search", "query": "deploy"}
    return [
        ("op a list", {**base, "op": ["search"], "identity": identity}),
        ("op a dict", {**base, "op": {"search": 1}, "identity": identity}),
        ("identity.cwd a number", {**base, "identity": {**identity, "cwd": 5}}),
        ("identity.cwd a list", {**base, "identity": {**identity, "cwd": ["/"]}}),
        ("identity.workspace a list", {**base, "identity": {**identity, "workspace": ["a"]}}),
        ("identity.workspace a number", {**base, "identity": {**identity, "workspace": 7}}),
        (
            "identity.workspace 100 KB",
            {**base, "identity": {**identity, "workspace": "/tmp/" + "w" * 100_000}},
        ),
        ("identity.cwd 100 KB", {**base, "identity": {**identity, "cwd": "/" + "c" * 100_000}}),
        (
            "identity.workspace a 300-character name",
            {**base, "identity": {**identity, "workspace": "/tmp/" + "n" * 300}},
        ),
        (
            "identity.workspace with NUL",
            {**base, "identity": {**identity, "workspace": "/tmp/a\x00b"}},
        ),
        ("identity.config a string", {**base, "identity": {**identity, "config": "x"}}),
    ]


def test_requests_of_the_wrong_shape_get_invalid_input_in_one_line(
    served: dict[str, Any],
) -> None:
    identity = served["identity"]
    for name, payload in wrong_shapes(identity):
        reply = json.loads(raw(json.dumps(payload).encode() + b"\n"))
        assert reply.get("disabled") is True, (name, reply)
        assert reply["code"] in ("invalid_input", "not_served"), (name, reply)
        assert "\n" not in reply["error"] and len(reply["error"]) <= 500, (name, reply)
        answer = good(identity)
        assert answer is not None and answer["results"], name
    for name in ("op a list", "identity.workspace a list", "identity.workspace 100 KB"):
        payload = dict(wrong_shapes(identity))[name]
        reply = json.loads(raw(json.dumps(payload).encode() + b"\n"))
        assert reply["code"] == "invalid_input", (name, reply)
    log = served["log"].read_text()
    assert "Traceback" not in log and "internal" not in log, log
    assert all(len(line) <= 1024 for line in log.splitlines()), max(map(len, log.splitlines()))


def test_no_log_line_is_longer_than_a_kilobyte() -> None:
    import logging

    from memoryd.cli import MAX_LOG_LINE, BoundedFormatter

    path = "/tmp/" + "é" * 60_000
    record = logging.LogRecord(
        "memoryd", logging.ERROR, __file__, 1, "cannot use %s", (path,), None
    )
    try:
        raise OSError(36, "File name too long", path)
    except OSError:
        import sys

        record.exc_info = sys.exc_info()
    text = BoundedFormatter("memoryd: %(levelname)s: %(message)s").format(record)
    lines = text.split("\n")
    assert len(lines) > 3 and lines[0].startswith("memoryd: ERROR: cannot use /tmp/ééé")
    assert max(len(line.encode()) for line in lines) <= MAX_LOG_LINE
    assert "more bytes]" in lines[0]
