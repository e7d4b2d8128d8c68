"""`memoryd warm`: do every slow first-time step now, so the first agent search is fast."""

from __future__ import annotations

from collections.abc import Callable

from ..core.engine import SearchRequest
from ..errors import MemorydError
from ..qmd_adapter import QmdManager
from .service import MemoryService

Say = Callable[[str, bool, str], None]


def warm(service: MemoryService, agent_id: str | None, say: Say) -> bool:
    """qmd home + shared models + collections, update + embed, one query per mode; built-in index."""
    ok = True
    b = service.backend(agent_id)
    qmd = b.qmd
    if isinstance(qmd, QmdManager):
        try:
            b.ensure_qmd_started()
            say(
                "qmd home and collections",
                True,
                ", ".join(c.name for c in qmd.status().collections),
            )
            b.check_version()
            say("qmd version", True, qmd.status().version or "")
            qmd.update()
            say("qmd update", True, "")
            if qmd.search_mode != "search":
                qmd.embed()
                say("qmd embed", True, "")
            modes = ["search"] + ([qmd.search_mode] if qmd.search_mode != "search" else [])
            for mode in modes:
                qmd.search("memoryd warm-up query", max_results=1, mode=mode)  # type: ignore[arg-type]
                say(
                    "qmd keyword search" if mode == "search" else f"qmd {mode} (loads its models)",
                    True,
                    "",
                )
        except MemorydError as err:
            say("qmd", False, f"{type(err).__name__}: {err}")
            ok = False
    idx = b.index
    if idx is not None:
        try:
            report = idx.sync()
            st = idx.status()
            say(
                "built-in index",
                True,
                f"{st.files} files, {st.chunks} chunks, "
                f"{report.vectors_embedded} embedded, {report.vectors_from_cache} cached",
            )
            idx.search(SearchRequest("memoryd warm-up query"))
            say("embedding model loaded", True, idx.status().model or "keyword-only")
        except MemorydError as err:
            say("built-in index", False, str(err))
            ok = False
    return ok
