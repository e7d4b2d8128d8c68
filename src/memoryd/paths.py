"""Where memoryd keeps its state, built in one place from validated ids."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Final, NamedTuple

from .errors import InvalidAgentId, MemorydError

APP_NAME = "memoryd"

AGENT_ID_SHAPE: Final = "1–64 letters, digits, '-' or '_', starting with a letter or digit"
_AGENT_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
DEFAULT_AGENT_ID: Final = "main"


def validate_agent_id(raw: object) -> str:
    """The agent id lower-cased (as OpenClaw does, so `Ops` and `ops` are one agent on every
    file system), or `InvalidAgentId` naming the allowed shape."""
    if not isinstance(raw, str) or not _AGENT_ID_RE.fullmatch(raw):
        shown = raw if isinstance(raw, str) else type(raw).__name__
        if isinstance(shown, str) and len(shown) > 80:
            shown = shown[:77] + "..."
        raise InvalidAgentId(f"invalid agent id {shown!r}: use {AGENT_ID_SHAPE}")
    return raw.lower()


def state_dir() -> Path:
    """Root of memoryd's state (indexes, qmd homes, sessions)."""
    override = os.environ.get("MEMORYD_STATE_DIR")
    if override:
        return Path(override).expanduser().absolute()
    import platformdirs  # here: a state dir from the environment never needs it

    return Path(platformdirs.user_state_dir(APP_NAME))


def config_file(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """`--config`, then `$MEMORYD_CONFIG`, then `<config dir>/config.toml` if present (absolute)."""
    chosen = explicit or os.environ.get("MEMORYD_CONFIG")
    if chosen:
        return Path(chosen).expanduser().absolute()
    import platformdirs

    default = Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"
    return default if default.is_file() else None


def socket_path() -> Path:
    """The Unix socket `memoryd serve` listens on."""
    return state_dir() / "memoryd.sock"


def config_cache_dir() -> Path:
    """Validated config files, so an unchanged config is not validated again (`config_files`)."""
    return state_dir() / "config-cache"


_SLUG_RE: Final = re.compile(r"[^a-z0-9]+")


def workspace_key(workspace: Path) -> str:
    """`<slug>-<hash>`: the folder's name made safe, and 12 hex of its real path's SHA-256."""
    real = os.path.realpath(workspace)
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    slug = _SLUG_RE.sub("-", os.path.basename(real.rstrip(os.sep)).lower()).strip("-")[:32]
    return f"{slug or 'root'}-{digest}"


def agent_root(agent_id: str) -> Path:
    """`<state>/agents/<agentId>` for a validated id."""
    return _inside(state_dir(), "agents", validate_agent_id(agent_id))


class AgentState(NamedTuple):
    """Every state path of one (agent, workspace) pair (a named tuple: every command builds
    the class, and a frozen dataclass compiles six methods to do so)."""

    agent_id: str
    workspace: Path
    key: str
    root: Path

    @property
    def index_db(self) -> Path:
        return self.root / "index.sqlite"

    @property
    def health(self) -> Path:
        return self.root / "health.json"

    @property
    def flush_state(self) -> Path:
        return self.root / "sessions.json"

    @property
    def qmd_home(self) -> Path:
        return self.root / "qmd"

    @property
    def qmd_exports(self) -> Path:
        return self.qmd_home / "sessions"

    @property
    def sessions_dir(self) -> Path:
        """The agent's transcripts (per agent, not per workspace: the host writes them)."""
        return agent_root(self.agent_id) / "sessions"


def agent_state(agent_id: str, workspace: Path) -> AgentState:
    """The state of `agent_id` for `workspace` (an existing folder; its real path is the identity)."""
    aid = validate_agent_id(agent_id)
    key = workspace_key(workspace)
    root = _inside(state_dir(), "agents", aid, "workspaces", key)
    return AgentState(aid, Path(os.path.realpath(workspace)), key, root)


def expand_store_path(template: str, agent_id: str, workspace: Path) -> Path:
    """A user's `store.path` with `{agentId}` and `{workspaceKey}` filled in (validated values only)."""
    aid = validate_agent_id(agent_id)
    filled = template.replace("{agentId}", aid).replace("{workspaceKey}", workspace_key(workspace))
    return Path(filled).expanduser().absolute()


def _inside(base: Path, *parts: str) -> Path:
    """`base/parts…`, refusing any part that could leave `base` (ids are validated already)."""
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\\" in part or "\x00" in part:
            raise MemorydError(f"refusing to build a state path from {part!r}")
    return base.joinpath(*parts)
