"""Emptying a private state folder (`memoryd reset`), keeping what is not derived."""

from __future__ import annotations

import shutil
from collections.abc import Collection
from pathlib import Path

from ..errors import StateError


def wipe_folder(folder: Path, keep: Collection[Path] = ()) -> list[Path]:
    """Delete everything in `folder` except the paths in `keep` and the folders holding them;
    what was deleted. Symlinks are removed, never followed. Raises `StateError`."""
    try:
        found = sorted(folder.iterdir())
    except FileNotFoundError:
        return []
    except OSError as err:
        raise StateError(f"cannot empty {folder}: {err.strerror or err}") from None
    gone: list[Path] = []
    for entry in found:
        if entry in keep:
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                if any(k.is_relative_to(entry) for k in keep):
                    gone += wipe_folder(entry, keep)
                    continue
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)
        except OSError as err:
            raise StateError(f"cannot remove {entry}: {err.strerror or err}") from None
        gone.append(entry)
    return gone
