"""Paths, interleaving, index.yml models block, embed backoff."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from memoryd.core.layout import MemoryRoot, display_path
from memoryd.core.results import SearchResult
from memoryd.qmd_adapter._home import with_models_block
from memoryd.qmd_adapter._manager import embed_backoff_s
from memoryd.qmd_adapter._parse import split_qmd_uri
from memoryd.qmd_adapter._snippets import interleave

ROOTS = {"memory-dir-main": "/ws/memory", "memory-root-main": "/ws", "notes-main": "/srv/notes"}


@pytest.mark.parametrize(
    ("uri", "parts"),
    [
        ("qmd://memory-dir-main/2026-01-02.md", ("memory-dir-main", "2026-01-02.md")),
        ("qmd://c/Sub Dir/My File.md", ("c", "Sub Dir/My File.md")),
        ("qmd://c/", None),
        ("qmd://c", None),
        ("/abs/file.md", None),
    ],
)
def test_qmd_uris_split_into_collection_and_path(uri: str, parts: tuple[str, str] | None) -> None:
    assert split_qmd_uri(uri) == parts


@pytest.mark.parametrize(
    ("collection", "rel", "shown"),
    [
        ("memory-dir-main", "2026-01-02.md", "memory/2026-01-02.md"),
        ("memory-root-main", "MEMORY.md", "MEMORY.md"),
        ("notes-main", "a/b.md", "qmd/notes-main/a/b.md"),
        ("memory-dir-main", "../../etc/x.md", "qmd/memory-dir-main/../../etc/x.md"),
    ],
)
def test_paths_inside_the_workspace_become_workspace_relative(
    collection: str, rel: str, shown: str
) -> None:
    root = MemoryRoot(ROOTS[collection], "**/*.md", "memory", collection)
    assert display_path(root, PurePosixPath(rel), workspace="/ws") == shown


def res(path: str, score: float, snippet: str = "s", source: str = "memory") -> SearchResult:
    return SearchResult(path, 1, 1, score, snippet, source)  # type: ignore[arg-type]


def test_interleave_alternates_sources_leading_with_the_best() -> None:
    mem = [[res("m1", 0.9)], [res("m2", 0.8)], [res("m3", 0.7)]]
    ses = [[res("s1", 0.95, source="sessions")], [res("s2", 0.2, source="sessions")]]
    assert [r.path for r in interleave(mem, ses)] == ["s1", "m1", "s2", "m2", "m3"]
    assert [r.path for r in interleave(mem, [])] == ["m1", "m2", "m3"]
    assert interleave() == []


def test_interleave_keeps_a_hit_and_its_continuation_together() -> None:
    mem = [[res("m1", 0.9), res("m1+", 0.9)], [res("m2", 0.8)]]
    ses = [[res("s1", 0.5, source="sessions")]]
    assert [r.path for r in interleave(mem, ses)] == ["m1", "m1+", "s1", "m2"]


QMD_WRITTEN = """models:
  embed: hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf
  generate: hf:tobil/qmd-query-expansion-1.7B-gguf/qmd-query-expansion-1.7B-q4_k_m.gguf
collections:
  memory-root-main:
    path: /ws
    pattern: MEMORY.md
"""


def test_models_block_is_written_into_an_empty_index_yml() -> None:
    assert with_models_block("", {"embed": "/m/e.gguf"}) == 'models:\n  embed: "/m/e.gguf"\n'


def test_models_block_replaces_pins_and_keeps_the_rest() -> None:
    out = with_models_block(QMD_WRITTEN, {"embed": "/m/e.gguf", "rerank": "/m/r.gguf"})
    assert out.splitlines()[:4] == [
        "models:",
        '  embed: "/m/e.gguf"',
        "  generate: hf:tobil/qmd-query-expansion-1.7B-gguf/qmd-query-expansion-1.7B-q4_k_m.gguf",
        '  rerank: "/m/r.gguf"',
    ]
    assert out.endswith(
        "collections:\n  memory-root-main:\n    path: /ws\n    pattern: MEMORY.md\n"
    )


def test_models_block_is_left_alone_when_already_pinned() -> None:
    text = "models:\n  embed: /m/e.gguf\ncollections: {}\n"
    assert with_models_block(text, {"embed": "/m/e.gguf"}) == text


@pytest.mark.parametrize(
    ("failures", "delay"), [(0, 0), (1, 60), (2, 120), (3, 240), (6, 1920), (7, 3600), (30, 3600)]
)
def test_embed_backoff_doubles_from_a_minute_up_to_an_hour(failures: int, delay: float) -> None:
    assert embed_backoff_s(failures) == delay
