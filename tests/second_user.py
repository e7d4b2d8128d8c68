"""Acting as a second local user (`nobody`) beside the one running the tests.

CI runs as root, so a test can drop to `nobody` in a forked child (`as_nobody`). Without root
that is not possible and such tests skip, saying so.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root to act as another user (nobody)")


def nobody() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


def make_shared_base() -> Iterator[Path]:
    """A folder every local user may traverse (pytest's own tmp folder is 0700): the body of
    conftest's `shared_base` fixture."""
    base = Path(tempfile.mkdtemp(prefix="memoryd-2nd-user-"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_nobody(call: Callable[[], object]) -> str:
    """Run `call` in a forked child that dropped to `nobody`: what it returned when that is a
    string, else "ok"; or the exception's `Type:code` (a MemorydError's code, else the errno).

    The child forks from the test process, so it needs nothing that `nobody` cannot reach
    (pytest's interpreter may live in a private home)."""
    user = nobody()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            result = call()
            answer = result if isinstance(result, str) else "ok"
        except BaseException as err:
            answer = (
                f"{type(err).__name__}:{getattr(err, 'code', None) or getattr(err, 'errno', '')}"
            )
        os.write(write_end, answer.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        answer_bytes = fh.read()
    os.waitpid(pid, 0)
    return answer_bytes.decode()
