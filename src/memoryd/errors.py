"""memoryd's one error tree: every failure a user or an agent can see is a `MemorydError`."""

from __future__ import annotations


class MemorydError(Exception):
    """Root of every error memoryd raises on purpose."""


class ConfigError(MemorydError):
    """Raised when a config file or option is missing, unreadable or invalid (names the key path)."""


class WorkspaceNotFound(ConfigError):
    """Raised when no agent workspace can be located from config, flags or the current directory."""


class InvalidInput(MemorydError):
    """Raised when a tool, API or CLI argument is malformed or out of range (empty query, from < 1)."""


class PathNotAllowed(MemorydError):
    """Raised when `memory_get` is asked for a path outside the memory files (traversal, symlink, non-.md)."""


class IndexError_(MemorydError):
    """Raised when the built-in SQLite index cannot be opened, migrated or written."""


class EmbeddingError(MemorydError):
    """Raised when an embedding provider fails to load or to embed."""


class BatchPending(MemorydError):
    """Raised when `remote.batch.wait` is false and submitted batch jobs have not finished yet."""

    def __init__(self, message: str, job_ids: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.job_ids = list(job_ids)


class ProviderUnavailable(EmbeddingError):
    """Raised when an explicitly configured embedding provider cannot serve (memory is unavailable)."""


class QmdError(MemorydError):
    """Root of every failure that comes from driving the qmd sidecar."""


class QmdUnavailable(QmdError):
    """Raised when the qmd binary is missing or cannot be started."""


class QmdTimeout(QmdError):
    """Raised when a qmd call exceeds its hard timeout (its process group has been killed)."""


class QmdExitError(QmdError):
    """Raised when qmd exits non-zero; carries the exit code and stderr."""

    def __init__(self, message: str, *, returncode: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


class QmdOutputTooLarge(QmdError):
    """Raised when qmd prints more than the output cap."""


class QmdBadOutput(QmdError):
    """Raised when qmd's stdout is empty or cannot be parsed as the expected JSON."""


class ScopeDenied(MemorydError):
    """Raised internally when scope rules deny a session; agents see a visible denial result instead."""


class ServiceUnavailable(MemorydError):
    """Raised when memory cannot be served at all (fail-closed qmd, explicit provider failure)."""
