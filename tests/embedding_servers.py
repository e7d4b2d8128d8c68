"""Local stand-ins for the embedding APIs, served over real HTTP on 127.0.0.1 inside the test process.

Each fake implements its API's wire format — paths, auth header, JSON shapes, error bodies, 429
with Retry-After, batch job lifecycles — so the providers are tested through httpx exactly as
they talk to the real services. Vectors are deterministic functions of (text, dims); `requests`
records every call for assertions; `fail_next` scripts error replies.
"""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[int, dict[str, str], bytes]


def fake_vector(text: str, dims: int) -> list[float]:
    """Deterministic, non-normalized vector for `text` (so tests can predict what a provider returns)."""
    out: list[float] = []
    counter = 0
    while len(out) < dims:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        out.extend((b - 127.5) / 10 for b in digest)
        counter += 1
    return out[:dims]


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
    return (
        status,
        {"Content-Type": "application/json", **(headers or {})},
        json.dumps(body).encode(),
    )


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes = b""


@dataclass
class Scripted:
    status: int
    body: Any
    headers: dict[str, str]
    path_contains: str | None


@dataclass
class FakeAPI:
    """Shared machinery: recording, scripted failures, auth. Subclasses implement `route`."""

    key: str | None = "test-key"
    dims: int = 8
    requests: list[Recorded] = field(default_factory=list)
    #: seconds to hold a request before answering it (by its JSON body), outside the lock
    delay: Callable[[Any], float] | None = None
    _script: deque[Scripted] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def fail_next(
        self,
        status: int,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        times: int = 1,
        path_contains: str | None = None,
    ) -> None:
        """Answer the next `times` matching requests with this error instead of serving them."""
        for _ in range(times):
            self._script.append(
                Scripted(
                    status,
                    body if body is not None else self.error_body(status),
                    headers or {},
                    path_contains,
                )
            )

    def error_body(self, status: int) -> Any:
        return {"error": {"message": f"scripted {status}", "type": "server_error"}}

    def calls(self, fragment: str = "") -> list[Recorded]:
        return [r for r in self.requests if fragment in r.path]

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        ctype = headers.get("content-type", "")
        body: Any = None
        if raw and ctype.startswith("application/json"):
            body = json.loads(raw)
        with self._lock:
            self.requests.append(Recorded(method, path, headers, body, raw))
            for item in list(self._script):
                if item.path_contains is None or item.path_contains in path:
                    self._script.remove(item)
                    return _json(item.status, item.body, item.headers)
        denied = self.check_auth(headers)
        if denied is not None:
            return denied
        if self.delay is not None:
            time.sleep(self.delay(body))
        with self._lock:
            return self.route(method, path, headers, body, raw)

    def check_auth(self, headers: dict[str, str]) -> Reply | None:
        if self.key is None or headers.get("authorization") == f"Bearer {self.key}":
            return None
        return _json(
            401,
            {
                "error": {
                    "message": "Incorrect API key provided.",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
        )

    def route(
        self, method: str, path: str, headers: dict[str, str], body: Any, raw: bytes
    ) -> Reply:
        raise NotImplementedError


# --------------------------------------------------------------------------- OpenAI


@dataclass
class FakeOpenAI(FakeAPI):
    """`/v1/embeddings`, `/v1/files`, `/v1/batches` as the OpenAI API serves them."""

    max_items: int = 2048
    max_input_chars: int = 100_000
    #: Polls of GET /batches/{id} before a job reaches its outcome.
    polls_to_finish: int = 2
    #: "completed", "failed", "expired", or "never" (stays in_progress).
    batch_outcome: str = "completed"
    files: dict[str, bytes] = field(default_factory=dict)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    _polls: dict[str, int] = field(default_factory=dict)

    def embed(self, body: Any) -> Reply:
        inputs = body.get("input") if isinstance(body, dict) else None
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not isinstance(body.get("model"), str):
            return _json(
                400,
                {
                    "error": {
                        "message": "'input' and 'model' are required",
                        "type": "invalid_request_error",
                    }
                },
            )
        if len(inputs) > self.max_items:
            return _json(
                400,
                {
                    "error": {
                        "message": f"'input' must have at most {self.max_items} items",
                        "type": "invalid_request_error",
                    }
                },
            )
        if any(len(t) > self.max_input_chars for t in inputs):
            return _json(
                400,
                {
                    "error": {
                        "message": "This model's maximum context length is 8192 tokens.",
                        "type": "invalid_request_error",
                    }
                },
            )
        dims = body.get("dimensions") or self.dims
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(t, dims)}
            for i, t in enumerate(inputs)
        ]
        data.reverse()  # the API does not promise order; clients must use `index`
        tokens = sum(len(t) // 4 + 1 for t in inputs)
        return _json(
            200,
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def route(
        self, method: str, path: str, headers: dict[str, str], body: Any, raw: bytes
    ) -> Reply:
        if method == "POST" and path == "/v1/embeddings":
            return self.embed(body)
        if method == "POST" and path == "/v1/files":
            return self.upload(headers, raw)
        if method == "POST" and path == "/v1/batches":
            return self.create_batch(body)
        if match := re.fullmatch(r"/v1/batches/([^/]+)", path):
            return (
                self.poll_batch(match.group(1))
                if method == "GET"
                else _json(405, {"error": {"message": "method"}})
            )
        if method == "POST" and (match := re.fullmatch(r"/v1/batches/([^/]+)/cancel", path)):
            batch = self.batches[match.group(1)]
            batch["status"] = "cancelling"
            return _json(200, batch)
        if method == "GET" and (match := re.fullmatch(r"/v1/files/([^/]+)/content", path)):
            content = self.files.get(match.group(1))
            if content is None:
                return _json(
                    404,
                    {"error": {"message": "No such File object", "type": "invalid_request_error"}},
                )
            return 200, {"Content-Type": "application/octet-stream"}, content
        return _json(
            404,
            {
                "error": {
                    "message": f"Invalid URL ({method} {path})",
                    "type": "invalid_request_error",
                }
            },
        )

    def upload(self, headers: dict[str, str], raw: bytes) -> Reply:
        message = email.parser.BytesParser(policy=email.policy.default).parsebytes(
            b"Content-Type: " + headers.get("content-type", "").encode() + b"\r\n\r\n" + raw
        )
        fields: dict[str, bytes] = {}
        filename = ""
        for part in message.iter_parts():  # type: ignore[attr-defined]
            name = part.get_param("name", header="content-disposition")
            fields[str(name)] = part.get_payload(decode=True)
            filename = part.get_filename() or filename
        if fields.get("purpose") != b"batch" or "file" not in fields:
            return _json(
                400,
                {
                    "error": {
                        "message": "purpose must be 'batch' and a file is required",
                        "type": "invalid_request_error",
                    }
                },
            )
        file_id = f"file-{len(self.files) + 1}"
        self.files[file_id] = fields["file"]
        return _json(
            200,
            {
                "id": file_id,
                "object": "file",
                "bytes": len(fields["file"]),
                "filename": filename,
                "purpose": "batch",
            },
        )

    def create_batch(self, body: Any) -> Reply:
        if body.get("endpoint") != "/v1/embeddings" or body.get("completion_window") != "24h":
            return _json(
                400,
                {
                    "error": {
                        "message": "unsupported endpoint or completion_window",
                        "type": "invalid_request_error",
                    }
                },
            )
        if body.get("input_file_id") not in self.files:
            return _json(
                400, {"error": {"message": "input file not found", "type": "invalid_request_error"}}
            )
        batch_id = f"batch_{len(self.batches) + 1}"
        self.batches[batch_id] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": "/v1/embeddings",
            "input_file_id": body["input_file_id"],
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "errors": None,
        }
        self._polls[batch_id] = 0
        return _json(200, self.batches[batch_id])

    def poll_batch(self, batch_id: str) -> Reply:
        batch = self.batches.get(batch_id)
        if batch is None:
            return _json(
                404, {"error": {"message": "No such batch", "type": "invalid_request_error"}}
            )
        self._polls[batch_id] += 1
        if (
            batch["status"] in ("validating", "in_progress", "finalizing")
            and self.batch_outcome != "never"
        ):
            if self._polls[batch_id] >= self.polls_to_finish:
                self.finish(batch)
            else:
                batch["status"] = "in_progress"
        elif self.batch_outcome == "never" and batch["status"] == "validating":
            batch["status"] = "in_progress"
        return _json(200, batch)

    def finish(self, batch: dict[str, Any]) -> None:
        if self.batch_outcome == "failed":
            batch["status"] = "failed"
            batch["errors"] = {
                "object": "list",
                "data": [
                    {"code": "invalid_request", "message": "scripted batch failure", "line": 1}
                ],
            }
            return
        if self.batch_outcome == "expired":
            batch["status"] = "expired"
            return
        out = []
        for n, line in enumerate(self.files[batch["input_file_id"]].decode().splitlines()):
            request = json.loads(line)
            assert request["method"] == "POST" and request["url"] == "/v1/embeddings"
            status, _, payload = self.embed(request["body"])
            out.append(
                {
                    "id": f"batch_req_{n}",
                    "custom_id": request["custom_id"],
                    "response": {
                        "status_code": status,
                        "request_id": f"req_{n}",
                        "body": json.loads(payload),
                    },
                    "error": None,
                }
            )
        out.reverse()  # output order is not guaranteed; custom_id is the join key
        output_id = f"file-{len(self.files) + 1}"
        self.files[output_id] = "\n".join(json.dumps(o) for o in out).encode() + b"\n"
        batch["status"] = "completed"
        batch["output_file_id"] = output_id


# --------------------------------------------------------------------------- Gemini


@dataclass
class FakeGemini(FakeAPI):
    """Generative Language API v1beta: embedContent, batchEmbedContents, asyncBatchEmbedContent."""

    polls_to_finish: int = 2
    batch_outcome: str = "completed"
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    _polls: dict[str, int] = field(default_factory=dict)

    def error_body(self, status: int) -> Any:
        names = {
            429: "RESOURCE_EXHAUSTED",
            500: "INTERNAL",
            503: "UNAVAILABLE",
            400: "INVALID_ARGUMENT",
        }
        return {
            "error": {
                "code": status,
                "message": f"scripted {status}",
                "status": names.get(status, "UNKNOWN"),
            }
        }

    def check_auth(self, headers: dict[str, str]) -> Reply | None:
        got = headers.get("x-goog-api-key")
        if got is None:
            return _json(
                403,
                {
                    "error": {
                        "code": 403,
                        "message": "Method doesn't allow unregistered callers.",
                        "status": "PERMISSION_DENIED",
                    }
                },
            )
        if got != self.key:
            return _json(
                400,
                {
                    "error": {
                        "code": 400,
                        "message": "API key not valid. Please pass a valid API key.",
                        "status": "INVALID_ARGUMENT",
                    }
                },
            )
        return None

    def _embed_one(self, request: Any, model: str) -> dict[str, Any] | Reply:
        try:
            parts = request["content"]["parts"]
            text = "".join(p["text"] for p in parts)
        except (KeyError, TypeError):
            return _json(
                400,
                {
                    "error": {
                        "code": 400,
                        "message": "* EmbedContentRequest.content: contents is not specified",
                        "status": "INVALID_ARGUMENT",
                    }
                },
            )
        if "model" in request and request["model"] != f"models/{model}":
            return _json(
                400,
                {
                    "error": {
                        "code": 400,
                        "message": "model in request does not match the batch model",
                        "status": "INVALID_ARGUMENT",
                    }
                },
            )
        task = request.get("taskType", "TASK_TYPE_UNSPECIFIED")
        dims = request.get("outputDimensionality") or self.dims
        return {"values": fake_vector(f"{task}|{text}", dims)}

    def route(
        self, method: str, path: str, headers: dict[str, str], body: Any, raw: bytes
    ) -> Reply:
        if method == "POST" and (match := re.fullmatch(r"/v1beta/models/([^/:]+):(\w+)", path)):
            model, verb = match.groups()
            if verb == "embedContent":
                one = self._embed_one(body, model)
                return one if isinstance(one, tuple) else _json(200, {"embedding": one})
            if verb == "batchEmbedContents":
                requests = body.get("requests") or []
                if len(requests) > 100:
                    return _json(
                        400,
                        {
                            "error": {
                                "code": 400,
                                "message": "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch",
                                "status": "INVALID_ARGUMENT",
                            }
                        },
                    )
                out = []
                for request in requests:
                    one = self._embed_one(request, model)
                    if isinstance(one, tuple):
                        return one
                    out.append(one)
                return _json(200, {"embeddings": out})
            if verb == "asyncBatchEmbedContent":
                return self.create_batch(model, body)
        if method == "GET" and (match := re.fullmatch(r"/v1beta/(batches/[^/:]+)", path)):
            return self.poll(match.group(1))
        if method == "POST" and (match := re.fullmatch(r"/v1beta/(batches/[^/:]+):cancel", path)):
            self.operations[match.group(1)]["metadata"]["state"] = "BATCH_STATE_CANCELLED"
            return _json(200, {})
        return _json(
            404, {"error": {"code": 404, "message": f"{path} not found", "status": "NOT_FOUND"}}
        )

    def create_batch(self, model: str, body: Any) -> Reply:
        try:
            requests = body["batch"]["inputConfig"]["requests"]["requests"]
            body["batch"]["displayName"]
        except (KeyError, TypeError):
            return _json(
                400,
                {
                    "error": {
                        "code": 400,
                        "message": "batch.inputConfig and batch.displayName are required",
                        "status": "INVALID_ARGUMENT",
                    }
                },
            )
        name = f"batches/b{len(self.operations) + 1}"
        self.operations[name] = {
            "name": name,
            "metadata": {
                "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.EmbedContentBatch",
                "model": f"models/{model}",
                "state": "BATCH_STATE_PENDING",
            },
            "done": False,
            "_model": model,
            "_requests": requests,
        }
        self._polls[name] = 0
        return _json(200, self._public(self.operations[name]))

    @staticmethod
    def _public(op: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in op.items() if not k.startswith("_")}

    def poll(self, name: str) -> Reply:
        op = self.operations.get(name)
        if op is None:
            return _json(
                404,
                {
                    "error": {
                        "code": 404,
                        "message": "Requested entity was not found.",
                        "status": "NOT_FOUND",
                    }
                },
            )
        self._polls[name] += 1
        if (
            not op["done"]
            and self.batch_outcome != "never"
            and self._polls[name] >= self.polls_to_finish
        ):
            self.finish(op)
        elif not op["done"]:
            op["metadata"]["state"] = "BATCH_STATE_RUNNING"
        return _json(200, self._public(op))

    def finish(self, op: dict[str, Any]) -> None:
        op["done"] = True
        if self.batch_outcome in ("failed", "expired"):
            op["metadata"]["state"] = (
                "BATCH_STATE_FAILED" if self.batch_outcome == "failed" else "BATCH_STATE_EXPIRED"
            )
            op["error"] = {"code": 13, "message": f"scripted batch {self.batch_outcome}"}
            return
        responses = []
        for item in op["_requests"]:
            responses.append(
                {
                    "response": {"embedding": self._embed_one(item["request"], op["_model"])},
                    "metadata": item.get("metadata", {}),
                }
            )
        responses.reverse()
        op["metadata"]["state"] = "BATCH_STATE_SUCCEEDED"
        op["response"] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.EmbedContentBatch",
            "output": {"inlinedResponses": {"inlinedResponses": responses}},
        }


