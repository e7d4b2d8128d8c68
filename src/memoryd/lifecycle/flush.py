"""Pre-compaction memory flush: when to run the silent "write your memories down" turn."""

from __future__ import annotations

import contextlib
import json
import logging
import os
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


def _claim(
    path: Path, session_key: str | None, compaction_count: int, session_id: str | None, record: bool
) -> bool:
    """Whether the session's cycle is still to flush, recorded (when `record`) in the agent's
    `sessions.json`, which every memoryd process shares under its lock."""
    # `agent:main:main`, `main` and a missing key are the same (main) session
    key = normalize_session_key(session_key) or "main"
    lock = filelock.FileLock(str(path) + ".lock", timeout=30, mode=0o600)
    try:
        private_dir(path.parent)
        private_file(lock.lock_file)  # filelock opens it by name: no link there
        with lock:
            data = _read_state(path)
            entry = data["sessions"].get(key)
            entry = entry if isinstance(entry, dict) else {}
            if _already(entry, compaction_count, session_id):
                return False
            if record:
                entry = {k: v for k, v in entry.items() if k != "sessionId"}
                entry["memoryFlushCompactionCount"] = compaction_count
                entry["memoryFlushAt"] = datetime.now(UTC).isoformat()
                if session_id is not None:
                    entry["sessionId"] = session_id
                data["sessions"][key] = entry
                data["version"] = _STATE_VERSION
                payload = json.dumps(data, indent=2, sort_keys=True).encode("utf-8") + b"\n"
                write_private_atomic(path, payload)
            return True
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


def _already(entry: dict[str, Any], compaction_count: int, session_id: str | None) -> bool:
    """The session's record (OpenClaw's keys) shows this cycle flushed already."""
    count, stored = entry.get("memoryFlushCompactionCount"), entry.get("sessionId")
    if not isinstance(count, int) or isinstance(count, bool):
        return False
    if session_id is not None and isinstance(stored, str) and stored != session_id:
        return False  # a new session under the same key: its cycles start over
    # `>=`: a host still reporting an older cycle (a stale or racing caller) must not flush a
    # cycle that is already past. A reset session is told apart by `session_id`.
    return count >= compaction_count


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
    # OpenClaw's: the window less `reserveTokensFloor` and `softThresholdTokens`
    threshold = context_window - agent.compaction.reserve_tokens_floor - cfg.soft_threshold_tokens

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

    # a preview (`record=False`) leaves the record as it was
    if _claim(agent.state.flush_state, session_key, compaction_count, session_id, record):
        return decide("due", recorded=record)
    return decide("already_flushed")
