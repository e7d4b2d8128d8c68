"""The README's Python example runs as written, on an empty state dir (the fixture's), with the
default local model: it finds the demo's webhook note first and says so when it finds nothing.
(docs/lifecycle.md's example is run by test_lifecycle_docs.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def service_example() -> str:
    (code,) = [b for b in python_blocks() if "with MemoryService" in b]
    return code


def run(code: str, name: str) -> None:
    exec(compile(code, str(README), "exec"), {"__name__": name})


@pytest.mark.timeout(120)
def test_the_service_example_finds_the_webhook_note_first_on_an_empty_state_dir(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not isolated_env.exists()  # nothing indexed yet
    monkeypatch.chdir(ROOT)  # the example names the demo workspace relative to the checkout
    run(service_example(), "readme_service")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(" memory/2026-11-29.md:1-5"), lines
    assert "builtin hybrid local" in lines, lines
    assert "# Long-term memory" in lines


@pytest.mark.timeout(120)
def test_the_service_example_says_when_it_finds_nothing(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (workspace / "MEMORY.md").write_text("# Long-term memory\n\n- Rod runs the platform team.\n")
    code = service_example().replace('"demo/workspace"', repr(str(workspace)))
    run(code, "readme_service")
    out = capsys.readouterr().out
    assert out.startswith("nothing found"), out
