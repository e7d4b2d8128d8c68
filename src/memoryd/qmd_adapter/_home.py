"""Per-agent qmd home: `<state>/agents/<id>/qmd/{xdg-config,xdg-cache,sessions}`, its env and index.yml."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from ..fsio import check_state_path, private_dir, read_private, write_private_atomic

MODEL_KEYS = ("embed", "generate", "rerank")


def default_shared_models_dir() -> Path:
    """Where qmd itself keeps models for the user (`$XDG_CACHE_HOME/qmd/models`)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "qmd" / "models"


class QmdHome:
    """Folders and environment of one agent's qmd."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config_home = root / "xdg-config"
        self.config_dir = self.config_home / "qmd"
        self.cache_home = root / "xdg-cache"
        self.sessions_dir = root / "sessions"
        self.index_yml = self.config_dir / "index.yml"
        #: The fingerprint of index.yml + wanted collections when they were last checked.
        self.verified_path = root / "collections.verified"
        #: What every process learns of this qmd (`QmdState`).
        self.state_path = root / "state.json"
        self.index_db = self.cache_home / "qmd" / "index.sqlite"
        self.lock_path = root / "maintenance.lock"
        #: No `.qmd/index.yml` can be found walking up from here but one we would never write.
        self.neutral_cwd = root / "run"

    def env(self, overrides: Mapping[str, str | None] | None = None) -> dict[str, str]:
        """The caller's environment with this agent's XDG dirs and NO_COLOR; `None` overrides unset."""
        env = dict(os.environ)
        env.setdefault("NODE_COMPILE_CACHE", str(self.cache_home / "node-compile-cache"))
        env.update(
            XDG_CONFIG_HOME=str(self.config_home),
            QMD_CONFIG_DIR=str(self.config_dir),
            XDG_CACHE_HOME=str(self.cache_home),
            NO_COLOR="1",
        )
        for key, value in (overrides or {}).items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def ensure(self, *, models: Mapping[str, str], shared_models_dir: Path | None) -> None:
        """Create the folders, link the shared models folder, pin models in index.yml."""
        for folder in (
            self.config_dir,
            self.cache_home / "qmd",
            self.sessions_dir,
            self.neutral_cwd,
        ):
            private_dir(folder)
        # qmd opens these by name: no link may stand in for them (their folders are checked)
        check_state_path(self.index_yml)
        check_state_path(self.index_db)
        if shared_models_dir is not None:
            self._link_models(shared_models_dir)
        if models:
            current = (read_private(self.index_yml) or b"").decode("utf-8", "replace")
            updated = with_models_block(current, models)
            if updated != current:
                write_private_atomic(self.index_yml, updated.encode("utf-8"))

    def _link_models(self, shared: Path) -> None:
        shared.mkdir(parents=True, exist_ok=True)
        link = self.cache_home / "qmd" / "models"
        if link.is_symlink():
            if Path(os.readlink(link)) == shared:
                return
            link.unlink()
        elif link.exists():
            # A real folder (qmd made it before we linked): keep its models, do not clobber.
            return
        link.symlink_to(shared, target_is_directory=True)


_TOP_KEY_RE = re.compile(r"^[A-Za-z_][\w-]*\s*:")
_ENTRY_RE = re.compile(r"^\s+([A-Za-z_]\w*)\s*:\s*(.*?)\s*$")


def with_models_block(text: str, models: Mapping[str, str]) -> str:
    """index.yml text with `models:` carrying the pinned `models` (other keys untouched)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"^models\s*:\s*$", line)), None)
    existing: dict[str, str] = {}
    end = start
    if start is not None:
        end = start + 1
        while end < len(lines) and (not lines[end].strip() or not _TOP_KEY_RE.match(lines[end])):
            match = _ENTRY_RE.match(lines[end])
            if match:
                existing[match.group(1)] = match.group(2)
            end += 1
    merged = dict(existing)
    for key in MODEL_KEYS:
        if key in models and _unquote(existing.get(key, "")) != models[key]:
            merged[key] = json.dumps(models[key])  # a JSON string is a valid YAML scalar
    block = ["models:"] + [f"  {key}: {value}" for key, value in merged.items()]
    if start is None:
        out = block + lines
    else:
        assert end is not None
        if [ln for ln in lines[start:end] if ln.strip()] == block:
            return text
        out = lines[:start] + block + lines[end:]
    return "\n".join(out) + "\n"


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        if value[0] == '"':
            try:
                decoded = json.loads(value)
            except ValueError:
                return value[1:-1]
            return decoded if isinstance(decoded, str) else value
        return value[1:-1].replace("''", "'")
    return value
