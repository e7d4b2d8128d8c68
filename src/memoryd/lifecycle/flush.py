"""Pre-compaction memory flush: when to run the silent "write your memories down" turn."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

import filelock

from ..config import ResolvedAgent
from ..core.session_keys import normalize_session_key
from ..core.text import camel_case
from ..errors import FlushStateError, InvalidInput, StateError
from ..fsio import private_dir, private_file, read_private, write_private_atomic

log = logging.getLogger(__name__)

_STATE_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class FlushRecord:
    """The last flush of one session: which compaction cycle, when, and the host's session id."""

    compaction_count: int
    flushed_at: str
    session_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "memoryFlushCompactionCount": self.compaction_count,
            "memoryFlushAt": self.flushed_at,
        }
        if self.session_id is not None:
            out["sessionId"] = self.session_id
        return out

    @classmethod
    def from_json(cls, raw: Any) -> FlushRecord | None:
        if not isinstance(raw, dict):
            return None
        count = raw.get("memoryFlushCompactionCount")
        if not isinstance(count, int) or isinstance(count, bool):
            return None
        at = raw.get("memoryFlushAt")
        sid = raw.get("sessionId")
        return cls(count, at if isinstance(at, str) else "", sid if isinstance(sid, str) else None)


def _read_state(path: Path) -> dict[str, Any]:
    """`sessions.json` as read, or empty when absent (a corrupt one is set aside)."""
    raw = read_private(path)
    if raw is None:
        return {"version": _STATE_VERSION, "sessions": {}}
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("sessions"), dict):
            raise ValueError("unexpected shape")
    except ValueError as err:
        aside = path.with_name(path.name + ".corrupt")
        log.warning("%s is unreadable (%s); moved to %s and starting fresh", path, err, aside)
        with contextlib.suppress(OSError):
            os.replace(path, aside)
        return {"version": _STATE_VERSION, "sessions": {}}
    return data


def update_flush_record(
    path: Path, session_key: str | None, change: Callable[[FlushRecord | None], FlushRecord | None]
) -> FlushRecord | None:
    """Replace the session's record in the agent's `sessions.json` (shared by every memoryd
    process) with `change(old)`, under the file's lock; unchanged when it returns `old`."""
    # `agent:main:main`, `main` and a missing key are the same (main) session
    key = normalize_session_key(session_key) or "main"
    lock = filelock.FileLock(str(path) + ".lock", timeout=30, mode=0o600)
    try:
        private_dir(path.parent)
        private_file(lock.lock_file)  # filelock opens it by name: no link there
        with lock:
            data = _read_state(path)
            old = FlushRecord.from_json(data["sessions"].get(key))
            new = change(old)
            if new is not None and new is not old:
                sessions = data["sessions"]
                entry = sessions.get(key) if isinstance(sessions.get(key), dict) else {}
                entry = {k: v for k, v in entry.items() if k != "sessionId"}
                entry.update(new.to_json())
                sessions[key] = entry
                data["version"] = _STATE_VERSION
                payload = json.dumps(data, indent=2, sort_keys=True).encode("utf-8") + b"\n"
                write_private_atomic(path, payload)
            return new
    except StateError as err:
        raise FlushStateError(str(err)) from None
    except filelock.Timeout:
        raise FlushStateError(f"timed out waiting for the lock on {path}") from None
    except OSError as err:
        raise FlushStateError(f"cannot use {path}: {err.strerror or err}") from None


FlushReason = Literal[
    "due",
    "disabled",
    "read_only_workspace",
    "no_token_estimate",
    "window_too_small",
    "below_threshold",
    "already_flushed",
]


@dataclass(frozen=True, slots=True)
class FlushDecision:
    """Whether to run the flush turn now, why, and what to send the model if so."""

    run: bool
    reason: FlushReason
    threshold: int
    token_estimate: int
    context_window: int
    compaction_count: int
    system_prompt: str
    prompt: str
    model: str | None
    recorded: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON shape for the CLI and MCP (camelCase)."""
        return {camel_case(f.name): getattr(self, f.name) for f in fields(self)}


def flush_threshold(agent: ResolvedAgent, context_window: int) -> int:
    """`context_window − reserveTokensFloor − softThresholdTokens`."""
    compaction = agent.compaction
    return (
        context_window
        - compaction.reserve_tokens_floor
        - compaction.memory_flush.soft_threshold_tokens
    )


def _already(record: FlushRecord | None, compaction_count: int, session_id: str | None) -> bool:
    if record is None:
        return False
    if session_id is not None and record.session_id is not None and record.session_id != session_id:
        return False  # a new session under the same key: its cycles start over
    # `>=`: a host still reporting an older cycle (a stale or racing caller) must not flush a
    # cycle that is already past. A reset session is told apart by `session_id`.
    return record.compaction_count >= compaction_count


def check_flush(
    agent: ResolvedAgent,
    session_key: str | None,
    *,
    token_estimate: int,
    context_window: int,
    compaction_count: int,
    session_id: str | None = None,
    record: bool = True,
) -> FlushDecision:
    """Decide whether the host should run the silent pre-compaction flush turn now."""
    if token_estimate < 0 or context_window < 0 or compaction_count < 0:
        raise InvalidInput("tokenEstimate, contextWindow and compactionCount must not be negative")
    cfg = agent.compaction.memory_flush
    threshold = flush_threshold(agent, context_window)

    def decide(reason: FlushReason, *, recorded: bool = False) -> FlushDecision:
        return FlushDecision(
            run=reason == "due",
            reason=reason,
            threshold=threshold,
            token_estimate=token_estimate,
            context_window=context_window,
            compaction_count=compaction_count,
            system_prompt=cfg.system_prompt,
            prompt=cfg.prompt,
            model=cfg.model,
            recorded=recorded,
        )

    if not cfg.enabled:
        return decide("disabled")
    if agent.workspace_access != "rw":
        return decide("read_only_workspace")
    if token_estimate <= 0:
        return decide("no_token_estimate")
    if threshold <= 0:
        return decide("window_too_small")
    if token_estimate < threshold:  # OpenClaw flushes once the estimate reaches it
        return decide("below_threshold")

    claimed = False

    def claim(old: FlushRecord | None) -> FlushRecord | None:
        nonlocal claimed
        if _already(old, compaction_count, session_id):
            return old
        claimed = True  # a preview (`record=False`) leaves the record as it was
        at = datetime.now(UTC).isoformat()
        return FlushRecord(compaction_count, at, session_id) if record else old

    update_flush_record(agent.state.flush_state, session_key, claim)
    return decide("due", recorded=record) if claimed else decide("already_flushed")
