"""Pre-compaction memory flush: when to run the silent "write your memories down" turn."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator
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


def _session_key(raw: str | None) -> str:
    # `agent:main:main`, `main` and a missing key are the same (main) session.
    return normalize_session_key(raw) or "main"


class FlushState:
    """The agent's `sessions.json`: per-session flush records, shared by every memoryd process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = filelock.FileLock(str(path) + ".lock", timeout=30, mode=0o600)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            private_dir(self.path.parent)
            private_file(self._lock.lock_file)  # filelock opens it by name: no link there
            with self._lock:
                yield
        except StateError as err:
            raise FlushStateError(str(err)) from None
        except filelock.Timeout:
            raise FlushStateError(f"timed out waiting for the lock on {self.path}") from None
        except OSError as err:
            raise FlushStateError(f"cannot use {self.path}: {err.strerror or err}") from None

    def _read_unlocked(self) -> dict[str, Any]:
        raw = read_private(self.path)
        if raw is None:
            return {"version": _STATE_VERSION, "sessions": {}}
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or not isinstance(data.get("sessions"), dict):
                raise ValueError("unexpected shape")
        except ValueError as err:
            aside = self.path.with_name(self.path.name + ".corrupt")
            log.warning(
                "%s is unreadable (%s); moved to %s and starting fresh", self.path, err, aside
            )
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            return {"version": _STATE_VERSION, "sessions": {}}
        return data

    def update(
        self, session_key: str | None, change: Callable[[FlushRecord | None], FlushRecord | None]
    ) -> FlushRecord | None:
        """Atomically replace the session's record with `change(old)`; unchanged when it returns `old`."""
        key = _session_key(session_key)
        with self._locked():
            data = self._read_unlocked()
            old = FlushRecord.from_json(data["sessions"].get(key))
            new = change(old)
            if new is not old:
                sessions = data["sessions"]
                if new is None:
                    sessions.pop(key, None)
                else:
                    entry = sessions.get(key) if isinstance(sessions.get(key), dict) else {}
                    entry = {k: v for k, v in entry.items() if k != "sessionId"}
                    entry.update(new.to_json())
                    sessions[key] = entry
                data["version"] = _STATE_VERSION
                payload = json.dumps(data, indent=2, sort_keys=True).encode("utf-8") + b"\n"
                write_private_atomic(self.path, payload)
            return new


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
    now: datetime | None = None,
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
        at = (now or datetime.now(UTC)).isoformat()
        return FlushRecord(compaction_count, at, session_id) if record else old

    FlushState(agent.state.flush_state).update(session_key, claim)
    return decide("due", recorded=record) if claimed else decide("already_flushed")
