"""Every read and write of memory by file descriptor, and memoryd's private state files.

`memoryd.core.layout` decides lexically which paths are memory; this package applies that rule on
the file system without trusting a path string twice: a memory file is reached from its root one
component at a time (`openat` with `O_NOFOLLOW`), and what is served or written is whatever the
final descriptor refers to once its `fstat` passes. A symlink or a folder swapped in between a
check and an open therefore cannot redirect a read or an append outside the memory folders.

The rules (docs/security.md explains each one):

- no symlink is followed below the *anchor* (the workspace), the root included; a root outside
  the anchor (a configured extra folder) is trusted down to its parent;
- only regular files with exactly one hard link, on the root's device, are served or written;
- discovery never enters a mount point below a root, `SKIP_DIRS` folders or virtualenvs, and
  stops at `MAX_DEPTH` (deeper folders are reported);
- an append is all-or-nothing: a short write is cut back before `MemoryWriteFailed` is raised.

Private state (`_state`) is created 0700/0600 whatever the umask. Refusals raise
`PathNotAllowed`; failed reads `MemoryReadFailed`, appends `MemoryWriteFailed`, state files
`StateError`/`StateReadOnly`; no raw `OSError` escapes. POSIX only (Linux, macOS).
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
from ._walk import Found, Skipped, Walk, walk
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
    "walk",
    "wipe_folder",
    "write_private_atomic",
]
