"""One-off commands without an event loop (`memoryd.inline`): the same answers as on the loop,
no loop started, no asyncio imported, and a clean hand-over to the loop for what needs one."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from embedding_servers import FakeOpenAI, serve
from memoryd import cli, inline
from memoryd.cli import main

# --------------------------------------------------------------------------- the primitives


def test_run_returns_what_the_coroutine_returns_and_routes_the_primitives() -> None:
    lock = inline.Lock()
    seen: list[str] = []

    async def work(x: int) -> int:
        assert inline.active()
        async with lock.held():
            with inline.move_on_after(0.001), inline.shielded():
                y = await inline.run_sync(lambda: x * 2)
        seen.append("done")
        return y

    assert inline.run(work, 21) == 42 and seen == ["done"]
    assert not inline.active()  # reset after the run


def test_a_coroutine_that_needs_a_loop_is_refused_not_hung() -> None:
    async def sleeps() -> None:
        await anyio.sleep(0)  # anyio with no loop running: not routed here

    async def suspends() -> None:
        import asyncio

        await asyncio.sleep(0)  # a bare yield: the coroutine would wait for a loop

    for fn in (sleeps, suspends):
        with pytest.raises(inline.NeedsEventLoop):
            inline.run(fn)
        assert not inline.active()


def test_require_refuses_only_inside_run() -> None:
    inline.require(False, "outside run: no effect")

    async def refused() -> None:
        inline.require(False, "the qmd backend runs on an event loop")

    with pytest.raises(inline.NeedsEventLoop, match="qmd backend"):
        inline.run(refused)


def test_a_deadline_scope_catches_its_own_deadline_like_a_cancel_scope() -> None:
    """Inside `run`, `move_on_after` sets `deadline()`; work that finds it passed raises
    `DeadlinePassed`, which `except Exception` does not swallow (as with anyio's cancellation)
    and the scope that set it catches, reporting `cancelled_caught`."""

    def until_the_deadline() -> None:
        while True:
            when = inline.deadline()
            assert when is not None
            if time.monotonic() >= when:
                raise inline.DeadlinePassed

    async def work() -> tuple[bool, bool, float | None, bool]:
        with inline.move_on_after(0.01) as scope:
            try:
                await inline.run_sync(until_the_deadline)
            except Exception:
                pytest.fail("a deadline must not look like a provider failure")
            pytest.fail("the deadline was not reached")
        with inline.move_on_after(None) as unbounded:
            none_set = inline.deadline()
        return scope.cancelled_caught, unbounded.cancelled_caught, none_set, inline.active()

    assert inline.run(work) == (True, False, None, True)
    assert inline.deadline() is None  # and none outside `run`


def test_an_outer_deadline_is_caught_by_the_outer_scope() -> None:
    async def work() -> tuple[bool, bool]:
        with inline.move_on_after(0.01) as outer, inline.move_on_after(60) as inner:
            assert inline.deadline() == outer.deadline  # the nearer of the two
            time.sleep(0.02)
            raise inline.DeadlinePassed
        return outer.cancelled_caught, inner.cancelled_caught

    assert inline.run(work) == (True, False)


def test_on_a_loop_the_primitives_are_anyios() -> None:
    lock = inline.Lock()

    async def body() -> tuple[bool, bool]:
        assert not inline.active()
        with inline.move_on_after(0.01):
            await anyio.sleep(5)  # cancelled by the scope, as anyio.move_on_after does
        async with lock.held():
            held = lock.locked()
        return held, lock.locked()

    assert anyio.run(body) == (True, False)


# --------------------------------------------------------------------------- the CLI


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / "MEMORY.md").write_text(
        "# Memory\n- Production deploys go to fly.io, region ams.\n- Postgres is 16.4.\n"
    )
    (workspace / "memory" / "2026-11-25.md").write_text(
        "# 2026-11-25\n- Rotated the webhook secret; the old one stops working on Dec 2.\n"
    )
    return workspace


def config(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


KEYWORD = '[agents.defaults.memorySearch]\nprovider = "none"\n'


class LoopWatch:
    """Counts `anyio.run` calls of the CLI (an inline command must not start a loop)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = cli.anyio.run

        def counted(fn: Callable[..., Any], *args: Any) -> Any:
            self.calls += 1
            return real(fn, *args)

        monkeypatch.setattr(cli.anyio, "run", counted)


def use_mode(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str) -> Path:
    """Run the next commands `inline` or on the `loop`, with that mode's own state folder."""
    state = tmp_path / f"state-{mode}"
    monkeypatch.setenv("MEMORYD_STATE_DIR", str(state))
    if mode == "loop":
        monkeypatch.setenv("MEMORYD_NO_INLINE", "1")
    else:
        monkeypatch.delenv("MEMORYD_NO_INLINE", raising=False)
    return state


def kitten_steps(
    ws: Path, base: list[str], pet_query: str, first_query: str
) -> tuple[Callable[[], list[str]], Callable[[], list[str]]]:
    """(edit, reset): a note written between two searches (the index is then behind), and
    the first search with that note removed again."""
    note = ws / "memory" / "2026-11-26.md"

    def edit() -> list[str]:
        note.write_text("# 2026-11-26\n- Alice adopted a grey kitten named Miso.\n")
        return ["search", "--json", *base, pet_query]

    def reset() -> list[str]:
        note.unlink(missing_ok=True)
        return ["search", "--json", *base, first_query]

    return edit, reset


def run_both(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    steps: list[Callable[[], list[str]]],
) -> tuple[list[tuple[int, str]], list[tuple[int, str]], LoopWatch]:
    """Every step's (exit status, stdout) inline and on the loop, each mode with its own state
    folder; `steps` may change the workspace between commands (done once per mode)."""
    watch = LoopWatch(monkeypatch)
    out: dict[str, list[tuple[int, str]]] = {}
    for mode in ("loop", "inline"):
        state = use_mode(monkeypatch, tmp_path, mode)
        before = watch.calls
        answers = []
        for step in steps:
            rc = main(step())
            text, _ = capsys.readouterr()
            answers.append((rc, text.replace(str(state), "<state>")))
        if mode == "inline":
            assert watch.calls == before, "an inline command fell back to the event loop"
        out[mode] = answers
    return out["inline"], out["loop"], watch


def test_search_get_context_answer_exactly_as_on_the_loop(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = str(config(tmp_path, "kw.toml", KEYWORD))
    rechunked = str(
        config(tmp_path, "kw-200.toml", KEYWORD + "chunking = { tokens = 200, overlap = 20 }\n")
    )
    base = ["--config", cfg, "--workspace", str(ws)]
    edit, reset = kitten_steps(ws, base, "who adopted a kitten", "webhook secret")

    steps: list[Callable[[], list[str]]] = [
        reset,  # never indexed: the search syncs first
        lambda: ["search", "--json", *base, "when does the old webhook secret stop working"],
        lambda: ["search", *base, "where do we deploy production"],  # text output
        edit,
        lambda: ["search", "--json", *base, "xyzzy"],  # nothing relevant: []
        lambda: ["search", "--json", *base, "--max-results", "1", "postgres 16.4"],
        lambda: ["search", "--json", *base, "--session-key", "agent:main:slack:group:c1", "x"],
        lambda: ["search", "--json", *base, ""],  # invalid input
        lambda: ["search", "--json", *base, "--agent", "../../x", "webhook"],
        lambda: ["search", "--json", "--config", rechunked, "--workspace", str(ws), "webhook"],
        lambda: ["get", "--json", *base, "MEMORY.md", "--from", "2", "--lines", "1"],
        lambda: ["get", *base, "memory/2026-11-25.md"],
        lambda: ["get", "--json", *base, "../../etc/passwd"],
        lambda: ["get", "--json", *base, "memory/2099-01-01.md"],
        lambda: ["context", "--json", *base],
        lambda: ["context", *base, "--session-key", "agent:main:main"],
    ]
    inline_answers, loop_answers, _ = run_both(capsys, monkeypatch, tmp_path, steps)
    assert inline_answers == loop_answers
    # and the answers are the real ones, not two identical failures
    found = json.loads(inline_answers[1][1])
    assert found["results"][0]["path"] == "memory/2026-11-25.md"
    assert json.loads(inline_answers[3][1])["results"][0]["path"] == "memory/2026-11-26.md"
    assert json.loads(inline_answers[4][1])["results"] == []
    assert [rc for rc, _ in inline_answers[7:9]] == [2, 2]
    assert (
        json.loads(inline_answers[10][1])["text"]
        == "- Production deploys go to fly.io, region ams.\n"
    )


def test_get_and_context_need_no_loop_and_no_model_whatever_the_provider(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a memory file or the session context embeds nothing: with the default local
    model configured they still run inline, answer as on the loop, and never build the index."""
    cfg = str(
        config(tmp_path, "local.toml", '[agents.defaults.memorySearch]\nprovider = "local"\n')
    )
    base = ["--config", cfg, "--workspace", str(ws)]
    steps: list[Callable[[], list[str]]] = [
        lambda: ["get", "--json", *base, "MEMORY.md", "--from", "2", "--lines", "1"],
        lambda: ["get", "--json", *base, "../../etc/passwd"],
        lambda: ["context", "--json", *base],
    ]
    inline_answers, loop_answers, _ = run_both(capsys, monkeypatch, tmp_path, steps)
    assert inline_answers == loop_answers
    assert (
        json.loads(inline_answers[0][1])["text"]
        == "- Production deploys go to fly.io, region ams.\n"
    )
    assert json.loads(inline_answers[1][1])["code"] == "path_not_allowed"


def test_a_hybrid_search_with_the_local_model_answers_exactly_as_on_the_loop(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default local model embeds without a loop too: the first search's vectors (with a
    budget that lets them all finish, so both modes embed the same chunks), each query, the
    calibration's reference queries, and a note changed between two searches."""
    cfg = str(
        config(
            tmp_path,
            "hybrid.toml",
            LOCAL + "[agents.defaults.memorySearch.sync]\nsearchWaitMs = 120000\n",
        )
    )
    base = ["--config", cfg, "--workspace", str(ws)]
    edit, reset = kitten_steps(
        ws, base, "who has a new pet", "when does the old webhook secret stop working"
    )

    steps: list[Callable[[], list[str]]] = [
        reset,  # never indexed: the search syncs and embeds first
        lambda: ["search", *base, "where do we deploy production"],  # text output
        edit,
        lambda: ["search", "--json", *base, "xyzzy"],
        lambda: ["search", "--json", *base, "我们把生产环境部署到哪里？"],  # vectors alone
        lambda: ["search", "--json", *base, "--max-results", "1", "postgres 16.4"],
    ]
    inline_answers, loop_answers, _ = run_both(capsys, monkeypatch, tmp_path, steps)
    assert inline_answers == loop_answers
    first = json.loads(inline_answers[0][1])
    assert (first["mode"], first["provider"], first["notes"]) == ("hybrid", "local", [])
    assert first["results"][0]["path"] == "memory/2026-11-25.md"
    assert json.loads(inline_answers[2][1])["results"][0]["path"] == "memory/2026-11-26.md"
    assert "MEMORY.md:1-3" in inline_answers[1][1]


@pytest.mark.parametrize("mode", ["inline", "loop"])
def test_the_local_model_stops_at_a_search_budget_within_a_batch(
    workspace: Path, mode: str
) -> None:
    """A budgeted batch is sized by the measured rate; when that estimate is far off (set here
    to 2,000 chunks/s, so the 16 chunks are one batch taking seconds), the deadline still stops
    the real model mid-batch, inline (its yield points check `inline.deadline()`) as on a loop
    (the cancel scope, then the cancel event): nothing half-done is written, the rate is
    corrected, and the chunks stay pending for the next sync."""
    from helpers import agent_for, index_for, write
    from memoryd.embeddings.local import LocalE5Provider

    words = "the ferry to the island leaves at dawn and the harbour master logs every crossing"
    for i in range(16):
        write(workspace / "memory" / f"2026-01-{i + 1:02d}.md", f"# day {i}\n{words} {i}. " * 20)
    provider = LocalE5Provider()
    provider.load()  # the deadline falls inside the forward passes, not the model load
    idx = index_for(agent_for(workspace), provider)
    key = (provider.id, provider.model, provider.fingerprint())
    idx._embed_rates[key] = 0.0005
    sync = functools.partial(idx.sync, embed_budget_s=0.3)
    report = inline.run(sync) if mode == "inline" else anyio.run(sync)
    try:
        assert report.vectors_embedded == 0
        assert report.vectors_pending == idx.store.counts()["chunks"] >= 16
        assert idx._embed_rates[key] > 10 * 0.0005  # the next budget trusts a truer rate
    finally:
        anyio.run(idx.aclose)


REMOTE = (
    '[agents.defaults.memorySearch]\nprovider = "openai"\n'
    '[agents.defaults.memorySearch.remote]\napiKey = "test-key"\nbaseUrl = "{root}/v1"\n'
)


@pytest.mark.parametrize(
    ("why", "body"),
    [
        ("a remote embedding provider", REMOTE),
        (
            "the qmd backend",
            '[memory]\nbackend = "qmd"\n[memory.qmd]\ncommand = "/nonexistent/qmd"\n' + KEYWORD,
        ),
    ],
)
def test_what_needs_a_loop_runs_on_one_and_answers(
    ws: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    why: str,
    body: str,
) -> None:
    watch = LoopWatch(monkeypatch)
    with serve(FakeOpenAI()) as root:  # a real HTTP server speaking OpenAI's wire format
        cfg = config(tmp_path, "c.toml", body.replace("{root}", root))
        rc = main(["search", "--json", "--config", str(cfg), "--workspace", str(ws), "webhook"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["results"][0]["path"] == "memory/2026-11-25.md", (why, out)
    assert out["backend"] == "builtin"
    assert watch.calls == 1  # refused before any work, then run on the loop once
    if "remote" in why:
        assert out["provider"] == "openai" and out["mode"] == "hybrid"


IMPORTS = """
import sys
from memoryd.cli import main
code = main(sys.argv[1:])
loaded = (
    "asyncio", "anyio._core._eventloop", "anyio._backends._asyncio", "pydantic", "numpy._core",
    "numpy.core", "onnxruntime",
)
print(sorted(m for m in loaded if m in sys.modules), file=sys.stderr)
sys.exit(code)
"""


LOCAL = '[agents.defaults.memorySearch]\nprovider = "local"\n'


@pytest.mark.parametrize(
    ("argv", "body"),
    [
        (["search", "--json", "webhook secret"], KEYWORD),
        (["get", "--json", "MEMORY.md"], KEYWORD),
        (["context", "--json"], KEYWORD),
        (["get", "--json", "MEMORY.md"], LOCAL),
        (["context", "--json"], LOCAL),
        (["search", "--json", "webhook secret"], LOCAL),
        (["append", "--json", "- Decided: ship on Friday."], LOCAL),
    ],
)
def test_a_one_off_command_never_imports_asyncio(
    ws: Path, tmp_path: Path, isolated_env: Path, argv: list[str], body: str
) -> None:
    """What the module is for (60-80 ms of imports per command), checked in a fresh
    interpreter through `sys.modules` after a real command, its config cached or not; with the
    local model configured, `get` and `context` do not load numpy (~0.15 s) either; a first
    hybrid search loads it (the index is built then: the documents' model runs on numpy), the
    second not (its cosines run in SQL, `tests/test_lean_search.py`); never a loop, nor
    onnxruntime (its query encoder is for long-lived processes); anyio's own modules never run
    either (it is imported lazily, ~7-11 ms)."""
    cfg = config(tmp_path, "c.toml", body)
    env = {**os.environ, "MEMORYD_NO_SERVER": "1"}
    embeds = argv[0] == "search" and body == LOCAL
    for run in range(2):  # first validates the config (pydantic), then from the cache
        proc = subprocess.run(
            [sys.executable, "-c", IMPORTS, *argv, "--config", str(cfg), "--workspace", str(ws)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        json.loads(proc.stdout)
        loaded = json.loads(proc.stderr.strip().splitlines()[-1].replace("'", '"'))
        assert "asyncio" not in loaded and "anyio._backends._asyncio" not in loaded
        assert "anyio._core._eventloop" not in loaded  # anyio itself never ran
        if run == 0 and embeds:
            assert "numpy._core" in loaded  # the first search embedded the notes
    # the second run: neither the loop nor the validator, nor numpy
    assert loaded == []


def test_append_answers_and_writes_exactly_as_on_the_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = LoopWatch(monkeypatch)
    seen: dict[str, tuple[list[tuple[int, str]], dict[str, str]]] = {}
    for mode in ("loop", "inline"):
        ws = tmp_path / mode
        (ws / "memory").mkdir(parents=True)
        use_mode(monkeypatch, tmp_path, mode)
        before = watch.calls
        answers = []
        for argv in (
            ["append", "--json", "--workspace", str(ws), "- Decided: ship on Friday."],
            ["append", "--workspace", str(ws), "- And the retro on Monday."],
            ["append", "--json", "--workspace", str(ws), "--target", "long-term", "- Prod: ams"],
            ["append", "--json", "--workspace", str(ws), "   "],  # invalid: nothing written
            ["append", "--json", "--workspace", str(ws), "--agent", "../x", "y"],
        ):
            rc = main(argv)
            answers.append((rc, capsys.readouterr().out))
        if mode == "inline":
            assert watch.calls == before, "an inline append fell back to the event loop"
        files = {
            str(p.relative_to(ws)): p.read_text() for p in sorted(ws.rglob("*.md")) if p.is_file()
        }
        seen[mode] = (answers, files)
    assert seen["inline"] == seen["loop"]
    answers, files = seen["inline"]
    assert [rc for rc, _ in answers] == [0, 0, 0, 2, 2]
    assert files["MEMORY.md"].endswith("- Prod: ams\n")
    assert len(files) == 2


def test_a_write_that_stops_part_way_inline_is_not_run_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search or read may be run a second time on the loop; an append must not: if one
    ever suspended after writing, the CLI says so instead of writing twice."""
    import asyncio

    target = tmp_path / "log.md"
    watch = LoopWatch(monkeypatch)

    async def appends_then_suspends(args: Any) -> int:
        with target.open("a") as fh:
            fh.write("one line\n")
        await asyncio.sleep(0)  # a bare yield: the coroutine would wait for a loop
        return 0

    monkeypatch.setitem(cli.COMMANDS, "append", appends_then_suspends)
    monkeypatch.delenv("MEMORYD_NO_INLINE", raising=False)
    rc = main(["append", "--workspace", str(tmp_path), "x"])
    assert rc == 1 and "stopped part-way" in capsys.readouterr().err
    assert target.read_text() == "one line\n" and watch.calls == 0
