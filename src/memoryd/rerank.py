"""The optional reranking stage (`memorySearch.query.rerank`): a remote `/v1/rerank` endpoint or
qmd's reranker reorders what passed minScore, within `timeoutMs`, failing open; its scores are
not calibrated, so each result keeps its own and abstention stays theirs."""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from .config import RerankConfig, RerankRemoteConfig
from .errors import QmdTimeout, StateError
from .fsio import private_dir, read_private, write_private_atomic

log = logging.getLogger("memoryd.rerank")

#: Where the remote reranker's key comes from when `rerank.remote.apiKey` is unset.
API_KEY_ENV: Final = "MEMORYD_RERANK_API_KEY"
#: Hugging Face TEI's default `--max-client-batch-size`: a longer list is sent in parts.
TEI_BATCH: Final = 32
#: Characters of each document sent: rerankers truncate at ~512 tokens anyway.
MAX_DOCUMENT_CHARS: Final = 2000
#: The file in the agent's state folder that says whether the last rerank degraded.
STATE_FILE: Final = "rerank.json"

#: `scorer(query, documents, deadline)` → one score per document (higher = more relevant);
#: raises on failure. `deadline` is `time.monotonic()`.
Scorer = Callable[[str, Sequence[str], float], list[float]]
_T = TypeVar("_T")


class RerankFailed(Exception):
    """Raised when a reranker's answer cannot be used; the stage fails open, so no user sees it."""


@dataclass(frozen=True, slots=True)
class RerankOutcome:
    """What the stage did to one list."""

    #: The input's indices in their new order (the input order when degraded).
    order: list[int]
    #: The reranker's score of each input (None everywhere when degraded).
    scores: list[float | None]
    #: The stage's own time, the reranker call included.
    seconds: float
    #: Why the order was left as it was (None: reranked).
    degraded: str | None = None

    @property
    def note(self) -> str | None:
        if self.degraded is None:
            return None
        return f"rerank degraded ({self.degraded}): results are in their unreranked order"


def parse_scores(body: Any, count: int) -> list[float]:
    """One score per document from Cohere/Jina/llama.cpp's `{"results": [...]}`, Voyage's
    `{"data": [...]}` or TEI's bare list; `RerankFailed` unless each document is scored once."""
    items: Any = body
    if isinstance(body, dict):
        items = body.get("results", body.get("data"))
    if not isinstance(items, list):
        raise RerankFailed("the answer holds no list of results")
    scores: list[float | None] = [None] * count
    for item in items:
        if not isinstance(item, dict):
            raise RerankFailed("a result is not an object")
        index = item.get("index")
        score = item.get("relevance_score", item.get("score"))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise RerankFailed(f"a result's index {index!r} is not one of the {count} documents")
        if (
            isinstance(score, bool)
            or not isinstance(score, int | float)
            or not math.isfinite(score)
        ):
            raise RerankFailed(f"a result's score {score!r} is not a number")
        if scores[index] is not None:
            raise RerankFailed(f"document {index} is scored twice")
        scores[index] = float(score)
    if any(s is None for s in scores):
        raise RerankFailed(f"{len(items)} scores for {count} documents")
    return [s for s in scores if s is not None]


class RemoteReranker:
    """`POST {baseUrl}/v1/rerank` (`/rerank` after a `/v1`, nothing after a `/rerank`) through
    the embedding providers' HTTP client; the key is only ever a request header."""

    def __init__(self, cfg: RerankRemoteConfig) -> None:
        from .embeddings.http import ApiClient, RetryPolicy, merge_headers

        assert cfg.base_url is not None
        key = cfg.api_key or os.environ.get(API_KEY_ENV)
        auth = {"Authorization": f"Bearer {key}"} if key else {}
        base = cfg.base_url.rstrip("/")
        if base.endswith("/rerank"):
            self._path = base
        else:
            self._path = "rerank" if base.endswith("/v1") else "v1/rerank"
        self.cfg = cfg
        # one try: a retry would not fit in a rerank's time, and the stage fails open anyway
        self._client = ApiClient(
            "rerank", base, merge_headers(auth, cfg.headers), RetryPolicy(attempts=1)
        )

    def __call__(self, query: str, documents: Sequence[str], deadline: float) -> list[float]:
        fmt = self.cfg.format
        if fmt == "tei":
            scores: list[float] = []
            for start in range(0, len(documents), TEI_BATCH):
                part = documents[start : start + TEI_BATCH]
                body = self._post({"query": query, "texts": list(part)}, deadline)
                scores += parse_scores(body, len(part))
            return scores
        request: dict[str, Any] = {"query": query, "documents": list(documents)}
        if self.cfg.model:
            request["model"] = self.cfg.model
        request["top_k" if fmt == "voyage" else "top_n"] = len(documents)
        return parse_scores(self._post(request, deadline), len(documents))

    def _post(self, body: Mapping[str, Any], deadline: float) -> Any:
        from .embeddings.http import parse_json

        response = self._client.request("POST", self._path, json=body, deadline=deadline)
        if "json" not in response.headers.get("content-type", "json"):
            raise RerankFailed(f"the answer is {response.headers.get('content-type')}, not JSON")
        return parse_json(response, "rerank")

    def close(self) -> None:
        self._client.close()


