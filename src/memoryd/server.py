"""`memoryd serve`: every agent's background work, and the Unix socket the CLI forwards to.

A request is answered only when the caller's identity (config and its hash, workspace, cwd,
agent) resolves to what this serve serves; else `not_served`, and the CLI runs it itself.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from . import paths
from .errors import InternalError, InvalidInput, MemorydError, NotServed, ServerBusy

if TYPE_CHECKING:  # the CLI imports this module to forward requests: keep it light
    import anyio
    from anyio.abc import SocketStream

    from .orchestrator import MemoryService

log = logging.getLogger("memoryd.server")

#: Longest request line accepted (bytes); queries are capped far below this.
MAX_REQUEST: Final = 256 * 1024
#: How long a connection may take to send its request line.
IDLE_TIMEOUT_S = 10.0
#: Connections handled at once; more are answered `server_busy` and closed at once.
MAX_CONNECTIONS = 64


def config_identity(config_path: Path | None) -> dict[str, str | None]:
    """Which config a process runs with: its absolute path and the SHA-256 of its bytes."""
    if config_path is None:
        return {"path": None, "sha256": None}
    try:
        digest = hashlib.sha256(config_path.read_bytes()).hexdigest()
    except OSError:
        digest = None
    return {"path": str(config_path.absolute()), "sha256": digest}


#: Longest error message sent back (a reason may quote what the caller sent).
MAX_ERROR_CHARS: Final = 500
#: Longest path accepted in a request's identity (Linux's PATH_MAX).
MAX_IDENTITY_PATH: Final = 4096


def _error(err: MemorydError) -> dict[str, Any]:
    """`err` as a result, its message capped."""
    out = err.to_result()
    if len(out["error"]) > MAX_ERROR_CHARS:
        out["error"] = out["error"][: MAX_ERROR_CHARS - 1] + "…"
    return out


def _check_shape(req: dict[str, Any]) -> None:
    """`InvalidInput` when the envelope (`op`, `agent`, `identity`) has the wrong shape."""
    op = req.get("op")
    if not isinstance(op, str):
        raise InvalidInput(
            f"op must be a string (search, get, status, ping), not {type(op).__name__}"
        )
    identity = req.get("identity")
    if identity is None:
        return  # answered not_served: the caller runs the call itself
    if not isinstance(identity, dict):
        raise InvalidInput(f"identity must be an object, not {type(identity).__name__}")
    for key in ("workspace", "cwd"):
        value = identity.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidInput(f"identity.{key} must be a path string, not {type(value).__name__}")
        if len(value) > MAX_IDENTITY_PATH:
            raise InvalidInput(f"identity.{key} is longer than {MAX_IDENTITY_PATH} characters")
        if "\x00" in value:
            raise InvalidInput(f"identity.{key} contains a NUL character")
    config = identity.get("config")
    if config is not None and not (
        isinstance(config, dict)
        and all(isinstance(config.get(k), str | None) for k in ("path", "sha256"))
    ):
        raise InvalidInput("identity.config must be an object with a path and a sha256")


async def _send(stream: SocketStream, resp: dict[str, Any]) -> None:
    import anyio

    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(json.dumps(resp, default=str).encode() + b"\n")


async def _read_request(stream: SocketStream, idle_s: float) -> dict[str, Any] | None:
    """The request line's JSON object (None at EOF); `InvalidInput` for a bad one."""
    import anyio
    from anyio.streams.buffered import BufferedByteReceiveStream

    line: bytes | None = None
    try:  # a byte past the limit: a line of exactly MAX_REQUEST bytes still fits
        with anyio.fail_after(idle_s):
            line = await BufferedByteReceiveStream(stream).receive_until(b"\n", MAX_REQUEST + 1)
    except TimeoutError:
        raise InvalidInput(f"no request line within {idle_s:g}s") from None
    except (anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError):
        return None
    except anyio.DelimiterNotFound:
        pass
    if line is None or len(line) > MAX_REQUEST:
        raise InvalidInput(f"request longer than {MAX_REQUEST} bytes")
    try:
        req = json.loads(line)
    except (ValueError, RecursionError):
        raise InvalidInput("request is not one line of JSON") from None
    if not isinstance(req, dict):
        raise InvalidInput("request must be a JSON object")
    return req


def _served(service: MemoryService, req: dict[str, Any], ident: dict[str, Any]) -> str | None:
    """None when this serve answers for the caller's identity, else why not."""
    caller = req.get("identity")
    if not isinstance(caller, dict):
        return "request carries no identity"
    if caller.get("config") != ident["config"]:
        return "the caller uses another config file"
    agent = req.get("agent")
    from .config import resolve_agent

    try:
        resolved = resolve_agent(
            service.config,
            agent if isinstance(agent, str) else None,
            workspace=caller.get("workspace") or None,
            cwd=Path(caller["cwd"]) if isinstance(caller.get("cwd"), str) else None,
            env={},  # the caller's MEMORYD_WORKSPACE is in its identity, never serve's own
        )
        mine = service.agent(resolved.agent_id)
    except MemorydError as err:
        return str(err)
    except (OSError, ValueError) as err:  # e.g. a path component longer than the file system allows
        return f"cannot resolve the caller's workspace: {getattr(err, 'strerror', None) or err}"
    if mine.workspace != resolved.workspace:
        return f"this serve answers for {mine.workspace}, not {resolved.workspace}"
    return None


