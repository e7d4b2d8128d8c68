"""qmd_adapter: everything that talks to the `qmd` sidecar (npm `@tobilu/qmd`)."""

from __future__ import annotations

from ._collections import (
    Action,
    CollectionSpec,
    desired_collections,
    plan_collections,
    sanitize_name,
)
from ._core import busy_timeout_ms
from ._home import QmdHome, default_shared_models_dir, with_models_block
from ._maintenance import embed_backoff_s
from ._manager import QmdManager
from ._mapping import apply_limits, display_path, interleave, split_qmd_path, split_qmd_uri
from ._parse import CollectionInfo, QmdHit, parse_search_output, parse_snippet
from ._plan import QueryPlan, SearchMode, content_words, is_qmd_syntax, plan_query
from ._runner import DEFAULT_MAX_OUTPUT_CHARS, QmdOutput, resolve_command, run_qmd
from ._snippets import content_docid, hit_windows, refind_line

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "Action",
    "CollectionInfo",
    "CollectionSpec",
    "QmdHit",
    "QmdHome",
    "QmdManager",
    "QmdOutput",
    "QueryPlan",
    "SearchMode",
    "apply_limits",
    "busy_timeout_ms",
    "content_docid",
    "content_words",
    "default_shared_models_dir",
    "desired_collections",
    "display_path",
    "embed_backoff_s",
    "hit_windows",
    "interleave",
    "is_qmd_syntax",
    "parse_search_output",
    "parse_snippet",
    "plan_collections",
    "plan_query",
    "refind_line",
    "resolve_command",
    "run_qmd",
    "sanitize_name",
    "split_qmd_path",
    "split_qmd_uri",
    "with_models_block",
]
