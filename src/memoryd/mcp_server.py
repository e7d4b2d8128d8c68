"""`memoryd mcp`: the six agent tools over MCP, on stdio or Streamable HTTP (docs/mcp.md).

Failures are tool results, never protocol errors; memory loads once the handshake is done.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import functools
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import SplitResult, urlsplit

import anyio
import anyio.from_thread
import mcp.types as types
from anyio.abc import TaskGroup
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from . import __version__, paths
from .background import Background, close_shielded, run_blocking, stop_on_signal
from .errors import ConfigError, InternalError, InvalidInput, MemorydError, StateError
from .fsio import create_private_once, private_dir, read_private
from .tools import TOOLS, call_tool, input_schema, validate_tool_input

if TYPE_CHECKING:
    from .orchestrator import MemoryService

log = logging.getLogger("memoryd.mcp")

#: Tool calls answered at once: each holds a worker thread while the service blocks.
WORKERS = 16

INSTRUCTIONS = (
    "Long-term memory for this agent. Call memory_search before answering questions about prior "
    "work, decisions, people, preferences or dates; then memory_get to read more lines of a hit."
)


class _ServiceHandle:
    """The `MemoryService` behind the tools, built and started off the event loop on first need."""

    def __init__(
        self, service: MemoryService | Callable[[], MemoryService], agent_id: str | None
    ) -> None:
        self.agent_id = agent_id
        self._factory = service if callable(service) else lambda: service
        self._service: MemoryService | None = None
        self._lock = anyio.Lock()
        self.workers = anyio.CapacityLimiter(WORKERS)
        #: set while serving: the service's timers then run in this task group
        self.tg: TaskGroup | None = None
        self._warming = False

    async def ready(self) -> MemoryService:
        """The service, built (and started, when serving) once: tool calls wait here."""
        async with self._lock:
            if self._service is None:
                started = time.perf_counter()
                svc = await run_blocking(self._factory, self.workers)
                if self.tg is not None:
                    try:
                        agents = [svc.agent(self.agent_id).agent_id]
                        await run_blocking(lambda: svc.start(Background(), agents), self.workers)
                        log.info("memory service started in %.2fs", time.perf_counter() - started)
                    except Exception:  # tool calls report the failure; the server keeps serving
                        log.exception("starting the memory service failed")
                self._service = svc
        return self._service

    def warm_soon(self) -> None:
        """Make the service ready in the background (once); a no-op until `tg` is set."""
        if self.tg is not None and not self._warming:
            self._warming = True
            self.tg.start_soon(self._warm)

    async def _warm(self) -> None:
        try:
            await self.ready()
        except Exception:  # the factory failed: a tool call retries it and reports why
            log.exception("starting the memory service failed")

    async def aclose(self) -> None:
        if self._service is not None:
            await close_shielded(self._service.close)


def _result(data: dict[str, Any]) -> types.CallToolResult:
    # the same JSON as text for hosts that do not read structuredContent
    text = json.dumps(data, ensure_ascii=False, default=str)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=data,
        is_error=data.get("disabled") is True,
    )


def _build(handle: _ServiceHandle) -> Server[Any]:
    tools = [
        types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=input_schema(tool.name),
            annotations=types.ToolAnnotations(
                read_only_hint=tool.read_only,
                destructive_hint=False,
                idempotent_hint=tool.read_only,
                open_world_hint=False,
            ),
        )
        for tool in TOOLS.values()
    ]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def answer_call(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in TOOLS:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        try:  # bad arguments and a failing service factory are results too
            args = validate_tool_input(params.name, params.arguments)
            svc = await handle.ready()
            call = functools.partial(call_tool, svc, args, agent_id=handle.agent_id)
            return _result(await run_blocking(call, handle.workers))
        except MemorydError as err:
            return _result(err.to_result())
        except Exception:  # a memoryd bug: the agent gets one line, the log the traceback
            log.exception("tool %s failed", params.name)
            return _result(
                InternalError(f"internal error in {params.name} (see the memoryd log)").to_result()
            )

    async def warm_after_handshake(ctx: ServerRequestContext[Any], call_next: CallNext) -> Any:
        result: HandlerResult = await call_next(ctx)
        # any message after `initialize` means its answer is out: now pay for loading memory
        if ctx.method != "initialize":
            handle.warm_soon()
        return result

    server: Server[Any] = Server(
        "memoryd",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=answer_call,
        get_tool_input_schema=lambda name: input_schema(name) if name in TOOLS else None,
    )
    # provisional in mcp 2.x, but the one hook that sees the handshake finish
    server.middleware.append(warm_after_handshake)
    return server


def build_server(
    service: MemoryService | Callable[[], MemoryService], *, agent_id: str | None = None
) -> Server[Any]:
    """The MCP server for one agent's tools; `service` may be a factory, called on first need."""
    return _build(_ServiceHandle(service, agent_id))