# --------------------------------------------------------------------------- Voyage, Mistral, Ollama


@dataclass
class FakeVoyage(FakeAPI):
    max_items: int = 1000

    def error_body(self, status: int) -> Any:
        return {"detail": f"scripted {status}"}

    def check_auth(self, headers: dict[str, str]) -> Reply | None:
        if headers.get("authorization") == f"Bearer {self.key}":
            return None
        return _json(401, {"detail": "Provided API key is invalid."})

    def route(
        self, method: str, path: str, headers: dict[str, str], body: Any, raw: bytes
    ) -> Reply:
        if (method, path) != ("POST", "/v1/embeddings"):
            return _json(404, {"detail": "Not Found"})
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if body.get("input_type") not in (None, "query", "document"):
            return _json(
                400, {"detail": "Value error, input_type must be None, 'query' or 'document'."}
            )
        if not isinstance(inputs, list) or len(inputs) > self.max_items:
            return _json(400, {"detail": f"The batch size limit is {self.max_items}."})
        dims = body.get("output_dimension") or self.dims
        kind = body.get("input_type") or "none"
        data = [
            {"object": "embedding", "embedding": fake_vector(f"{kind}|{t}", dims), "index": i}
            for i, t in enumerate(inputs)
        ]
        return _json(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model"),
                "usage": {"total_tokens": 1},
            },
        )


