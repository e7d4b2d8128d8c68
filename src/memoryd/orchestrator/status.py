"""The typed `status()` model: which backend serves an agent, why, and what is wrong right now."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ..core.status import BuiltinStatus, QmdStatus, StatusModel


class FallbackInfo(StatusModel):
    from_: Literal["qmd"] = Field("qmd", alias="from")
    reason: str | None = None
    since: float | None = Field(None, description="Unix time the agent failed over.")


class RecoveryInfo(StatusModel):
    """Read from the agent's `FailoverState` (`from_attributes`)."""

    attempts: int = Field(
        0,
        validation_alias="probe_attempts",
        description="Recovery probes made since the last failover.",
    )
    next_probe_at: float | None = None
    last_probe_at: float | None = None
    last_probe_error: str | None = None
    recovered_at: float | None = None


class FreshnessInfo(StatusModel):
    """Is the serving index behind the files? (qmd: its last update vs the newest memory file)."""

    stale: bool
    stale_seconds: float | None = None
    newest_file_at: float | None = None
    indexed_at: float | None = None


class MemoryStatus(StatusModel):
    """What `memoryd status` prints (camelCase in JSON)."""

    agent_id: str
    workspace_dir: str
    state_dir: str
    backend: Literal["qmd", "builtin"]
    requested_backend: Literal["qmd", "builtin"]
    fail_closed: bool = False
    fallback: FallbackInfo | None = None
    recovery: RecoveryInfo | None = None
    health_updated_at: float | None = Field(
        None, description="When health.json was last written (by any process)."
    )
    health_age_s: float | None = None
    provider: str | None = None
    model: str | None = None
    files: int | None = None
    chunks: int | None = None
    pending_vectors: int = 0
    dirty: bool = False
    db_path: str | None = None
    sources: list[str] = Field(default_factory=list)
    qmd_version: str | None = None
    search_mode: str | None = None
    last_update_at: float | None = None
    last_embed_at: float | None = None
    freshness: FreshnessInfo | None = None
    builtin: BuiltinStatus | None = None
    qmd: QmdStatus | None = None
    check: dict[str, Any] | None = Field(
        None, description="`status --deep`: what the index file check found and did."
    )
    issues: list[str] = Field(default_factory=list)
    served_by: str | None = Field(
        None, description="'serve (pid N)' when a running `memoryd serve` answered."
    )
    rerank: str | None = Field(
        None,
        description="'degraded, <reason>' when the last rerank failed open (results kept their "
        "unreranked order); None when it reranked or is off.",
    )

    def with_issues(self) -> MemoryStatus:
        """This status with the last rerank's state and the problems worth a user's attention,
        each true right now."""
        from ..rerank import read_degraded

        degraded = read_degraded(Path(self.state_dir))
        st = self.model_copy(update={"rerank": f"degraded, {degraded}" if degraded else None})
        found: list[str] = []
        # while qmd serves as asked, the built-in index is only its fallback: not the user's problem
        if st.builtin is not None and (st.requested_backend, st.backend) != ("qmd", "qmd"):
            found += _builtin_issues(st.builtin, st.workspace_dir)
        if st.check is not None and not st.check.get("ok"):
            found.append(f"index check: {st.check.get('problem')}")
        if st.requested_backend == "qmd" and st.qmd is not None:
            found += _qmd_issues(st, st.qmd)
        if st.rerank is not None:
            found.append(f"rerank: {st.rerank}")
        return st.model_copy(update={"issues": found})


def _builtin_issues(b: BuiltinStatus, workspace_dir: str) -> list[str]:
    found: list[str] = []
    if b.files == 0 and not b.dirty:
        found.append(f"no memory files in {workspace_dir} (write MEMORY.md or memory/*.md)")
    elif b.files == 0:
        found.append("memory files not indexed yet (run `memoryd index`)")
    elif b.dirty:
        found.append("memory files changed since the last sync (the next search syncs)")
    if b.pending_vectors and b.provider != "none":
        found.append(
            f"{b.pending_vectors} chunk{'' if b.pending_vectors == 1 else 's'} waiting for "
            "embeddings (run `memoryd index`, or keep `memoryd serve` running)"
        )
    if b.needs_reindex:
        found.append(f"index must be rebuilt: {b.needs_reindex}")
    if b.unavailable:
        found.append(f"memory unavailable: {b.unavailable}")
    if b.last_error:
        found.append(f"last index sync failed: {b.last_error}")
    if b.read_only:
        found.append(
            f"index is read-only ({b.read_only}): searches answer from it, syncs cannot update it"
        )
    for r in b.recoveries:
        found.append(
            f"a damaged index was moved to {r.moved_to} and rebuilt"
            + (f" ({r.reason})" if r.reason else "")
            + "; delete it when no longer needed"
        )
    if b.skipped_files:
        named = ", ".join(f"{f.path} ({f.reason})" for f in b.skipped_files[:5])
        more = len(b.skipped_files) - 5
        found.append(
            f"{len(b.skipped_files)} memory file(s) not indexed: {named}"
            + (f" and {more} more" if more > 0 else "")
        )
    if b.undecodable:
        found.append(
            f"{len(b.undecodable)} file(s) are not valid UTF-8 and were read with "
            f"replacement characters: {', '.join(b.undecodable[:5])}"
        )
    return found


def _qmd_issues(st: MemoryStatus, q: QmdStatus) -> list[str]:
    from ..qmd_adapter import REFUSED_HITS  # loaded already: qmd reported this status

    found: list[str] = []
    reason = st.fallback.reason if st.fallback else None
    if st.backend != "qmd":
        found.append(
            f"qmd is not serving (answering from the built-in index): {reason or 'unknown'}"
        )
    if q.version_error and q.version_error not in (reason or ""):
        found.append(f"qmd answered but not as qmd: {q.version_error}")
    refused = {k: v for k, v in q.dropped_hits.items() if k in REFUSED_HITS}
    # true while qmd has not updated since: an update after the file was fixed drops it
    recent = q.last_refused_at is not None and q.last_refused_at >= (st.last_update_at or 0)
    if refused and recent:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(refused.items()))
        found.append(
            f"qmd returned {sum(refused.values())} hit(s) memoryd would not serve ({counts}); "
            f"last: {q.last_dropped}"
        )
    # qmd's lag matters only while qmd answers: failed over, the built-in index serves
    # (and a search on qmd's return refreshes it first)
    if st.backend == "qmd" and st.freshness is not None and st.freshness.stale:
        age = st.freshness.stale_seconds
        found.append(
            "qmd index is behind the memory files"
            + (f" by {age:.0f}s" if age is not None else "")
            + " (run `memoryd index`, or keep `memoryd serve` running)"
        )
    return found
