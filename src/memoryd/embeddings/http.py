"""The HTTP edge every remote embedding provider shares: one httpx client, retries, error bodies."""

from __future__ import annotations

import email.utils
import json
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from ..errors import EmbeddingError
from .base import DeadlineReached

USER_AGENT = "memoryd/0.1 (+embeddings)"
# Some providers say "slow down" with a 400 or 403 whose message names the limit.
_RATE_LIMIT = re.compile(r"rate[ _]?limit|too many requests|resource_exhausted|quota", re.I)


class EmbeddingHTTPError(EmbeddingError):
    """Raised when an embedding API answers with an error status."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int = 0,
        detail: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        #: The API's own error message, without our prefix.
        self.detail = detail
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        status = self.status_code
        if status == 429 or status >= 500:
            return True
        return status in (400, 403) and _RATE_LIMIT.search(self.detail) is not None


@dataclass(frozen=True)
class RetryPolicy:
    """How remote calls retry. Tests shrink the waits and inject `sleep` to observe them."""

    attempts: int = 3
    min_wait: float = 0.5
    max_wait: float = 8.0
    #: Longest `Retry-After` we obey; a server asking for more gets this instead.
    retry_after_cap: float = 30.0
    timeout: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header (delta-seconds or HTTP date); None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def backoff_seconds(attempt: int, policy: RetryPolicy, retry_after: float | None) -> float:
    """Wait before retry number `attempt` (1-based): Retry-After if given (capped), else jittered exponential."""
    if retry_after is not None:
        return min(retry_after, policy.retry_after_cap)
    base = policy.min_wait * (2 ** (attempt - 1))
    return float(min(policy.max_wait, base + random.uniform(0, policy.min_wait)))


def error_message(response: httpx.Response) -> str:
    """The human part of an API error body, across the shapes providers use."""
    try:
        body: Any = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        text = response.text.strip()
        return text[:300] or response.reason_phrase
    if isinstance(body, dict):
        # OpenAI and Gemini nest {"message"} in "error", Ollama's is a string; Voyage says
        # "detail", Mistral "message"
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err.get("status") or err)
        if isinstance(err, str):
            return err
        for key in ("detail", "message"):
            if key in body:
                return str(body[key])
    return json.dumps(body)[:300]


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, EmbeddingHTTPError):
        return exc.retryable
    return isinstance(exc, httpx.TransportError)


class ApiClient:
    """One provider's endpoint: base URL, merged headers, a lazily opened `httpx.Client`."""

    def __init__(
        self, provider: str, base_url: str, headers: Mapping[str, str], retry: RetryPolicy
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers)
        self.retry = retry
        self._client: httpx.Client | None = None

    def _http(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(
                headers={"user-agent": USER_AGENT, **self.headers},
                timeout=httpx.Timeout(self.retry.timeout, connect=min(10.0, self.retry.timeout)),
                follow_redirects=True,
            )
        return self._client

    def url(self, path: str) -> str:
        return (
            path
            if path.startswith(("http://", "https://"))
            else f"{self.base_url}/{path.lstrip('/')}"
        )

    def _send_once(
        self, method: str, path: str, deadline: float | None, **kwargs: Any
    ) -> httpx.Response:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlineReached
            # the deadline bounds the whole wait, connecting included
            kwargs["timeout"] = min(self.retry.timeout, left)
        response = self._http().request(method, self.url(path), **kwargs)
        if response.is_success:
            return response
        message = error_message(response)
        raise EmbeddingHTTPError(
            f"{self.provider}: HTTP {response.status_code} from {method} {self.url(path)}: {message}",
            status_code=response.status_code,
            detail=message,
            retry_after=parse_retry_after(response.headers.get("retry-after")),
        )

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        retry_after = exc.retry_after if isinstance(exc, EmbeddingHTTPError) else None
        return backoff_seconds(state.attempt_number, self.retry, retry_after)

    def request(
        self, method: str, path: str, *, deadline: float | None = None, **kwargs: Any
    ) -> httpx.Response:
        """Send with retries; raises `EmbeddingHTTPError` (API said no) or `EmbeddingError`
        (network), and `DeadlineReached` once `deadline` (`time.monotonic()`) has passed."""

        def sleep(seconds: float) -> None:
            if deadline is not None and time.monotonic() + seconds >= deadline:
                raise DeadlineReached  # no retry could answer in time
            self.retry.sleep(seconds)

        retrying = Retrying(
            stop=stop_after_attempt(self.retry.attempts),
            wait=self._wait,
            retry=retry_if_exception(_retryable),
            sleep=sleep,
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return self._send_once(method, path, deadline, **kwargs)
        except httpx.TransportError as err:
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineReached from err
            raise EmbeddingError(
                f"{self.provider}: cannot reach {self.url(path)}: {err or type(err).__name__}"
            ) from err
        except (httpx.HTTPError, httpx.InvalidURL) as err:  # e.g. a malformed remote.baseUrl
            raise EmbeddingError(
                f"{self.provider}: request to {self.url(path)} failed: {err}"
            ) from err
        raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover

    def post_json(self, path: str, body: Mapping[str, Any], deadline: float | None = None) -> Any:
        return parse_json(self.request("POST", path, json=body, deadline=deadline), self.provider)

    def get_json(self, path: str, deadline: float | None = None) -> Any:
        return parse_json(self.request("GET", path, deadline=deadline), self.provider)

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()


def parse_json(response: httpx.Response, provider: str) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise EmbeddingError(f"{provider}: response is not JSON: {response.text[:200]!r}") from err


def merge_headers(*layers: Mapping[str, str] | None) -> dict[str, str]:
    """Merge header dicts case-insensitively; later layers win (defaults, provider config, remote)."""
    out: dict[str, tuple[str, str]] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            out[key.lower()] = (key, value)
    return {key: value for key, value in out.values()}
