"""`memoryd serve`: the long-running supervisor, and the local socket the CLI forwards to.

While `serve` runs, every configured agent's timers, watchers and recovery probes run, models
stay loaded, and `memoryd search/get/status` send one JSON line over a Unix socket in the state
dir and print the answer (no model load, no index open in the CLI process).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from anyio.abc import SocketStream

from . import paths

if TYPE_CHECKING:  # the CLI imports this module to forward requests: keep it light
    from .orchestrator import MemoryService

log = logging.getLogger("memoryd.server")

MAX_REQUEST = 1 << 20


def socket_path() -> Path:
    return paths.state_dir() / "memoryd.sock"


async def _handle(service: MemoryService, stream: SocketStream) -> None:
    async with stream:
        buf = b""
        while b"\n" not in buf and len(buf) < MAX_REQUEST:
            try:
                chunk = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
            buf += chunk
        try:
            req = json.loads(buf.split(b"\n", 1)[0])
            resp = await dispatch(service, req)
        except (ValueError, KeyError, TypeError) as err:
            resp = {"error": f"bad request: {err}"}
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await stream.send(json.dumps(resp, default=str).encode() + b"\n")


async def dispatch(service: MemoryService, req: dict[str, Any]) -> dict[str, Any]:
    op = req["op"]
    agent = req.get("agent")
    if op == "search":
        return await service.memory_search(
            req["query"],
            agent_id=agent,
            session_key=req.get("sessionKey"),
            max_results=req.get("maxResults"),
            min_score=req.get("minScore"),
        )
    if op == "get":
        return await service.memory_get(
            req["path"], from_line=req.get("from"), lines=req.get("lines"), agent_id=agent
        )
    if op == "status":
        return await service.status(agent)
    if op == "ping":
        return {"ok": True, "pid": os.getpid()}
    return {"error": f"unknown op {op!r}"}


async def serve(
    service: MemoryService, *, sock: Path | None = None, ready: anyio.Event | None = None
) -> None:
    """Run until SIGINT/SIGTERM (or cancellation); then stop timers and kill qmd children."""
    sock = sock or socket_path()
    sock.parent.mkdir(parents=True, exist_ok=True)
    if sock.exists():
        if ping(sock) is not None:
            from .errors import MemorydError

            raise MemorydError(f"another memoryd serve is already running on {sock}")
        sock.unlink()
    listener = await anyio.create_unix_listener(sock)
    os.chmod(sock, 0o600)
    try:
        async with anyio.create_task_group() as tg:
            await service.start(tg)

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        log.warning("received %s; shutting down", signal.Signals(signum).name)
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(stop_on_signal)

            async def accept() -> None:
                async with listener:
                    await listener.serve(lambda s: _handle(service, s))

            tg.start_soon(accept)
            if ready is not None:
                ready.set()
    finally:
        with anyio.CancelScope(shield=True):
            await service.aclose()
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()


def request(sock: Path, payload: dict[str, Any], *, timeout: float = 30.0) -> dict[str, Any] | None:
    """Send one request to a running server; None when no server answers (caller runs in-process)."""
    if not sock.exists():
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(sock))
            s.sendall(json.dumps(payload).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return None
    if not data:
        return None
    out: dict[str, Any] = json.loads(data)
    return out


def ping(sock: Path) -> dict[str, Any] | None:
    return request(sock, {"op": "ping"}, timeout=2.0)
