"""memoryd's one error tree: every failure a user or an agent can see is a `MemorydError`.

Each class carries a stable, machine-readable `code` (snake_case). Tool results put it next to
the message (`{disabled: true, error, code}`), the CLI maps it to an exit status, and the README
lists every code. Codes never change once published; a new failure kind gets a new class.
"""

from __future__ import annotations

from typing import ClassVar


class MemorydError(Exception):
    """Root of every error memoryd raises on purpose."""

    code: ClassVar[str] = "error"


# --------------------------------------------------------------------------- input and config


class ConfigError(MemorydError):
    """Raised when a config file or option is missing, unreadable or invalid (names the key path)."""

    code = "config_error"


class WorkspaceNotFound(ConfigError):
    """Raised when no agent workspace can be located from config, flags or the current directory."""

    code = "workspace_not_found"


class InvalidAgentId(ConfigError):
    """Raised when an agent id (flag, config, MCP or socket request) does not have the allowed shape."""

    code = "invalid_agent_id"


class UnknownAgent(ConfigError):
    """Raised when an agent id is well formed but not configured."""

    code = "unknown_agent"


class InvalidInput(MemorydError):
    """Raised when a tool, API or CLI argument is malformed or out of range (empty query, from < 1)."""

    code = "invalid_input"


class PathNotAllowed(MemorydError):
    """Raised when `memory_get` is asked for a path outside the memory files (traversal, symlink, non-.md)."""

    code = "path_not_allowed"


class ScopeDenied(MemorydError):
    """Raised when scope rules deny a session; agents see a visible denial result instead."""

    code = "scope_denied"


# --------------------------------------------------------------------------- state and index


class StateError(MemorydError):
    """Raised when memoryd's own state (index, sessions.json, exports, locks) cannot be used."""

    code = "state_error"


class StateReadOnly(StateError):
    """Raised when a write to memoryd's state dir is refused by the file system (read-only mount, permissions)."""

    code = "state_read_only"


class IndexError_(StateError):
    """Raised when the built-in index cannot be opened, migrated or written."""

    code = "index_error"


class IndexCorrupt(IndexError_):
    """Raised when the built-in index file is damaged and could not be rebuilt automatically."""

    code = "index_corrupt"


class StoreUnavailable(IndexError_):
    """Raised when the built-in index's PostgreSQL store (`store.driver = "postgres"`) cannot be reached."""

    code = "store_unavailable"


class WorkspaceMismatch(IndexError_):
    """Raised when an index file was built for another workspace (it is never re-synced to a new one)."""

    code = "workspace_mismatch"


class FlushStateError(StateError):
    """Raised when the agent's `sessions.json` cannot be read or written (permissions, disk)."""

    code = "flush_state_error"


class SessionExportError(StateError):
    """Raised when the session export folder cannot be created, locked or written."""

    code = "session_export_error"


class LocalPostgresError(MemorydError):
    """Raised when `memoryd pg-local` cannot start its throwaway PostgreSQL or write its config."""

    code = "pg_local_error"


# --------------------------------------------------------------------------- memory writes


class WorkspaceReadOnly(MemorydError):
    """Raised when a memory write is asked of an agent whose `workspaceAccess` is `ro` or `none`."""

    code = "workspace_read_only"


class MemoryWriteFailed(MemorydError):
    """Raised when a memory file cannot be created, locked or written (permissions, disk full)."""

    code = "write_failed"


class MemoryReadFailed(MemorydError):
    """Raised when a memory file that memoryd may serve cannot be read (permissions, I/O error)."""

    code = "read_failed"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        #: the operating system's reason alone ("Permission denied"), when there is one
        self.reason = reason or message


class InvalidMemoryWrite(InvalidInput):
    """Raised when `memory_append` gets an unknown target, empty text, NUL bytes or more than 64 KiB."""

    code = "invalid_input"


# --------------------------------------------------------------------------- embeddings


class EmbeddingError(MemorydError):
    """Raised when an embedding provider fails to load or to embed."""

    code = "embedding_error"


class BatchPending(EmbeddingError):
    """Raised when `remote.batch.wait` is false and submitted batch jobs have not finished yet."""

    code = "batch_pending"

    def __init__(self, message: str, job_ids: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.job_ids = list(job_ids)


class ProviderUnavailable(EmbeddingError):
    """Raised when an explicitly configured embedding provider cannot serve (memory is unavailable)."""

    code = "provider_unavailable"


# --------------------------------------------------------------------------- qmd


class QmdError(MemorydError):
    """Root of every failure that comes from driving the qmd sidecar."""

    code = "qmd_error"


class QmdUnavailable(QmdError):
    """Raised when the qmd binary is missing or cannot be started."""

    code = "qmd_unavailable"


class QmdTimeout(QmdError):
    """Raised when a qmd call exceeds its hard timeout (its process group has been killed)."""

    code = "qmd_timeout"


class QmdExitError(QmdError):
    """Raised when qmd exits non-zero; carries the exit code and stderr."""

    code = "qmd_exit"

    def __init__(self, message: str, *, returncode: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


class QmdLocked(QmdExitError):
    """Raised when qmd's index stays locked by another process after the retries."""

    code = "qmd_locked"


class QmdOutputTooLarge(QmdError):
    """Raised when qmd prints more than the output cap."""

    code = "qmd_output_too_large"


class QmdBadOutput(QmdError):
    """Raised when qmd's stdout is empty or cannot be parsed as the expected JSON."""

    code = "qmd_bad_output"


# --------------------------------------------------------------------------- service


class ServiceUnavailable(MemorydError):
    """Raised when memory cannot be served at all (fail-closed qmd, explicit provider failure)."""

    code = "service_unavailable"


class NotServed(MemorydError):
    """Answered by `memoryd serve` when a forwarded request is for a config/agent/workspace it does not serve."""

    code = "not_served"


class ServerBusy(MemorydError):
    """Answered by `memoryd serve` when it already handles its maximum number of connections."""

    code = "server_busy"


def error_code(err: BaseException) -> str:
    """The stable code of `err` (`internal_error` for anything that is not a `MemorydError`)."""
    return err.code if isinstance(err, MemorydError) else "internal_error"


def _subclasses(cls: type[MemorydError]) -> list[type[MemorydError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(_subclasses(sub))
    return out


def error_from_code(code: str | None, message: str) -> MemorydError:
    """Rebuild an error received over a wire (socket answer) from its code and message."""
    for cls in _subclasses(MemorydError):
        if cls.code == code:
            return cls(message)
    return MemorydError(message)


def all_codes() -> dict[str, str]:
    """Every code and the first line of its class docstring (the README's error table)."""
    out: dict[str, str] = {}
    for cls in _subclasses(MemorydError):
        out.setdefault(cls.code, (cls.__doc__ or "").strip().splitlines()[0])
    return out
