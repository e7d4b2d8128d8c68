"""Query vectors that ship with memoryd, so a new index does not embed them on its first search."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.chunking import content_hash

if TYPE_CHECKING:
    import numpy as np

#: Where the shipped vectors live (package data).
DATA_DIR = Path(__file__).with_name("shipped")


def reference_key(text: str) -> str:
    """The embedding-cache hash of a reference query: tagged, so no chunk can ever have it."""
    return content_hash(f"\0memoryd-reference-query\0{text}")


def shipped_file(provider_id: str, fingerprint: str) -> Path:
    return DATA_DIR / f"{provider_id}-{fingerprint}.npz"


@functools.cache
def shipped_vectors(provider_id: str, fingerprint: str) -> dict[str, np.ndarray]:
    """hash → vector for this provider, or {} when nothing ships for it (or the file is bad)."""
    import numpy as np

    path = shipped_file(provider_id, fingerprint)
    try:
        with np.load(path, allow_pickle=False) as data:
            hashes = [str(h) for h in data["hashes"]]
            vectors = np.asarray(data["vectors"], dtype=np.float32)
    except (OSError, KeyError, ValueError):
        return {}
    if vectors.ndim != 2 or len(hashes) != vectors.shape[0]:
        return {}
    return {h: vectors[i] for i, h in enumerate(hashes)}
