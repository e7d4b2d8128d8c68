"""`memoryd warm`: do every slow first-time step now, so the first agent search is fast."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import MemorydError
from .service import MemoryService

Say = Callable[[str, bool, str], None]


async def warm(service: MemoryService, agent_id: str | None, say: Say) -> bool:
    """qmd home + shared models + collections, update + embed, one query per mode; built-in index."""
    ok = True
    b = service.backend(agent_id)
    if b.qmd is not None:
        qmd = b.qmd
        try:
            await qmd.start()
            b._qmd_started = True
            say(
                "qmd home and collections",
                True,
                ", ".join(s["name"] for s in qmd.status()["collections"]),
            )
            say("qmd version", True, await qmd.version())
            await qmd.update(force=True)
            say("qmd update", True, "")
            if qmd.search_mode != "search":
                await qmd.embed(force=True)
                say("qmd embed", True, "")
            modes = ["search"] + ([qmd.search_mode] if qmd.search_mode != "search" else [])
            for mode in modes:
                saved = qmd._mode
                qmd._mode = mode
                try:
                    await qmd.search("memoryd warm-up query", max_results=1)
                finally:
                    qmd._mode = saved
                say(f"qmd {mode} (loads its models)", True, "")
        except MemorydError as err:
            say("qmd", False, f"{type(err).__name__}: {err}")
            ok = False
    idx = b.index
    if idx is not None:
        try:
            report = await idx.sync()
            say(
                "built-in index",
                True,
                f"{idx.status()['files']} files, {idx.status()['chunks']} chunks, "
                f"{report.vectors_embedded} embedded, {report.vectors_from_cache} cached",
            )
            await idx.search("memoryd warm-up query")
            say("embedding model loaded", True, idx.status()["model"] or "keyword-only")
        except MemorydError as err:
            say("built-in index", False, str(err))
            ok = False
    return ok
