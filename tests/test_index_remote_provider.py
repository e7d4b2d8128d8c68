"""The built-in index on a remote provider (a local server speaking OpenAI's wire format)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from embedding_servers import FakeOpenAI, serve
from memoryd.config import resolve_agent, validate_config
from memoryd.orchestrator._supervisor import builtin_engine


@pytest.fixture
def openai_base() -> Iterator[str]:
    api = FakeOpenAI(key="sk-test")
    with serve(api) as root:
        yield f"{root}/v1"


def agent(ws: Path, base: str, dims: int) -> object:
    cfg = validate_config(
        {
            "agents": {
                "defaults": {
                    "workspace": str(ws),
                    "memorySearch": {
                        "provider": "openai",
                        "model": "text-embedding-3-large",
                        "remote": {
                            "baseUrl": base,
                            "apiKey": "sk-test",
                            "outputDimensionality": dims,
                        },
                    },
                }
            }
        }
    )
    return resolve_agent(cfg)


def test_dimension_change_triggers_an_atomic_reindex(workspace: Path, openai_base: str) -> None:
    (workspace / "MEMORY.md").write_text("# Memory\nThe deploy target is fly.io.\n")
    (workspace / "memory" / "a.md").write_text("Alice adopted a cat named Miso.\n")
    first = builtin_engine(agent(workspace, openai_base, 16))  # type: ignore[arg-type]
    first.sync()
    assert (
        first.status().to_dict()["provider"] == "openai"
        and first.status().to_dict()["vector"]["dims"] == 16
    )
    assert (first.search("deploy target")).mode == "hybrid"
    first.close()

    second = builtin_engine(agent(workspace, openai_base, 32))  # type: ignore[arg-type]
    assert "fingerprint" in (second.reindex_reason() or "")
    report = second.sync()
    assert report.reindexed and report.vectors_embedded == 2
    assert second.status().to_dict()["vector"]["dims"] == 32
    out = second.search("deploy target")
    assert out.mode == "hybrid" and out.results[0].path == "MEMORY.md"
    assert [p.name for p in second.path.parent.iterdir() if ".reindex-" in p.name] == []
    second.close()
