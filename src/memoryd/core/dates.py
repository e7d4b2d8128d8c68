"""The date a daily note's file name carries; ranking decays by it, paging sorts by it."""

from __future__ import annotations

import re
from datetime import date
from typing import Final

_DATED: Final = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})(?:[-_.][^/]*)?\.md$")


def note_date(path: str) -> date | None:
    """The date in a daily-note file name (`memory/2026-01-15.md`, `…-slug.md`), else None."""
    match = _DATED.search(path)
    if not match:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None
