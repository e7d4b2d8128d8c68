"""A benchmark's scratch folder: its indexes and workspaces, removed when it is done."""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def scratch_folder(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A new folder in the temp folder, removed afterwards (a failed run's too) unless `keep`:
    a 10k-chunk run leaves hundreds of MB of indexes, and repeated runs filled the disk."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        if keep:
            print(f"scratch folder kept: {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
