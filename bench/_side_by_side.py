"""Two revisions of memoryd side by side: each in a process of its own, driven in turns.

A benchmark that compares this checkout with a git revision (`--baseline REV`) cannot import
both into one process, so it starts one `Child` per revision (`PYTHONPATH` = that revision's
exported `src/`) and sends each the same requests in alternating order: both feel the same
machine load, and whichever runs second never always gets the warmer caches. The child side is
`serve()`, run as `python bench/_side_by_side.py`; it speaks one JSON object per line.

Requests: `{"op": "load"}`, `{"op": "docs", "texts": [...]}` (seconds to embed them as
documents), `{"op": "query", "text": ...}` (ms to embed a query), `{"op": "index", ...}` (build
a builtin index whose document vectors are pooled sentence vectors, as bench_builtin_index.py
does), `{"op": "search", "q": ..., "mode": ...}` (ms of one search, its query embedding
included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def export_revision(rev: str, dest: Path) -> Path:
    """`src/` of a git revision, exported and byte-compiled (as an installed copy would be)."""
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest / "src")], check=True)
    return dest / "src"


class Child:
    """One revision's process; `ask` sends a request and returns its answer."""

    def __init__(self, name: str, src: Path, state_dir: Path) -> None:
        self.name = name
        env = {**os.environ, "PYTHONPATH": str(src), "MEMORYD_STATE_DIR": str(state_dir)}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name}: the child process died ({self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise SystemExit(f"{self.name}: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(60)


def pair(baseline: str, root: Path) -> list[Child]:
    """This checkout's process and the baseline revision's, in that order."""
    src = export_revision(baseline, root / "baseline")
    return [
        Child("this", ROOT / "src", root / "state-this"),
        Child("baseline", src, root / "state-baseline"),
    ]


def serve() -> None:  # the child's side
    import inspect

    import anyio
    import numpy as np

    from memoryd.builtin_index import MemoryIndex
    from memoryd.config import resolve_agent, validate_config
    from memoryd.embeddings.base import ProviderSelection, l2_normalize
    from memoryd.embeddings.local import LocalE5Provider

    async def done(value: Any) -> Any:
        """A revision's answer: awaited where its API is async (older ones), as it is."""
        return await value if inspect.isawaitable(value) else value

    async def close(obj: Any) -> None:
        await done(obj.aclose() if hasattr(obj, "aclose") else obj.close())

    def pooled(vecs: dict[str, Any], texts: Any) -> Any:
        rows = []
        for text in texts:
            parts = [vecs[ln] for ln in text.splitlines() if ln in vecs]
            rows.append(np.mean(parts, axis=0) if parts else np.zeros(384, np.float32))
        return l2_normalize(np.asarray(rows, dtype=np.float32))

    class PooledE5(LocalE5Provider):
        """The real provider, except documents get pooled sentence vectors."""

        def __init__(self, vecs: dict[str, Any]) -> None:
            super().__init__()
            self._vecs = vecs

        if inspect.iscoroutinefunction(LocalE5Provider.embed_documents):

            async def embed_documents(self, texts: Any, **_: Any) -> Any:  # type: ignore[misc]
                return pooled(self._vecs, texts)

        else:

            def embed_documents(self, texts: Any, **_: Any) -> Any:
                return pooled(self._vecs, texts)

    provider = LocalE5Provider()
    index: Any = None

    async def handle(req: dict[str, Any]) -> dict[str, Any]:
        nonlocal index
        op = req["op"]
        t = time.perf_counter()
        if op == "load":
            provider.load()
        elif op == "docs":
            await done(provider.embed_documents(req["texts"]))
        elif op == "query":
            await done(provider.embed_query(req["text"]))
        elif op == "index":
            data = np.load(req["vectors"], allow_pickle=False)
            vecs = dict(zip(data["sentences"].tolist(), data["vectors"], strict=True))
            store = {"path": str(Path(tempfile.mkdtemp()) / "index.sqlite")}
            cfg = validate_config(
                {
                    "agents": {
                        "defaults": {
                            "workspace": req["workspace"],
                            "memorySearch": {"store": store},
                        }
                    }
                }
            )
            index = MemoryIndex(
                resolve_agent(cfg).index_settings(),
                ProviderSelection("local", PooledE5(vecs), "bench"),
            )
            await done(index.sync())
            for q in req["warm"]:
                await done(index.search(q))
            return {"s": time.perf_counter() - t, "chunks": index.status().to_dict()["chunks"]}
        elif op == "search":
            getattr(index, "searcher", index)._query_cache.clear()  # every search embeds its query
            t = time.perf_counter()
            await done(index.search(req["q"], mode=req["mode"]))
        else:
            return {"error": f"unknown op {op!r}"}
        return {"s": time.perf_counter() - t}

    async def main() -> None:
        for line in sys.stdin:
            try:
                answer = await handle(json.loads(line))
            except Exception as err:  # reported to the parent, which stops
                answer = {"error": f"{type(err).__name__}: {err}"}
            print(json.dumps(answer), flush=True)
        if index is not None:
            await close(index)
        await close(provider)

    anyio.run(main)


if __name__ == "__main__":
    serve()
