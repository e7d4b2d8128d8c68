"""Progress of `memoryd index`: a rate and an ETA from the first batch, plain lines off a terminal."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_support import run_memoryd
from embedding_servers import FakeOpenAI, serve
from memoryd.progress import ProgressReporter, describe, format_duration


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (42.4, "42s"), (59.6, "1m00s"), (185, "3m05s"), (3720, "1h02m"), (-3, "0s")],
)
def test_durations_read_short(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown


@pytest.mark.parametrize(
    ("phase", "done", "total", "elapsed", "line"),
    [
        ("vectors", 0, 268, 0.0, "embedding 0/268 chunks (0%), starting"),
        ("vectors", 48, 268, 30.0, "embedding 48/268 chunks (17%), 1.6 chunks/s, ETA 2m18s"),
        (
            "vectors",
            268,
            268,
            100.0,
            "embedding 268/268 chunks (100%), 2.7 chunks/s, done in 1m40s",
        ),
        ("files", 3, 10, 1.0, "scanning 3/10 files (30%), 3.0 files/s, ETA 2s"),
        ("other", 1, 0, 1.0, "other 1/0 items, 1.0 items/s, done in 1s"),
    ],
)
def test_a_plain_line_says_done_total_rate_and_eta(
    phase: str, done: int, total: int, elapsed: float, line: str
) -> None:
    assert describe(phase, done, total, elapsed) == line


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_one_line_every_interval_and_one_at_the_end() -> None:
    out, clock = io.StringIO(), Clock()
    with ProgressReporter(stream=out, tty=False, clock=clock) as p:
        p("vectors", 0, 64)  # the phase starts: shown at once
        for done in range(2, 64, 2):
            clock.now += 1.0
            p("vectors", done, 64)
        clock.now += 1.0
        p("vectors", 64, 64)
        p("vectors", 64, 64)  # a repeated end is not printed twice
    printed = out.getvalue().splitlines()
    assert all(line.startswith("memoryd index: ") for line in printed)
    lines = [line.removeprefix("memoryd index: ") for line in printed]
    assert lines[0] == "embedding 0/64 chunks (0%), starting"
    assert lines[1].startswith("embedding 10/64 chunks (15%), 2.0 chunks/s, ETA ")
    assert lines[-1] == "embedding 64/64 chunks (100%), 2.0 chunks/s, done in 32s"
    # 32 s of work, one line per 5 s, plus the first and the last
    assert len(lines) == 1 + 6 + 1


def test_on_a_terminal_the_bar_carries_rate_and_eta_from_the_first_batch() -> None:
    clock = Clock()
    with ProgressReporter(stream=io.StringIO(), tty=True, clock=clock) as p:
        p("vectors", 0, 100)
        clock.now += 4.0
        p("vectors", 2, 100)
        assert p._bar is not None
        task = p._bar.tasks[0]
        assert task.completed == 2
        assert task.description == "embedding 2/100 chunks (2%), 0.5 chunks/s, ETA 3m16s"
    assert p._bar is None


@pytest.fixture
def openai_base() -> Iterator[str]:
    with serve(FakeOpenAI(key="sk-test")) as root:
        yield f"{root}/v1"


def test_a_piped_index_prints_progress_lines_to_stderr_and_only_json_to_stdout(
    tmp_path: Path, openai_base: str
) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for day in range(1, 8):
        (ws / "memory" / f"2026-11-0{day}.md").write_text(
            f"# 2026-11-0{day}\n\nDay {day}: the release train left on time.\n"
        )
    cfg = tmp_path / "memoryd.toml"
    cfg.write_text(
        "[agents.defaults.memorySearch]\n"
        'provider = "openai"\nmodel = "text-embedding-3-small"\n'
        f'remote = {{ baseUrl = "{openai_base}", apiKey = "sk-test" }}\n'
    )
    env = {
        **os.environ,
        "MEMORYD_CONFIG": str(cfg),
        "MEMORYD_STATE_DIR": str(tmp_path / "state"),
        "MEMORYD_NO_SERVER": "1",
    }
    proc = run_memoryd(["index", "--workspace", str(ws), "--json"], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["vectorsEmbedded"] == 7
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("memoryd index: embedding")]
    assert lines[0] == "memoryd index: embedding 0/7 chunks (0%), starting"
    assert lines[-1].startswith("memoryd index: embedding 7/7 chunks (100%)")
    assert "done in" in lines[-1]


def test_a_first_search_on_a_never_indexed_workspace_answers_by_keywords_without_waiting(
    tmp_path: Path,
) -> None:
    """First contact: 200 notes, nothing indexed, an embedding API that takes 60 s per batch.

    The one-off search answers from the keyword side within its `searchWaitMs` budget and says
    that vectors are still being built and how to finish them; it does not wait for a batch.
    """
    api = FakeOpenAI(key="sk-test")
    # documents (the notes) are slow to embed; the query is not
    api.delay = lambda body: 60.0 if any("Day " in t for t in body.get("input", [])) else 0.0
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for n in range(200):
        (ws / "memory" / f"note-{n:03d}.md").write_text(
            f"# Note {n}\n\nDay {n}: the release train left on time, carriage {n}.\n"
        )
    (ws / "memory" / "note-042.md").write_text("# Note 42\n\nDay 42: the pelican ate the budget.\n")
    with serve(api) as root:
        cfg = tmp_path / "memoryd.toml"
        cfg.write_text(
            "[agents.defaults.memorySearch]\n"
            'provider = "openai"\nmodel = "text-embedding-3-small"\n'
            f'remote = {{ baseUrl = "{root}/v1", apiKey = "sk-test" }}\n'
            "[agents.defaults.memorySearch.sync]\nsearchWaitMs = 1000\n"
        )
        env = {
            **os.environ,
            "MEMORYD_CONFIG": str(cfg),
            "MEMORYD_STATE_DIR": str(tmp_path / "state"),
            "MEMORYD_NO_SERVER": "1",
        }
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "memoryd",
                "search",
                "--json",
                "--workspace",
                str(ws),
                "pelican",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=40,  # far below one 60 s batch
        )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [r["path"] for r in out["results"]][:1] == ["memory/note-042.md"]
    waiting = [n for n in out["notes"] if "waiting for embeddings" in n]
    assert waiting and "memoryd index" in waiting[0] and "memoryd serve" in waiting[0]
    assert int(waiting[0].split()[0]) >= 199  # nothing was embedded: the batch never came back
