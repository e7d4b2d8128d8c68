"""memoryd: durable, searchable memory for AI agents."""

from __future__ import annotations

from .errors import (
    ConfigError,
    MemorydError,
    PathNotAllowed,
    QmdBadOutput,
    QmdTimeout,
    QmdUnavailable,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "MemorydError",
    "PathNotAllowed",
    "QmdBadOutput",
    "QmdTimeout",
    "QmdUnavailable",
    "__version__",
]
