"""Shipped reference-query vectors: what the default model computes now, and used by a new index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import agent_for, index_for, write
from memoryd.core.ranking import REFERENCE_QUERIES
from memoryd.embeddings import shipped
from memoryd.embeddings.local import LocalE5Provider

pytestmark = [pytest.mark.slow]


def reference_texts() -> list[str]:
    return [text for texts in REFERENCE_QUERIES.values() for text in texts]


def test_the_shipped_vectors_are_what_the_default_model_computes_now() -> None:
    provider = LocalE5Provider()
    ship = shipped.shipped_vectors(provider.id, provider.fingerprint())
    texts = reference_texts()
    assert set(ship) == {shipped.reference_key(t) for t in texts}, (
        "REFERENCE_QUERIES or the default model changed: run scripts/ship-reference-vectors"
    )
    for text in texts:
        fresh = np.asarray(provider.embed_query(text), dtype=np.float32)
        cosine = float(fresh @ ship[shipped.reference_key(text)])
        # the engine that computed them computes them again; a stale vector, of another text
        # or model, is nowhere near (another query: < 0.95)
        assert cosine > 0.9999, (text, cosine)


def test_nothing_ships_for_another_provider_or_a_damaged_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert shipped.shipped_vectors("openai", "0" * 16) == {}
    monkeypatch.setattr(shipped, "DATA_DIR", tmp_path)
    (tmp_path / "local-bad.npz").write_bytes(b"not a zip")
    assert shipped.shipped_vectors.__wrapped__("local", "bad") == {}


class CountingProvider(LocalE5Provider):
    """The real default model, counting the queries it is asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def embed_query(self, text: str) -> Any:
        self.queries.append(text)
        return super().embed_query(text)


def test_a_new_index_embeds_only_the_query_on_its_first_search(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n- The pgbouncer timeout stays at 30 seconds.\n")
    provider = CountingProvider()
    idx = index_for(agent_for(ws), provider)
    idx.sync()
    out = idx.search("what is the pgbouncer timeout")
    idx.close()
    assert out.results and out.results[0].path == "MEMORY.md"
    assert provider.queries == ["what is the pgbouncer timeout"]
