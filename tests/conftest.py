"""Shared fixtures: every test gets its own state, config and XDG dirs under tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pg_support import PgServer


@pytest.fixture(autouse=True)
def isolated_env(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    # one warm Node compile cache for every qmd and Inspector process of this worker: memoryd
    # keeps a caller's NODE_COMPILE_CACHE, and each test's fresh agent home would start cold
    cache = tmp_path_factory.getbasetemp() / "node-compile-cache"
    monkeypatch.setenv("NODE_COMPILE_CACHE", str(cache))
    state = tmp_path / "_state"
    monkeypatch.setenv("MEMORYD_STATE_DIR", str(state))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "_xdg_config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "_xdg_cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "_xdg_state"))
    monkeypatch.delenv("MEMORYD_CONFIG", raising=False)
    monkeypatch.delenv("MEMORYD_WORKSPACE", raising=False)
    for key in (
        "OPENAI_API_KEY",
        "GEMINI_API_KEY",
        "VOYAGE_API_KEY",
        "MISTRAL_API_KEY",
        "OLLAMA_API_KEY",
        "MEMORYD_RERANK_API_KEY",
    ):
        monkeypatch.delenv(key, raising=False)
    yield state


@pytest.fixture
def shared_base() -> Iterator[Path]:
    """A folder every local user may traverse, for tests that act as a second user."""
    from second_user import make_shared_base

    yield from make_shared_base()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty agent workspace with a memory/ folder."""
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    return ws


#: The test files that take longest, longest first (measured with `--durations`; order only,
#: no result depends on it). `scripts/test` runs them first (`--dist loadfile
#: --no-loadscope-reorder`; xdist would otherwise order files by their number of tests, which
#: leaves the slow, few-test qmd and PostgreSQL files for last, one worker running them alone
#: while the others idle): the longest jobs first keeps every worker busy to the end.
LONGEST_FIRST = (
    "test_pg_local.py",  # most of it is pip installing memoryd into a fresh venv
    "test_qmd_manager.py",
    "test_index_faults.py",
    "test_qmd_faults.py",
    "test_orchestrator.py",
    "test_status_truth.py",
    "test_qmd_vectors.py",
    "test_fsio_races.py",
    "test_mcp.py",
    "test_mcp_inspector.py",
    "test_pg_workers.py",
    "test_engine_contract.py",
    "test_e5_engine.py",
    "test_redact.py",
    "test_pg_store.py",
    "test_lifecycle_qmd_sessions.py",
    "test_security_integration.py",
    "test_qmd_runner.py",
    "test_relevance.py",
    "test_input_faults.py",
    "test_embeddings_local_deadline.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Count the real-qmd integration tests, so CI output shows they ran rather than skipped."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for outcome in counts:
        for rep in terminalreporter.stats.get(outcome, []):
            if "qmd" in getattr(rep, "keywords", {}) and getattr(rep, "when", "call") in (
                "call",
                "setup",
            ):
                counts[outcome] += 1
    terminalreporter.write_line(
        f"qmd integration tests (real qmd binary) — ran {counts['passed'] + counts['failed']}, "
        f"passed {counts['passed']}, failed {counts['failed']}, skipped {counts['skipped']}"
    )


# PostgreSQL (tests/pg_support.py): one server per test process, a migrated database per test


@pytest.fixture(scope="session")
def pg_server() -> PgServer:
    from pg_support import shared_server

    return shared_server()


@pytest.fixture
def pg_db(pg_server: PgServer) -> Iterator[str]:
    from pg_support import fresh_database

    yield from fresh_database(pg_server)


@pytest.fixture
def pg_url(pg_server: PgServer, pg_db: str) -> str:
    """A superuser URL of a fresh database with memoryd's schema."""
    return pg_server.url(pg_db)