#: socket op → the tool whose input model validates it (the same contract as MCP)
OPS = {"search": "memory_search", "get": "memory_get", "status": "memory_status"}
#: `memoryd forget`/`reset`, answered by the serve that holds the engines, so that it never
#: keeps serving what they removed (not agent tools: only the CLI sends them)
LIFECYCLE_OPS = ("forget-plan", "forget", "reset")


def _lifecycle(
    service: MemoryService, op: str, req: dict[str, Any], agent: str | None
) -> dict[str, Any]:
    if op == "forget-plan":
        n = req.get("maxResults", 3)
        if type(n) is not int or not 1 <= n <= 20:
            raise InvalidInput("maxResults must be an integer from 1 to 20")
        return service.forget_plan(req.get("target", ""), agent_id=agent, max_results=n)
    if op == "forget":
        return service.forget(req.get("selections", []), agent_id=agent)
    return service.reset(agent)


_ENVELOPE = ("op", "agent", "identity")


async def dispatch(
    service: MemoryService,
    req: dict[str, Any],
    ident: dict[str, Any],
    limiter: anyio.CapacityLimiter,
) -> dict[str, Any]:
    """Answer one request, `{op, agent?, identity, …tool arguments}`, on a worker thread."""
    from .background import run_blocking
    from .tools import call_tool, validate_tool_input

    try:
        _check_shape(req)
        op = req["op"]
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        if op not in OPS and op not in LIFECYCLE_OPS:
            raise InvalidInput(f"unknown op {op!r} ({', '.join([*OPS, *LIFECYCLE_OPS])}, ping)")
        agent = None if req.get("agent") is None else paths.validate_agent_id(req["agent"])
        if op in LIFECYCLE_OPS:
            answer = functools.partial(_lifecycle, service, op, req, agent)
        else:
            wire = {k: v for k, v in req.items() if k not in _ENVELOPE}
            args = validate_tool_input(OPS[op], wire)
            answer = functools.partial(call_tool, service, args, agent_id=agent)
        why = _served(service, req, ident)
        if why is not None:
            raise NotServed(f"not served here: {why}")
        out = await run_blocking(answer, limiter)
    except MemorydError as err:
        return _error(err)
    if op == "status" and not out.get("disabled"):
        out["servedBy"] = f"serve (pid {os.getpid()})"
    return out


async def serve(
    service: MemoryService,
    *,
    ready: anyio.Event | None = None,
    config_path: Path | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM or cancellation, then stop the background work and qmd."""
    idle_s, cap = IDLE_TIMEOUT_S, MAX_CONNECTIONS  # read now: a test sets smaller ones
    sock = paths.socket_path()
    from .fsio import private_dir

    private_dir(sock.parent)  # the socket is bound before chmod: its folder must be private
    if sock.exists():
        if ping(sock) is not None:
            raise MemorydError(f"another memoryd serve is already running on {sock}")
        sock.unlink()
    import anyio

    from .background import Background, close_shielded, run_blocking, stop_on_signal

    ident = {"config": config_identity(config_path)}
    listener = await anyio.create_unix_listener(sock)
    os.chmod(sock, 0o600)
    limiter = anyio.CapacityLimiter(cap)
    workers = anyio.CapacityLimiter(cap)

    async def handle(stream: SocketStream) -> None:
        async with stream:
            try:
                limiter.acquire_nowait()
            except anyio.WouldBlock:
                # full: answer at once instead of holding the connection (and its descriptor)
                await _send(stream, _error(ServerBusy(f"busy: {cap} requests in flight")))
                return
            try:  # the slot is held until the answer is sent, as a slow reader holds it too
                try:
                    req = await _read_request(stream, idle_s)
                    resp = None if req is None else await dispatch(service, req, ident, workers)
                except InvalidInput as err:  # a bad request line
                    resp = _error(err)
                except Exception as err:  # one request must never take the listener down
                    log.exception("serve: request failed")
                    resp = _error(InternalError(f"internal error: {type(err).__name__}"))
                if resp is not None:
                    await _send(stream, resp)
            finally:
                limiter.release()

    try:
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signal, tg.cancel_scope.cancel, "serve")
            tg.start_soon(listener.serve, handle)
            await run_blocking(lambda: service.start(Background()), workers)
            if ready is not None:
                ready.set()
    finally:
        await close_shielded(service.close)
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()


def request(sock: Path, payload: dict[str, Any], *, timeout: float = 30.0) -> dict[str, Any] | None:
    """Send one request to a running server; None when no server answers (caller runs in-process)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(sock))
            s.sendall(json.dumps(payload).encode() + b"\n")
            with s.makefile("rb") as answer:
                data = answer.readline()
    except OSError:
        return None
    try:
        out = json.loads(data)
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


def ping(sock: Path) -> dict[str, Any] | None:
    return request(sock, {"op": "ping"}, timeout=2.0)
