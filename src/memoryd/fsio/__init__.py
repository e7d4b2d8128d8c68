"""Memory and private state read and written by descriptors opened one component at a time
without following links, so a swapped-in symlink cannot redirect I/O (docs/security.md)."""

from __future__ import annotations

from ._chain import FileRead, append_file, read_file, read_file_with, rewrite_file
from ._state import (
    PRIVATE_FILE_MODE,
    SQLITE_SIDE_FILES,
    check_state_path,
    check_state_tree,
    create_private_once,
    open_private,
    private_dir,
    private_file,
    read_private,
    wipe_folder,
    write_private_atomic,
)
from ._walk import unchanged, walk

__all__ = [
    "PRIVATE_FILE_MODE",
    "SQLITE_SIDE_FILES",
    "FileRead",
    "append_file",
    "check_state_path",
    "check_state_tree",
    "create_private_once",
    "open_private",
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