class RerankStage:
    """One agent's rerank stage: settings, remote reranker (qmd's is passed to `apply`), state."""

    def __init__(self, cfg: RerankConfig, state_dir: Path | None = None) -> None:
        self.cfg = cfg
        self.remote = RemoteReranker(cfg.remote) if cfg.provider == "remote" else None
        self._state_file = state_dir / STATE_FILE if state_dir is not None else None
        self._written: str | bool | None = False  # False: not read from the file yet
        self._lock = threading.Lock()

    def close(self) -> None:
        """Release the remote reranker's connections."""
        if self.remote is not None:
            self.remote.close()

    def apply(
        self, query: str, documents: Sequence[str], scorer: Scorer | None = None
    ) -> RerankOutcome:
        """The documents' new order by `scorer` (else the remote reranker); never raises."""
        start = time.monotonic()
        n = len(documents)
        scorer = scorer or self.remote
        if scorer is None or n == 0:
            return RerankOutcome(list(range(n)), [None] * n, 0.0)
        deadline = start + self.cfg.timeout_ms / 1000
        docs = [d[:MAX_DOCUMENT_CHARS] for d in documents]
        box: list[Any] = []  # the scores, or what the scorer raised

        def call() -> None:
            try:
                box.append(scorer(query, docs, deadline))
            except BaseException as err:  # the stage fails open on anything
                box.append(err)

        worker = threading.Thread(target=call, name="memoryd-rerank", daemon=True)
        worker.start()
        worker.join(max(0.0, deadline - time.monotonic()))
        from .embeddings.base import DeadlineReached

        alive = worker.is_alive()  # before `box` is read: a call ending now is not lost
        got: Any = None if alive else box[0]
        reason: str | None = None
        if alive or isinstance(got, DeadlineReached | QmdTimeout | TimeoutError):
            reason = f"no answer within {self.cfg.timeout_ms} ms"
        elif isinstance(got, BaseException):
            # one line, without a traceback; the error messages name URLs, never headers
            text = " ".join(str(got).split()) or type(got).__name__
            reason = text.removeprefix("rerank: ")[:300]
        elif not isinstance(got, list) or len(got) != n:
            reason = "the reranker did not score each result once"
        seconds = time.monotonic() - start
        self._record(reason)
        if reason is not None:
            log.warning("rerank degraded: %s", reason)
            return RerankOutcome(list(range(n)), [None] * n, seconds, reason)
        scores: list[float] = got
        # ties keep the order the calibrated scores gave
        order = sorted(range(n), key=lambda i: (-scores[i], i))
        return RerankOutcome(order, list(scores), seconds)

    def reorder(
        self,
        query: str,
        items: Sequence[_T],
        text: Callable[[_T], str],
        notes: list[str],
        *,
        first: Callable[[_T], bool] = lambda _: False,
        scorer: Scorer | None = None,
    ) -> list[tuple[_T, dict[str, Any]]]:
        """`items`, the first `candidates` in the reranker's order after those `first` keeps ahead,
        each with its `explain.rerank` (reranker score, 1-based places before and after); a
        degraded stage's note goes to `notes`."""
        head = range(min(self.cfg.candidates, len(items)))
        kept = [i for i in head if first(items[i])]
        movable = [i for i in head if not first(items[i])]
        outcome = self.apply(query, [text(items[i]) for i in movable], scorer)
        if outcome.note:
            notes.append(outcome.note)
        order = kept + [movable[j] for j in outcome.order] + list(range(len(head), len(items)))
        scores = dict(zip(movable, outcome.scores, strict=True))
        return [
            (
                items[i],
                {
                    "provider": self.cfg.provider,
                    "score": scores.get(i),
                    "before": i + 1,
                    "after": after,
                    "degraded": outcome.degraded,
                    "seconds": round(outcome.seconds, 4),
                },
            )
            for after, i in enumerate(order, 1)
        ]

    def _record(self, reason: str | None) -> None:
        """Record the outcome for `memoryd status` in other processes (written only on a change)."""
        path = self._state_file
        if path is None:
            return
        with self._lock:
            if self._written is False:
                self._written = read_degraded(path.parent)
            if self._written == reason:
                return
            data = {"degraded": reason, "at": time.time()}
            try:
                private_dir(path.parent)
                write_private_atomic(path, json.dumps(data).encode())
            except (StateError, OSError) as err:
                log.warning("cannot record the rerank state in %s: %s", path, err)
                return
            self._written = reason


def read_degraded(state_dir: Path) -> str | None:
    """Why the last rerank in this agent's state folder degraded (None: it did not)."""
    try:
        raw = read_private(state_dir / STATE_FILE)
        data = json.loads(raw) if raw else None
    except (StateError, OSError, ValueError):
        return None
    reason = data.get("degraded") if isinstance(data, dict) else None
    return reason if isinstance(reason, str) else None
