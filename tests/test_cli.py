"""The CLI: thin over the library, JSON-only stdout with --json, one-line errors with exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.cli import main


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / "MEMORY.md").write_text("# Memory\nThe deploy target is fly.io.\nSecond line.\n")
    (workspace / "memory" / "2026-11-29.md").write_text(
        "# 2026-11-29\nRotated the webhook secret today.\n"
    )
    return workspace


@pytest.fixture
def keyword_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cfg = tmp_path / "memoryd.toml"
    cfg.write_text('[agents.defaults.memorySearch]\nprovider = "none"\n')
    monkeypatch.setenv("MEMORYD_CONFIG", str(cfg))
    return cfg


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_search_text_output(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(capsys, "search", "--workspace", str(ws), "webhook secret")
    assert rc == 0
    header, blank, first = out.splitlines()[:3]
    assert header == "1 result · builtin backend · keyword search · no embeddings" and blank == ""
    score, where = first.split(" ", 1)
    assert float(score) > 0 and where == "memory/2026-11-29.md:1-2"
    assert "Rotated the webhook secret" in out


def test_search_no_matches(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(capsys, "search", "--workspace", str(ws), "xylophone")
    assert rc == 0 and out.strip().startswith("no matches · builtin backend")


def test_search_json_is_json_only(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(
        capsys, "search", "--workspace", str(ws), "--json", "--max-results", "1", "deploy target"
    )
    data = json.loads(out)
    assert rc == 0 and data["backend"] == "builtin" and len(data["results"]) == 1
    assert set(data["results"][0]) >= {"path", "startLine", "endLine", "score", "snippet", "source"}


def test_session_key_applies_scope_and_citations(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(
        capsys,
        "search",
        "--workspace",
        str(ws),
        "--json",
        "deploy",
        "--session-key",
        "agent:main:discord:group:c1",
    )
    assert json.loads(out)["scopeDenied"] is True
    _, out, _ = run(
        capsys,
        "search",
        "--workspace",
        str(ws),
        "--json",
        "deploy",
        "--session-key",
        "agent:main:slack:direct:u1",
    )
    first = json.loads(out)["results"][0]
    assert first["citation"] == "MEMORY.md#L1-L3" and first["snippet"].endswith(
        "Source: MEMORY.md#L1-L3"
    )


def test_get_and_slices(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        capsys, "get", "--workspace", str(ws), "MEMORY.md", "--from", "2", "--lines", "1"
    )
    assert rc == 0 and out == "The deploy target is fly.io.\n"
    rc, out, _ = run(capsys, "get", "--workspace", str(ws), "--json", "memory/missing.md")
    assert json.loads(out) == {"path": "memory/missing.md", "text": "", "missing": True}
    # a person at a terminal is told why nothing was printed (the tool's answer stays empty)
    rc, out, err = run(capsys, "get", "--workspace", str(ws), "memory/missing.md")
    assert rc == 0 and out == "" and "does not exist yet" in err
    rc, out, err = run(capsys, "get", "--workspace", str(ws), "MEMORY.md", "--from", "999")
    assert rc == 0 and out == "" and "past the end" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["get", "../etc/passwd.md"], "escapes the workspace"),
        (["get", "notes.txt"], "not a Markdown"),
        (["search", "   "], "query must not be empty"),
    ],
)
def test_invalid_input_is_one_line_and_exit_2(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    rc, out, err = run(capsys, *argv[:1], "--workspace", str(ws), *argv[1:])
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("memoryd: error:") and message in err


def test_missing_workspace_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rc, _, err = run(capsys, "search", "x")
    assert rc == 1 and "--workspace" in err and "Traceback" not in err


def test_bad_config_error(tmp_path: Path, ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[memory]\nbackend = 'elastic'\n")
    rc, _, err = run(capsys, "status", "--workspace", str(ws), "--config", str(cfg))
    assert rc == 1 and "memory.backend" in err


def test_index_and_status_json(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(capsys, "index", "--workspace", str(ws), "--json")
    data = json.loads(out)
    assert rc == 0 and data["files"] == 2 and data["chunks"] == 2
    rc, out, _ = run(capsys, "index", "--workspace", str(ws), "--force", "--json")
    assert json.loads(out)["reindexed"] is True
    rc, out, _ = run(capsys, "status", "--workspace", str(ws), "--json")
    st = json.loads(out)
    assert st["backend"] == "builtin" and st["provider"] == "none" and st["files"] == 2
    assert st["builtin"]["fts"]["available"] is True and isinstance(st["issues"], list)


def test_cli_as_a_real_process(ws: Path, keyword_only: Path) -> None:
    env = {**os.environ}
    proc = subprocess.run(
        [sys.executable, "-m", "memoryd", "search", "--json", "--workspace", str(ws), "deploy"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"]
    bad = subprocess.run(
        [sys.executable, "-m", "memoryd", "get", "--workspace", str(ws), "/etc/passwd"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr  # invalid input: 2
    usage = subprocess.run(
        [sys.executable, "-m", "memoryd", "search"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert usage.returncode == 2


def test_a_keyword_only_search_loads_neither_numpy_nor_the_transcript_parser(
    ws: Path, keyword_only: Path
) -> None:
    """numpy is a third of a cold keyword-only search, the transcript parser and the redactor
    (their regexes) ~15 ms more; nothing on a memory-only keyword search needs them."""
    probe = (
        "import sys\n"
        "from memoryd.cli import main\n"
        f"rc = main(['search', '--json', '--workspace', {str(ws)!r}, 'deploy'])\n"
        "np = sys.modules.get('numpy')\n"
        "loaded = ['numpy'] if np is not None and type(np).__name__ != '_LazyModule' else []\n"
        "loaded += [m for m in ('memoryd.core.transcripts', 'memoryd.core.redact') "
        "if m in sys.modules]\n"
        "print('loaded:', *loaded, file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=os.environ
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"]
    assert proc.stderr.strip().splitlines()[-1] == "loaded:", proc.stderr
