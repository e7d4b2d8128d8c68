"""A local stand-in for a `POST /v1/rerank` API over real HTTP on 127.0.0.1 (see
embedding_servers.py): Cohere/Jina/llama.cpp's shape, Voyage's and Hugging Face TEI's, and the
ways a reranker goes wrong (slow, erroring, wrong length, bad indices, non-numbers, HTML)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from embedding_servers import FakeAPI, Reply

Misbehaviour = Literal["none", "slow", "error", "short", "bad_index", "not_a_number", "html"]


def favourite_score(query: str, document: str, favourite: str) -> float:
    """Deterministic: how often the document says `favourite`, a little for the query's words."""
    words = set(query.lower().split())
    text = document.lower()
    return text.count(favourite) + 0.01 * sum(1 for w in words if w in text)


@dataclass
class FakeRerank(FakeAPI):
    """`shape`: which API it imitates; `favourite`: the word it scores documents by."""

    shape: Literal["cohere", "voyage", "tei"] = "cohere"
    favourite: str = "zebra"
    misbehave: Misbehaviour = "none"
    slow_s: float = 5.0
    #: every score this high (a reranker that likes everything)
    constant: float | None = None
    tei_limit: int = 32
    seen: list[dict[str, Any]] = field(default_factory=list)

    def route(
        self, method: str, path: str, headers: dict[str, str], body: Any, raw: bytes
    ) -> Reply:
        if method != "POST" or not path.endswith("/rerank"):
            return 404, {"Content-Type": "text/plain"}, b"not found"
        self.seen.append(body)
        if self.misbehave == "slow":
            time.sleep(self.slow_s)
        if self.misbehave == "error":
            return _reply(500, {"error": {"message": "reranker exploded"}})
        if self.misbehave == "html":
            return 200, {"Content-Type": "text/html"}, b"<html><body>Bad Gateway</body></html>"
        docs = body.get("texts") if self.shape == "tei" else body.get("documents")
        if not isinstance(docs, list):
            return _reply(422, {"error": {"message": "documents missing"}})
        if self.shape == "tei" and len(docs) > self.tei_limit:
            return _reply(413, {"error": f"batch size {len(docs)} > {self.tei_limit}"})
        query = body.get("query", "")
        scores = [
            self.constant
            if self.constant is not None
            else favourite_score(query, d, self.favourite)
            for d in docs
        ]
        items: list[dict[str, Any]] = [
            {"index": i, ("score" if self.shape == "tei" else "relevance_score"): s}
            for i, s in sorted(enumerate(scores), key=lambda p: -p[1])
        ]
        if self.misbehave == "short":
            items = items[:-1]
        elif self.misbehave == "bad_index":
            items[0]["index"] = len(docs) + 3
        elif self.misbehave == "not_a_number":
            items[0]["relevance_score" if self.shape != "tei" else "score"] = "high"
        if self.shape == "tei":
            return _reply(200, items)
        key = "data" if self.shape == "voyage" else "results"
        return _reply(200, {key: items, "model": body.get("model")})


def _reply(status: int, body: Any) -> Reply:
    return status, {"Content-Type": "application/json"}, json.dumps(body).encode()


TOPICS = [
    "the deploy pipeline and its canary stage",
    "postgres vacuum settings and the connection pooler",
    "the garden: tomatoes, basil and the frost dates",
    "the payments webhook and its retry policy",
    "the team offsite in Lisbon and the travel budget",
]
QUERIES = [
    "what did we decide about the deploy pipeline?",
    "postgres connection pooler settings",
    "when should the tomatoes go in the garden?",
    "webhook retry policy for payments",
    "travel budget for the Lisbon offsite",
]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def seed(ws: Path) -> Path:
    """Thirty daily notes over five topics, each note mixing two of them: every query matches
    far more chunks than maxResults, so a pool that grew with maxResults would rank others."""
    for day in range(1, 31):
        a, b = TOPICS[day % 5], TOPICS[(day * 2 + 1) % 5]
        animal = "zebra" if day % 7 == 0 else "otter"
        lines = [
            f"# 2026-03-{day:02d}",
            "",
            f"- Talked about {a}; note {day} says the {animal} plan holds.",
            f"- Later, {b} came up again (follow-up {day}).",
            f"- Owner for {a.split()[1]}: person {day % 4}.",
        ]
        write(ws / "memory" / f"2026-03-{day:02d}.md", "\n".join(lines) + "\n")
    write(ws / "MEMORY.md", "# Memory\n\n- " + "\n- ".join(TOPICS) + "\n")
    return ws