@dataclass
class FakeMistral(FakeAPI):
    max_batch_chars: int = 60_000

    def error_body(self, status: int) -> Any:
        return {
            "object": "error",
            "message": f"scripted {status}",
            "type": "internal_error",
            "param": None,
            "code": None,
        }

    def check_auth(self, headers: dict[str, str]) -> Reply | None:
        if headers.get("authorization") == f"Bearer {self.key}":
            return None
        return _json(401, {"message": "Unauthorized", "request_id": "r-1"})

    def route(
        self, method: str, path: str, headers: dict[str, str], body: Any, raw: bytes
    ) -> Reply:
        if (method, path) != ("POST", "/v1/embeddings"):
            return _json(404, {"detail": "Not Found"})
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if sum(len(t) for t in inputs) > self.max_batch_chars:
            return _json(
                400,
                {
                    "object": "error",
                    "message": "Too many tokens overall, split into more batches.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "3210",
                },
            )
        data = [
            {"object": "embedding", "embedding": fake_vector(t, self.dims), "index": i}
            for i, t in enumerate(inputs)
        ]
        return _json(
            200,
            {
                "id": "emb-1",
                "object": "list",
                "data": data,
                "model": body.get("model"),
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            },
        )


@dataclass
class FakeOllama(FakeAPI):
    key: str | None = None
    models: tuple[str, ...] = ("nomic-embed-text",)
    #: Simulate an Ollama older than 0.3.4: only the legacy /api/embeddings exists.
    legacy_only: bool = False

    def error_body(self, status: int) -> Any:
        return {"error": f"scripted {status}"}

    def route(
        self, method: str, path: str, headers: dict[str, str], body: Any, raw: bytes
    ) -> Reply:
        if method == "POST" and path == "/api/embed" and not self.legacy_only:
            if body.get("model") not in self.models:
                return _json(
                    404, {"error": f'model "{body.get("model")}" not found, try pulling it first'}
                )
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            return _json(
                200,
                {
                    "model": body["model"],
                    "embeddings": [fake_vector(t, self.dims) for t in inputs],
                    "total_duration": 1,
                    "load_duration": 1,
                    "prompt_eval_count": 1,
                },
            )
        if method == "POST" and path == "/api/embeddings":
            if body.get("model") not in self.models:
                return _json(
                    404, {"error": f'model "{body.get("model")}" not found, try pulling it first'}
                )
            return _json(200, {"embedding": fake_vector(body["prompt"], self.dims)})
        return 404, {"Content-Type": "text/plain"}, b"404 page not found"


# --------------------------------------------------------------------------- server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api: FakeAPI

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            status, reply_headers, payload = self.api.handle(self.command, self.path, headers, raw)
        except (
            Exception
        ) as err:  # a bug in the fake: answer 400 so the test fails loudly, unretried
            status, reply_headers, payload = _json(
                400, {"error": {"message": f"fake server bug: {err!r}"}}
            )
        try:
            self.send_response(status)
            for key, value in reply_headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a cancelled or timed-out request): nothing to answer

    do_GET = do_POST = _serve

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass


@contextmanager
def serve(api: FakeAPI) -> Iterator[str]:
    """Run `api` on 127.0.0.1:<free port> in a thread; yields the server root URL."""
    handler = type("Handler", (_Handler,), {"api": api})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def fast_retry(sleeps: list[float] | None = None, *, attempts: int = 3) -> Any:
    """A RetryPolicy that records requested waits instead of sleeping them (tests stay fast)."""
    from memoryd.embeddings.http import RetryPolicy

    def sleep(seconds: float) -> None:
        if sleeps is not None:
            sleeps.append(seconds)

    return RetryPolicy(attempts=attempts, timeout=10.0, sleep=sleep)
