"""Collection planning: names, desired collections from config, and the add/re-bind/legacy plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.config import QmdConfig
from memoryd.config_validation import validate
from memoryd.qmd_adapter._collections import (
    CollectionSpec,
    desired_collections,
    plan_collections,
    sanitize_name,
)

WS = Path("/ws")
SESS = Path("/state/agents/main/qmd/sessions")


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("main", "main"),
        ("Ops_Bot.v2", "ops-bot-v2"),
        ("a b/c", "a-b-c"),
        ("ÄGENT", "-gent"),
        ("x-1", "x-1"),
    ],
)
def test_names_are_sanitized(raw: str, name: str) -> None:
    assert sanitize_name(raw) == name


def names(qmd: QmdConfig, agent: str = "main") -> list[tuple[str, str, str, str]]:
    return [
        (s.name, s.path, s.pattern, s.source)
        for s in desired_collections(qmd, agent_id=agent, workspace=WS, sessions_dir=SESS)
    ]


def test_default_memory_gives_four_scoped_collections() -> None:
    assert names(QmdConfig(), "Ops_Bot") == [
        ("memory-root-ops-bot", "/ws", "MEMORY.md", "memory"),
        ("memory-alt-ops-bot", "/ws", "memory.md", "memory"),
        ("memory-user-ops-bot", "/ws", "USER.md", "memory"),
        ("memory-dir-ops-bot", "/ws/memory", "**/*.md", "memory"),
    ]


def test_include_default_memory_false_keeps_only_custom_paths_and_sessions() -> None:
    qmd = validate(
        QmdConfig,
        {
            "includeDefaultMemory": False,
            "paths": [
                {"path": "notes", "name": "Team Notes", "pattern": "*.md"},
                {"path": "/abs/docs"},
            ],
            "sessions": {"enabled": True},
        },
    )
    got = names(qmd)
    assert got[0] == ("team-notes-main", "/ws/notes", "*.md", "memory")
    assert got[1][0].startswith("custom-docs-") and got[1][0].endswith("-main")
    assert got[1][1:] == ("/abs/docs", "**/*.md", "memory")
    assert got[2] == ("sessions-main", str(SESS), "**/*.md", "sessions")
    assert len(got) == 3


def test_unnamed_paths_get_stable_distinct_names() -> None:
    qmd = validate(
        QmdConfig,
        {"includeDefaultMemory": False, "paths": [{"path": "/a/docs"}, {"path": "/b/docs"}]},
    )
    first, second = names(qmd), names(qmd)
    assert first == second
    assert first[0][0] != first[1][0]


def test_duplicate_names_get_a_counter() -> None:
    qmd = validate(
        QmdConfig,
        {
            "includeDefaultMemory": False,
            "paths": [{"path": "/a", "name": "x"}, {"path": "/b", "name": "x"}],
        },
    )
    assert [n[0] for n in names(qmd)] == ["x-main", "x-2-main"]


ROOT = CollectionSpec("memory-root-main", "/ws", "MEMORY.md", legacy_name="memory-root")
DIR = CollectionSpec("memory-dir-main", "/ws/memory", "**/*.md", legacy_name="memory-dir")


@pytest.mark.parametrize(
    ("existing", "plan"),
    [
        ({}, ([], [ROOT, DIR])),
        (
            {
                ROOT.name: CollectionSpec(ROOT.name, "/ws/", "MEMORY.md"),
                DIR.name: CollectionSpec(DIR.name, "/ws/memory", "**/*.md"),
            },
            ([], []),
        ),
        (
            {
                ROOT.name: CollectionSpec(ROOT.name, "/old", "MEMORY.md"),
                DIR.name: CollectionSpec(DIR.name, "/ws/memory", "*.md"),
            },
            ([ROOT.name, DIR.name], [ROOT, DIR]),
        ),
        (
            {
                "memory-root": CollectionSpec("memory-root", "/ws", "MEMORY.md"),
                DIR.name: CollectionSpec(DIR.name, "/ws/memory", "**/*.md"),
            },
            (["memory-root"], [ROOT]),
        ),
        (
            {
                "memory-dir": CollectionSpec("memory-dir", "/elsewhere", "**/*.md"),
                ROOT.name: CollectionSpec(ROOT.name, "/ws", "MEMORY.md"),
            },
            ([], [DIR]),
        ),
        (
            {
                "someone-else": CollectionSpec("someone-else", "/x", "**/*.md"),
                ROOT.name: CollectionSpec(ROOT.name, "/ws", "MEMORY.md"),
                DIR.name: CollectionSpec(DIR.name, "/ws/memory", "**/*.md"),
            },
            ([], []),
        ),
    ],
    ids=[
        "fresh",
        "up-to-date",
        "path-and-pattern-changed",
        "legacy-matching-removed-first",
        "legacy-different-kept",
        "foreign-untouched",
    ],
)
def test_plan_brings_qmd_to_desired_collections(
    existing: dict[str, CollectionSpec], plan: tuple[list[str], list[CollectionSpec]]
) -> None:
    assert plan_collections([ROOT, DIR], existing) == plan


def test_extra_paths_become_qmd_collections_searched_by_qmd() -> None:
    # OpenClaw 2026.8 turned memory.qmd.paths into memorySearch.extraPaths; with the qmd backend
    # they must be qmd collections, not only seen by the fallback index.
    from memoryd.core.layout import extra_root

    specs = desired_collections(
        validate(QmdConfig, {"paths": [{"path": "/srv/notes", "name": "notes"}]}),
        agent_id="main",
        workspace=WS,
        sessions_dir=SESS,
        extra_roots=[
            extra_root("/srv/handbook"),
            extra_root("/srv/handbook", "policies/*.md"),
            extra_root("/srv/one.md"),
            extra_root("/srv/notes"),  # already a `paths` collection: not added twice
        ],
    )
    extra = [(s.path, s.pattern) for s in specs[5:]]
    assert extra == [
        ("/srv/handbook", "**/*.md"),
        ("/srv/handbook", "policies/*.md"),
        ("/srv", "one.md"),
    ]
    assert all(s.name.startswith("custom-") and s.name.endswith("-main") for s in specs[5:])
    assert len({s.name for s in specs}) == len(specs)
