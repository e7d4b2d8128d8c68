"""qmd_adapter: everything that talks to the `qmd` sidecar (npm `@tobilu/qmd`)."""

from __future__ import annotations

from ._manager import REFUSED_HITS, QmdManager
from ._plan import plan_query

__all__ = ["REFUSED_HITS", "QmdManager", "plan_query"]
