"""Where memoryd keeps its state: the platformdirs state dir, overridable by MEMORYD_STATE_DIR."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "memoryd"


def state_dir() -> Path:
    """Root of memoryd's state (indexes, qmd homes, sessions)."""
    override = os.environ.get("MEMORYD_STATE_DIR")
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_state_dir(APP_NAME))


def config_dir() -> Path:
    """Default folder searched for `config.toml`."""
    return Path(platformdirs.user_config_dir(APP_NAME))


def agent_state_dir(agent_id: str) -> Path:
    """Per-agent state: `<state>/agents/<agentId>`."""
    return state_dir() / "agents" / agent_id


def agent_sessions_dir(agent_id: str) -> Path:
    """Where an agent's session transcripts (`*.jsonl`) live."""
    return agent_state_dir(agent_id) / "sessions"


def default_index_path(agent_id: str) -> Path:
    """Default built-in index file: `<state>/memory/<agentId>.sqlite`."""
    return state_dir() / "memory" / f"{agent_id}.sqlite"
