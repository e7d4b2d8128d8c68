"""qmd_adapter: everything that talks to the `qmd` sidecar (npm `@tobilu/qmd`)."""

from __future__ import annotations

from ._manager import QmdManager
from ._plan import plan_query

__all__ = ["QmdManager", "plan_query"]
