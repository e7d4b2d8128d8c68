"""Pure parsing of what qmd prints: search JSON, URIs, snippet headers, collection lists, errors."""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import QmdBadOutput
from ._collections import CollectionSpec


class QmdHit(BaseModel):
    """One entry of `qmd search|vsearch|query --json`."""

    # qmd grows optional fields between releases: an unknown key must not break recall
    model_config = ConfigDict(extra="ignore", frozen=True)

    score: float = Field(description="Relevance in [0, 1], rounded by qmd to 2 decimals.")
    file: str | None = Field(None, description="`qmd://<collection>/<relative path>`.")
    docid: str | None = Field(None, description="`#` + first 6 hex digits of the content hash.")
    line: int | None = Field(None, description="Line of the best match (1-based).")
    snippet: str | None = Field(None, description="Excerpt starting with an `@@ -S,C @@` header.")


def split_qmd_uri(uri: str) -> tuple[str, str] | None:
    """`qmd://<collection>/<rel>` → (collection, rel); None for anything else."""
    collection, sep, rel = uri.removeprefix("qmd://").partition("/")
    if not uri.startswith("qmd://") or not collection or not sep or not rel:
        return None
    return collection, rel


_NO_RESULTS_RE = re.compile(r"\bno (?:results|documents|matches) found\b", re.IGNORECASE)


def parse_search_output(stdout: str) -> list[QmdHit]:
    """Hits from qmd's search stdout, tolerant of noise around the JSON array."""
    text = stdout.strip()
    if not text:
        raise QmdBadOutput("qmd printed nothing where JSON results were expected")
    try:
        payload: object = json.loads(text)
    except ValueError:
        payload = _embedded_array(text)
    if payload is None:
        if _NO_RESULTS_RE.search(text):
            return []
        raise QmdBadOutput(f"qmd printed no JSON results: {_excerpt(text)}")
    if not isinstance(payload, list):
        raise QmdBadOutput(f"qmd printed JSON that is not an array: {_excerpt(text)}")
    hits: list[QmdHit] = []
    problems: list[str] = []
    for entry in payload:
        try:
            hit = QmdHit.model_validate(entry)
        except ValidationError as err:
            problems.append(str(err.errors()[0]["msg"]))
            continue
        if hit.file is None and hit.docid is None:
            problems.append("entry has neither file nor docid")
            continue
        hits.append(hit)
    if payload and not hits:
        raise QmdBadOutput(f"no usable entry in qmd's JSON results ({problems[0]})")
    return hits


def _embedded_array(text: str) -> list[object] | None:
    # The first non-empty array of objects wins; a stray `[]` in a warning must not hide results.
    decoder = json.JSONDecoder()
    empty_seen = False
    start = text.find("[")
    while start != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            value, end = None, start + 1
        if isinstance(value, list) and all(isinstance(v, dict) for v in value):
            if value:
                return value
            empty_seen = True
        start = text.find("[", max(end, start + 1))
    return [] if empty_seen else None


def _excerpt(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "…")


_HEADER_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? @@[^\n]*(?:\n|$)")


def parse_snippet(snippet: str) -> tuple[str, int | None]:
    """Split qmd's `@@ -S,C @@ (…)` header off a snippet: its text, and S, its first line."""
    match = _HEADER_RE.match(snippet)
    if not match:
        return snippet, None
    return snippet[match.end() :], max(1, int(match.group(1)))


_LIST_NAME_RE = re.compile(r"^(\S+) \(qmd://[^)]*\)\s*$")


def parse_collection_list(text: str) -> list[str]:
    """Names from `qmd collection list` (lines like `memory-root-main (qmd://memory-root-main/)`)."""
    return [m.group(1) for line in text.splitlines() if (m := _LIST_NAME_RE.match(line.strip()))]


def parse_collection_show(text: str) -> CollectionSpec | None:
    """`qmd collection show NAME` → name, path, pattern; None when a field is missing."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key in ("Collection", "Path", "Pattern") and key not in fields:
            fields[key] = value.strip()
    if not all(k in fields for k in ("Collection", "Path", "Pattern")):
        return None
    return CollectionSpec(fields["Collection"], fields["Path"], fields["Pattern"])


_MISSING_COLLECTION_RE = re.compile(r"collection (?:not found|does not exist)", re.IGNORECASE)
_EXISTS_RE = re.compile(r"already exists", re.IGNORECASE)
_BUSY_RE = re.compile(r"SQLITE_BUSY|database is locked", re.IGNORECASE)


def is_missing_collection_error(stderr: str) -> bool:
    """A search named a collection the index no longer has."""
    return bool(_MISSING_COLLECTION_RE.search(stderr))


def is_collection_exists_error(stderr: str) -> bool:
    """`collection add` lost a race or met a leftover (same name, or same path and pattern)."""
    return bool(_EXISTS_RE.search(stderr))


def is_busy_error(stderr: str) -> bool:
    """SQLite lock contention inside qmd: worth retrying."""
    return bool(_BUSY_RE.search(stderr))