#: How long, after the host closes stdin, requests already read may take to be answered.
EOF_GRACE_S = 5.0


class _StdinLines:
    """The MCP wire's lines, read by a daemon thread so SIGTERM never waits for input; fd 0 is
    /dev/null meanwhile, so that child processes (qmd) cannot read the wire."""

    def __init__(self) -> None:
        self._wire_fd = os.dup(0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        self._send, self._recv = anyio.create_memory_object_stream[str](0)
        self._pending: set[str] = set()  # ids of requests read and not yet answered
        self._settled: anyio.Event | None = None
        self._token = anyio.lowlevel.current_token()
        threading.Thread(target=self._pump, name="memoryd-mcp-stdin", daemon=True).start()

    def _pump(self) -> None:
        # closefd=False: fd 0 is restored from this descriptor on exit, so it must stay open
        try:
            with open(self._wire_fd, encoding="utf-8", errors="replace", closefd=False) as wire:
                for line in wire:
                    anyio.from_thread.run(self._send.send, line, token=self._token)
        except (
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            anyio.RunFinishedError,
            # shutdown cancelled the hand-over of a line (either kind, by where it stopped)
            concurrent.futures.CancelledError,
            asyncio.CancelledError,
        ):
            return
        with suppress(anyio.RunFinishedError):
            anyio.from_thread.run_sync(self._send.close, token=self._token)

    async def __aiter__(self) -> AsyncIterator[str]:
        """The wire's lines; EOF waits (at most `EOF_GRACE_S`) for the requests read to be answered."""
        async for line in self._recv:
            with suppress(ValueError):  # the SDK answers a parse error itself, at once
                message = json.loads(line)
                if isinstance(message, dict) and "method" in message and "id" in message:
                    self._pending.add(_wire_id(message["id"]))
            yield line
        with anyio.move_on_after(EOF_GRACE_S):  # closing stdin is also how a host shuts us down
            while self._pending:
                self._settled = anyio.Event()
                await self._settled.wait()

    def answered(self, message: object) -> None:
        """Called with each message the server writes: a response settles its request."""
        inner = getattr(message, "message", message)
        if hasattr(inner, "method") or not hasattr(inner, "id"):
            return
        self._pending.discard(_wire_id(inner.id))
        if not self._pending and self._settled is not None:
            self._settled.set()

    def restore(self) -> None:
        self._recv.close()
        os.dup2(self._wire_fd, 0)


def _wire_id(value: object) -> str:
    """A JSON-RPC id as one comparable key (2 and "2" are different ids)."""
    return f"{type(value).__name__}:{value}"


class _AnsweredWrites:
    """The SDK's write stream, telling `_StdinLines` about each message on its way out."""

    def __init__(self, stream: Any, seen: Callable[[object], None]) -> None:
        self._stream = stream
        self._seen = seen

    async def send(self, message: object) -> None:
        await self._stream.send(message)
        self._seen(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def __aenter__(self) -> _AnsweredWrites:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> Any:
        return await self._stream.__aexit__(*exc)


async def serve_stdio(service: Callable[[], MemoryService], agent_id: str) -> None:
    """Serve MCP on stdin/stdout until EOF, SIGTERM or SIGINT; then close the service."""
    handle = _ServiceHandle(service, agent_id)
    server = _build(handle)
    stdin = _StdinLines()
    try:
        async with anyio.create_task_group() as tg:
            handle.tg = tg  # the service's timers run in the serving task group
            tg.start_soon(stop_on_signal, tg.cancel_scope.cancel, "mcp")
            async with stdio_server(stdin=cast(Any, stdin)) as (read, write):
                watched = _AnsweredWrites(write, stdin.answered)
                await server.run(read, cast(Any, watched), server.create_initialization_options())
            tg.cancel_scope.cancel()
    finally:
        stdin.restore()
        await handle.aclose()


#: Wildcard bind addresses: the request's legitimate `Host` is unknowable.
WILDCARD_BIND_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]", "*"})


def is_loopback_hostname(hostname: str) -> bool:
    """localhost, *.localhost, 127/8 or ::1; never 0.0.0.0, which browsers route to local servers."""
    h = hostname.strip().lower().removeprefix("[").removesuffix("]")
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(h)
    except ValueError:
        return False
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


@dataclass(frozen=True)
class OriginGuard:
    """What `check_request_origin` accepts besides loopback names (see `resolve_origin_guard`)."""

    allowed_origins: frozenset[str]
    allowed_hosts: frozenset[str]
    enforce_host: bool
    disabled: bool = False


def _split(url: str) -> SplitResult | None:
    """`url` split, or None when it (or its port) is malformed."""
    try:
        parts = urlsplit(url.strip())
        _ = parts.port
    except ValueError:
        return None
    return parts


def _normalize_origin(origin: str) -> str | None:
    parts = _split(origin)
    if parts is None or not parts.scheme or not parts.hostname:
        return None
    scheme = parts.scheme.lower()
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" + ("" if parts.port in (None, default) else f":{parts.port}")


def _loopback(parts: SplitResult | None) -> bool:
    return bool(parts and parts.hostname and is_loopback_hostname(parts.hostname))


def resolve_origin_guard(
    bind_host: str, *, allowed_origins: Iterable[str] = (), allowed_hosts: Iterable[str] = ()
) -> OriginGuard:
    """The request screen for a server bound to `bind_host` (qmd 2.8.3's rules, docs/mcp.md)."""
    origins = list(allowed_origins)
    if "*" in origins:
        return OriginGuard(frozenset(), frozenset(), enforce_host=False, disabled=True)
    normalized = frozenset(o for o in (_normalize_origin(x) for x in origins) if o)
    hosts = {h.strip().lower() for h in allowed_hosts if h.strip()}
    bind = bind_host.strip().lower()
    wildcard = bind in WILDCARD_BIND_HOSTS
    if not wildcard and not is_loopback_hostname(bind):
        hosts.add(bind.removeprefix("[").removesuffix("]"))
    return OriginGuard(normalized, frozenset(hosts), enforce_host=not wildcard or bool(hosts))


def check_request_origin(origin: str | None, host: str | None, guard: OriginGuard) -> str | None:
    """Why a request must be refused, or None; a missing Origin passes (browsers always send one)."""
    if guard.disabled:
        return None
    origin = (origin or "").strip()
    if origin:
        parts = _split(origin)
        web = parts is not None and parts.scheme.lower() in ("http", "https")
        if not ((web and _loopback(parts)) or _normalize_origin(origin) in guard.allowed_origins):
            return f"Origin not allowed: {origin}"
    host = (host or "").strip()
    if guard.enforce_host and host:
        parts = _split(f"http://{host}")
        allowed = guard.allowed_hosts
        if not (
            _loopback(parts) or host.lower() in allowed or (parts and parts.hostname) in allowed
        ):
            return f"Host not allowed: {host}"
    return None


#: What a client refused for the session cap is told to wait (seconds).
RETRY_AFTER_S = 30
_TOKEN_RE = re.compile(r"[A-Za-z0-9_\-]{32,256}")


def load_token() -> tuple[str, Path]:
    """(the bearer token, its file): made once, 0600 in the state dir; `StateError` if unusable."""
    path = paths.state_dir() / "mcp-token"
    private_dir(path.parent)
    create_private_once(path, (secrets.token_urlsafe(32) + "\n").encode("ascii"))
    raw = read_private(path) or b""
    token = raw.decode("ascii", "replace").strip()
    if not _TOKEN_RE.fullmatch(token):
        raise StateError(f"{path} does not hold a memoryd token: remove it and start again")
    return token, path


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


def token_matches(authorization: str | None, token: str) -> bool:
    """Whether `authorization` is `Bearer <token>`; hashed first, so timing tells nothing."""
    scheme, _, given = (authorization or "").strip().partition(" ")
    ok_scheme = scheme.lower() == "bearer"
    return hmac.compare_digest(_digest(given.strip()), _digest(token)) and ok_scheme


class _Screen:
    """ASGI middleware: `check_request_origin` (403), then the bearer token everywhere but
    `GET /health` (401, never logged), before routing; a 503 gets `Retry-After`."""

    def __init__(self, app: Any, guard: OriginGuard, token: str) -> None:
        self.app, self.guard, self.token = app, guard, token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        reason = check_request_origin(headers.get("origin"), headers.get("host"), self.guard)
        authorized = scope.get("path") == "/health" or token_matches(
            headers.get("authorization"), self.token
        )
        if reason is None and authorized:

            async def send_with_retry_after(message: Any) -> None:
                if message["type"] == "http.response.start" and message["status"] == 503:
                    retry = (b"retry-after", str(RETRY_AFTER_S).encode())
                    message = {**message, "headers": [*message.get("headers", []), retry]}
                await send(message)

            await self.app(scope, receive, send_with_retry_after)
            return
        if reason is not None:
            log.warning("%s %s refused: %s", scope.get("method"), scope.get("path"), reason)
            error, status, extra = {"code": -32003, "message": f"Forbidden: {reason}"}, 403, {}
        else:
            error = {
                "code": -32001,
                "message": "Unauthorized: send 'Authorization: Bearer <token>' "
                "(memoryd mcp --print-token prints it)",
            }
            status, extra = 401, {"www-authenticate": 'Bearer realm="memoryd"'}
        from starlette.responses import JSONResponse

        body = {"jsonrpc": "2.0", "error": error, "id": None}
        await JSONResponse(body, status, headers=extra)(scope, receive, send)


def _listen(host: str, port: int) -> socket.socket:
    sock = None
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError as err:
        if sock is not None:
            sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    return sock  # not inherited by qmd: Python's sockets are non-inheritable (PEP 446)


def _check_http_bind(host: str, args: argparse.Namespace) -> None:
    """Refuse, before anything listens, a bind that would expose memory (see `serve_http`)."""
    if not args.allow_remote and not is_loopback_hostname(host):
        raise InvalidInput(
            f"refusing to serve MCP on non-loopback address {host!r}: anyone who can reach it "
            "could read this agent's memory; pass --allow-remote to do it anyway"
        )
    if bool(args.tls_cert) != bool(args.tls_key):
        raise InvalidInput("--tls-cert and --tls-key go together: pass both or neither")
    if args.allow_remote and not args.tls_cert:
        raise InvalidInput(
            "--allow-remote needs TLS (--tls-cert FILE --tls-key FILE): without it the bearer "
            "token and every memory would cross the network in clear text"
        )
    for label, file in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if file and not os.path.isfile(file):
            raise ConfigError(f"{label} {file}: no such file")


def _say_listening(url: str, token_path: Path, guard: OriginGuard, host: str) -> None:
    lines = [
        f"listening on {url}",
        "clients must send 'Authorization: Bearer <token>'; the token is in "
        f"{token_path} (memoryd mcp --print-token prints it)",
    ]
    if guard.disabled:
        lines.append("warning: --allow-origin '*' turns DNS-rebinding protection off")
    elif not guard.enforce_host:
        lines.append(
            f"warning: bound to {host} with no --allow-host: Host validation is off and memory "
            "is readable by anyone who can reach this port"
        )
    for line in lines:
        print(f"memoryd mcp: {line}", file=sys.stderr, flush=True)


def _uvicorn(app: Any, tls_cert: str | None, tls_key: str | None, sock: socket.socket) -> Any:
    """uvicorn for `app`, its TLS files read now: a bad one is one line, not a trace."""
    import uvicorn

    class _QuietUvicorn(uvicorn.Server):
        """uvicorn without its own signal handlers: `stop_on_signal` owns SIGTERM/SIGINT."""

        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(
        app,
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        log_config=None,
        access_log=False,
        lifespan="on",
        # open SSE streams would otherwise hold shutdown (uvicorn passes it to wait_for)
        timeout_graceful_shutdown=cast(int, 0.3),
    )
    try:
        config.load()
    except (OSError, ValueError) as err:
        sock.close()
        raise ConfigError(
            f"cannot use --tls-cert {tls_cert} with --tls-key {tls_key} (PEM files that belong "
            f"together?): {err}"
        ) from None
    return _QuietUvicorn(config)


async def serve_http(
    service: Callable[[], MemoryService], args: argparse.Namespace, agent_id: str
) -> None:
    """Serve MCP over Streamable HTTP at `http(s)://host:port/mcp` (plus `GET /health`), with
    the options `memoryd mcp --http` was given (TLS, --allow-*, --session-idle, --max-sessions)."""
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    host, port = args.http
    _check_http_bind(host, args)
    token, token_path = load_token()
    guard = resolve_origin_guard(
        host, allowed_origins=args.allow_origin, allowed_hosts=args.allow_host
    )
    sock = _listen(host, port)
    bound_port = sock.getsockname()[1]

    handle = _ServiceHandle(service, agent_id)
    server = _build(handle)
    started = time.monotonic()

    async def health(request: Request) -> JSONResponse:
        return JSONResponse(
            {"status": "ok", "version": __version__, "uptime": int(time.monotonic() - started)}
        )

    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=True,
        # the Origin/Host screen is ours (qmd's rules); the SDK's own would reject e.g. 127.0.0.2
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host=host,
        custom_starlette_routes=[Route("/health", health, methods=["GET"])],
        session_idle_timeout=args.session_idle,
        max_sessions=args.max_sessions,
    )

    uv = _uvicorn(_Screen(app, guard, token), args.tls_cert, args.tls_key, sock)
    shown = f"[{host}]" if ":" in host else host
    url = f"{'https' if args.tls_cert else 'http'}://{shown}:{bound_port}/mcp"
    _say_listening(url, token_path, guard, host)

    try:
        async with anyio.create_task_group() as tg:
            handle.tg = tg  # the service's timers run in the serving task group
            tg.start_soon(
                stop_on_signal, functools.partial(setattr, uv, "should_exit", True), "mcp"
            )
            await uv.serve(sockets=[sock])
            tg.cancel_scope.cancel()
    finally:
        sock.close()
        await handle.aclose()
