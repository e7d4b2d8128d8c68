"""Every read and write of memory by file descriptor, and memoryd's private state files.

Paths are opened one component at a time without following links, so a symlink swapped in
between a check and an open cannot redirect I/O; docs/security.md gives the rules.
"""

from __future__ import annotations

from ..errors import MemoryReadFailed
from ._chain import Reason
from ._memory import AppendOutcome, FileRead, append_file, read_file, read_file_with
from ._rewrite import RewriteOutcome, rewrite_file
from ._state import (
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
    SQLITE_SIDE_FILES,
    check_state_path,
    check_state_tree,
    create_private_once,
    fsync_dir,
    open_private,
    private_database,
    private_dir,
    private_file,
    read_private,
    write_private_atomic,
)
from ._walk import Found, Skipped, Walk, unchanged, walk
from ._wipe import wipe_folder

__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "SQLITE_SIDE_FILES",
    "AppendOutcome",
    "FileRead",
    "Found",
    "MemoryReadFailed",
    "Reason",
    "RewriteOutcome",
    "Skipped",
    "Walk",
    "append_file",
    "check_state_path",
    "check_state_tree",
    "create_private_once",
    "fsync_dir",
    "open_private",
    "private_database",
    "private_dir",
    "private_file",
    "read_file",
    "read_file_with",
    "read_private",
    "rewrite_file",
    "unchanged",
    "walk",
    "wipe_folder",
    "write_private_atomic",
]
