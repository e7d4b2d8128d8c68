"""Citations on search results (`memory.citations`) and the snippet budget (`maxInjectedChars`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from .results import SearchResult
from .session_keys import ChatType, parse_session_key

CitationsMode = Literal["auto", "on", "off"]


def format_citation(path: str, start_line: int, end_line: int) -> str:
    """`path#L5` for one line, `path#L5-L7` for a range."""
    if end_line <= start_line:
        return f"{path}#L{start_line}"
    return f"{path}#L{start_line}-L{end_line}"


def citations_enabled(mode: CitationsMode, chat_type: ChatType | None) -> bool:
    """`on`/`off` as written; `auto` cites everywhere except group and channel chats."""
    return mode == "on" or (mode == "auto" and chat_type not in ("group", "channel"))


def trim_to_budget(results: Sequence[SearchResult], max_chars: int | None) -> list[SearchResult]:
    """Keep results in order until their snippets reach `max_chars` (None: no budget); cut the last."""
    if max_chars is None:
        return list(results)
    remaining = max_chars
    kept: list[SearchResult] = []
    for result in results:
        if remaining <= 0:
            break
        if len(result.snippet) <= remaining:
            kept.append(result)
            remaining -= len(result.snippet)
        else:
            kept.append(result.with_(snippet=result.snippet[:remaining]))
            break
    return kept


def decorate(results: Sequence[SearchResult], include: bool) -> list[SearchResult]:
    """Append `Source: <citation>` and set `citation` (include), or clear `citation` (not)."""
    if not include:
        return [r if r.citation is None else r.with_(citation=None) for r in results]
    decorated = []
    for result in results:
        citation = format_citation(result.path, result.start_line, result.end_line)
        snippet = f"{result.snippet.strip()}\n\nSource: {citation}"
        decorated.append(result.with_(snippet=snippet, citation=citation))
    return decorated


def apply_citations(
    results: Sequence[SearchResult],
    mode: CitationsMode,
    *,
    session_key: str | None = None,
    max_injected_chars: int | None,
) -> list[SearchResult]:
    """Decorate results per `memory.citations`, then trim them to `max_injected_chars` again."""
    chat_type = parse_session_key(session_key).chat_type
    decorated = decorate(results, citations_enabled(mode, chat_type))
    return trim_to_budget(decorated, max_injected_chars)
