"""qmd_adapter: everything that talks to the `qmd` sidecar (npm `@tobilu/qmd`).

`QmdManager` is the entry point the orchestrator uses; `run_qmd` is the process runner; the
pure helpers (parsing, collection planning, result mapping) are exported for tests and tools.
"""

from __future__ import annotations

from ._collections import (
    Action,
    CollectionSpec,
    desired_collections,
    plan_collections,
    sanitize_name,
)
from ._home import QmdHome, default_shared_models_dir, with_models_block
from ._manager import QmdManager, SearchMode, busy_timeout_ms, embed_backoff_s
from ._mapping import (
    apply_limits,
    display_path,
    hit_to_result,
    interleave,
    split_qmd_path,
    split_qmd_uri,
)
from ._parse import CollectionInfo, QmdHit, parse_search_output, parse_snippet
from ._runner import DEFAULT_MAX_OUTPUT_CHARS, QmdOutput, resolve_command, run_qmd

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "Action",
    "CollectionInfo",
    "CollectionSpec",
    "QmdHit",
    "QmdHome",
    "QmdManager",
    "QmdOutput",
    "SearchMode",
    "apply_limits",
    "busy_timeout_ms",
    "default_shared_models_dir",
    "desired_collections",
    "display_path",
    "embed_backoff_s",
    "hit_to_result",
    "interleave",
    "parse_search_output",
    "parse_snippet",
    "plan_collections",
    "resolve_command",
    "run_qmd",
    "sanitize_name",
    "split_qmd_path",
    "split_qmd_uri",
    "with_models_block",
]
