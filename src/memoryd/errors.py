"""memoryd's one error tree: every failure a user or an agent can see is a `MemorydError`, whose
stable `code` never changes once published (a new kind of failure gets a new class)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class MemorydError(Exception):
    """Root of every error memoryd raises on purpose."""

    code: ClassVar[str] = "error"

    def __init_subclass__(cls, *, code: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code = code
            CODES[code] = cls

    def to_result(self, **extra: Any) -> dict[str, Any]:
        """This failure as a tool result, `{disabled: true, error, code}` plus `extra`."""
        return {**extra, "disabled": True, "error": str(self), "code": self.code}

    @staticmethod
    def from_result(result: Mapping[str, Any]) -> MemorydError:
        """The error a failed tool result carries (a socket answer read back), by its code."""
        return CODES.get(str(result.get("code")), MemorydError)(str(result.get("error")))


#: Every error class by its code (the table of docs/errors.md).
CODES: dict[str, type[MemorydError]] = {MemorydError.code: MemorydError}


class ConfigError(MemorydError, code="config_error"):
    """Raised when a config file or option is missing, unreadable or invalid (names the key path)."""


class WorkspaceNotFound(ConfigError, code="workspace_not_found"):
    """Raised when no agent workspace can be located from config, flags or the current directory."""


class InvalidAgentId(ConfigError, code="invalid_agent_id"):
    """Raised when an agent id (flag, config, MCP or socket request) does not have the allowed shape."""


class UnknownAgent(ConfigError, code="unknown_agent"):
    """Raised when an agent id is well formed but not configured."""


class InvalidInput(MemorydError, code="invalid_input"):
    """Raised when a tool, API or CLI argument is malformed or out of range (empty query, from < 1)."""


class PathNotAllowed(MemorydError, code="path_not_allowed"):
    """Raised when `memory_get` is asked for a path outside the memory files (traversal, symlink, non-.md)."""


class StateError(MemorydError, code="state_error"):
    """Raised when memoryd's own state (index, sessions.json, exports, locks) cannot be used."""


class StateReadOnly(StateError, code="state_read_only"):
    """Raised when a write to memoryd's state dir is refused by the file system (read-only mount, permissions)."""


class IndexError_(StateError, code="index_error"):
    """Raised when the built-in index cannot be opened, migrated or written."""


class IndexCorrupt(IndexError_, code="index_corrupt"):
    """Raised when the built-in index file is damaged and could not be rebuilt automatically."""


class StoreUnavailable(IndexError_, code="store_unavailable"):
    """Raised when the built-in index's PostgreSQL store (`store.driver = "postgres"`) cannot be reached."""


class WorkspaceMismatch(IndexError_, code="workspace_mismatch"):
    """Raised when an index file was built for another workspace (it is never re-synced to a new one)."""


class FlushStateError(StateError, code="flush_state_error"):
    """Raised when the agent's `sessions.json` cannot be read or written (permissions, disk)."""


class SessionExportError(StateError, code="session_export_error"):
    """Raised when the session export folder cannot be created, locked or written."""


class LocalPostgresError(MemorydError, code="pg_local_error"):
    """Raised when `memoryd pg-local` cannot start its throwaway PostgreSQL or write its config."""


class WorkspaceReadOnly(MemorydError, code="workspace_read_only"):
    """Raised when a memory write is asked of an agent whose `workspaceAccess` is `ro` or `none`."""


class MemoryWriteFailed(MemorydError, code="write_failed"):
    """Raised when a memory file cannot be created, locked or written (permissions, disk full)."""


class MemoryReadFailed(MemorydError, code="read_failed"):
    """Raised when a memory file that memoryd may serve cannot be read (permissions, I/O error)."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        #: The operating system's reason alone ("Permission denied"), when there is one.
        self.reason = reason or message


class InvalidMemoryWrite(InvalidInput):
    """Raised when `memory_append` gets an unknown target, empty text, NUL bytes or more than 64 KiB."""


class EmbeddingError(MemorydError, code="embedding_error"):
    """Raised when an embedding provider fails to load or to embed."""


class BatchPending(EmbeddingError, code="batch_pending"):
    """Raised when `remote.batch.wait` is false and submitted batch jobs have not finished yet."""

    def __init__(self, message: str, job_ids: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.job_ids = list(job_ids)


class ProviderUnavailable(EmbeddingError, code="provider_unavailable"):
    """Raised when an explicitly configured embedding provider cannot serve (memory is unavailable)."""


class QmdError(MemorydError, code="qmd_error"):
    """Root of every failure that comes from driving the qmd sidecar."""


class QmdUnavailable(QmdError, code="qmd_unavailable"):
    """Raised when the qmd binary is missing or cannot be started."""


class QmdTimeout(QmdError, code="qmd_timeout"):
    """Raised when a qmd call exceeds its hard timeout (its process group has been killed)."""


class QmdExitError(QmdError, code="qmd_exit"):
    """Raised when qmd exits non-zero; carries the exit code and stderr."""

    def __init__(self, message: str, *, returncode: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


class QmdLocked(QmdExitError, code="qmd_locked"):
    """Raised when qmd's index stays locked by another process after the retries."""


class QmdOutputTooLarge(QmdError, code="qmd_output_too_large"):
    """Raised when qmd prints more than the output cap."""


class QmdBadOutput(QmdError, code="qmd_bad_output"):
    """Raised when qmd's stdout is empty or cannot be parsed as the expected JSON."""


class ServiceUnavailable(MemorydError, code="service_unavailable"):
    """Raised when memory cannot be served at all (fail-closed qmd, explicit provider failure)."""


class SearchDisabled(ServiceUnavailable, code="search_disabled"):
    """Raised by `memory_search`/`memory_get` for an agent whose `memorySearch.enabled` is false."""


class NotServed(MemorydError, code="not_served"):
    """Answered by `memoryd serve` when a forwarded request is for a config/agent/workspace it does not serve."""


class ServerBusy(MemorydError, code="server_busy"):
    """Answered by `memoryd serve` when it already handles its maximum number of connections."""


class InternalError(MemorydError, code="internal_error"):
    """Answered by MCP and `memoryd serve` when a memoryd bug fails a request (the log has the trace)."""
