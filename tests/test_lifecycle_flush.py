"""Pre-compaction flush: the threshold rule, once per compaction cycle (across restarts and
processes), read-only skips, the sessions.json file, and NO_REPLY recognition."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from memoryd.config import (
    DEFAULT_FLUSH_PROMPT,
    DEFAULT_FLUSH_SYSTEM_PROMPT,
    ResolvedAgent,
    resolve_agent,
    validate_config,
)
from memoryd.core.transcripts import is_no_reply
from memoryd.errors import InvalidInput
from memoryd.lifecycle.flush import check_flush

WINDOW = 200_000
# default reserveTokensFloor 20000 + softThresholdTokens 4000
THRESHOLD = WINDOW - 20_000 - 4_000


def agent_for(
    ws: Path, *, access: str = "rw", compaction: dict[str, Any] | None = None
) -> ResolvedAgent:
    defaults: dict[str, Any] = {"workspaceAccess": access}
    if compaction is not None:
        defaults["compaction"] = compaction
    return resolve_agent(validate_config({"agents": {"defaults": defaults}}), "main", workspace=ws)


def flush_file(ws: Path) -> Path:
    """Where the flush records of (main, ws) live: the workspace's own state folder."""
    return agent_for(ws).state.flush_state


def check(
    agent: ResolvedAgent, estimate: int, *, key: str = "agent:main:main", cycle: int = 0, **kw: Any
) -> Any:
    return check_flush(
        agent, key, token_estimate=estimate, context_window=WINDOW, compaction_count=cycle, **kw
    )


@pytest.mark.parametrize(
    ("estimate", "run", "reason"),
    [
        (0, False, "no_token_estimate"),
        (THRESHOLD - 1, False, "below_threshold"),
        # OpenClaw runs the flush once the estimate *reaches* the threshold (`>=`)
        (THRESHOLD, True, "due"),
        (THRESHOLD + 1, True, "due"),
        (WINDOW, True, "due"),
    ],
)
def test_runs_only_when_the_estimate_exceeds_window_minus_floor_minus_soft_threshold(
    workspace: Path, estimate: int, run: bool, reason: str
) -> None:
    decision = check(agent_for(workspace), estimate)
    assert (decision.run, decision.reason) == (run, reason)
    assert decision.threshold == THRESHOLD


def test_a_due_decision_carries_the_default_prompts(workspace: Path) -> None:
    decision = check(agent_for(workspace), THRESHOLD + 1)
    assert decision.system_prompt == DEFAULT_FLUSH_SYSTEM_PROMPT
    assert decision.prompt == DEFAULT_FLUSH_PROMPT
    assert "NO_REPLY" in decision.prompt
    assert decision.model is None
    assert decision.to_dict()["systemPrompt"] == DEFAULT_FLUSH_SYSTEM_PROMPT


def test_configured_thresholds_and_prompts_are_used(workspace: Path) -> None:
    agent = agent_for(
        workspace,
        compaction={
            "reserveTokensFloor": 1000,
            "memoryFlush": {
                "softThresholdTokens": 500,
                "systemPrompt": "SYS",
                "prompt": "Write it down.",
                "model": "small-model",
            },
        },
    )
    d = check_flush(agent, "main", token_estimate=8_501, context_window=10_000, compaction_count=0)
    assert d.threshold == 8_500
    assert (d.run, d.system_prompt, d.prompt, d.model) == (
        True,
        "SYS",
        "Write it down.",
        "small-model",
    )


def test_disabled_flush_never_runs(workspace: Path) -> None:
    agent = agent_for(workspace, compaction={"memoryFlush": {"enabled": False}})
    assert check(agent, WINDOW).reason == "disabled"


@pytest.mark.parametrize("access", ["ro", "none"])
def test_read_only_workspaces_skip_the_flush_and_record_nothing(
    workspace: Path, access: str, isolated_env: Path
) -> None:
    decision = check(agent_for(workspace, access=access), WINDOW)
    assert (decision.run, decision.reason) == (False, "read_only_workspace")
    assert not (flush_file(workspace)).exists()


def test_window_smaller_than_the_reserve_never_runs(workspace: Path) -> None:
    d = check_flush(
        agent_for(workspace),
        "main",
        token_estimate=20_000,
        context_window=20_000,
        compaction_count=0,
    )
    assert d.reason == "window_too_small"


def test_negative_inputs_are_rejected(workspace: Path) -> None:
    with pytest.raises(InvalidInput):
        check(agent_for(workspace), -1)


def test_runs_at_most_once_per_compaction_cycle(workspace: Path) -> None:
    agent = agent_for(workspace)
    first = check(agent, THRESHOLD + 10, cycle=0)
    assert first.run and first.recorded
    again = check(agent, THRESHOLD + 500, cycle=0)
    assert (again.run, again.reason) == (False, "already_flushed")
    next_cycle = check(agent, THRESHOLD + 10, cycle=1)
    assert next_cycle.run


def test_the_once_per_cycle_record_survives_a_restart(workspace: Path, isolated_env: Path) -> None:
    agent = agent_for(workspace)
    assert check(agent, WINDOW, cycle=3).run
    # a new process: nothing cached in memory, only sessions.json
    code = (
        "from pathlib import Path; import sys\n"
        "from memoryd.config import resolve_agent, validate_config\n"
        "from memoryd.lifecycle.flush import check_flush\n"
        "a = resolve_agent(validate_config({}), 'main', workspace=Path(sys.argv[1]))\n"
        "print(check_flush(a, 'agent:main:main', token_estimate=199000, context_window=200000,"
        " compaction_count=3).reason)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(workspace)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "already_flushed"
    data = json.loads((flush_file(workspace)).read_text())
    assert data["sessions"]["main"]["memoryFlushCompactionCount"] == 3


def test_sessions_are_tracked_separately_and_keys_are_normalised(workspace: Path) -> None:
    agent = agent_for(workspace)
    assert check(agent, WINDOW, key="agent:main:telegram:direct:42").run
    assert check(agent, WINDOW, key="agent:main:main").run
    # `main`, `agent:main:main` and no key are one session
    assert check(agent, WINDOW, key="MAIN").reason == "already_flushed"
    assert (
        check_flush(
            agent, None, token_estimate=WINDOW, context_window=WINDOW, compaction_count=0
        ).reason
        == "already_flushed"
    )


def test_an_older_cycle_than_the_last_flushed_one_never_flushes(workspace: Path) -> None:
    agent = agent_for(workspace)
    assert check(agent, WINDOW, cycle=4).run
    assert check(agent, WINDOW, cycle=2).reason == "already_flushed"


def test_a_new_session_id_under_the_same_key_starts_over(workspace: Path) -> None:
    agent = agent_for(workspace)
    assert check(agent, WINDOW, session_id="s1").run
    assert check(agent, WINDOW, session_id="s1").reason == "already_flushed"
    assert check(agent, WINDOW, session_id="s2").run


def test_preview_does_not_record_and_a_recording_check_does(workspace: Path) -> None:
    agent = agent_for(workspace)
    preview = check(agent, WINDOW, record=False)
    assert preview.run and not preview.recorded
    assert check(agent, WINDOW, record=False).run
    assert check(agent, WINDOW).recorded
    assert check(agent, WINDOW, record=False).reason == "already_flushed"
    assert "memoryFlushAt" in json.loads(flush_file(workspace).read_text())["sessions"]["main"]


def test_a_corrupt_sessions_json_is_set_aside_not_fatal(
    workspace: Path, isolated_env: Path
) -> None:
    path = flush_file(workspace)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert check(agent_for(workspace), WINDOW).run
    assert (path.parent / "sessions.json.corrupt").read_text() == "{not json"
    assert json.loads(path.read_text())["sessions"]["main"]["memoryFlushCompactionCount"] == 0


def test_other_keys_in_a_session_entry_are_preserved(workspace: Path, isolated_env: Path) -> None:
    path = flush_file(workspace)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "sessions": {"main": {"hostNote": "keep me"}}}))
    assert check(agent_for(workspace), WINDOW).run
    entry = json.loads(path.read_text())["sessions"]["main"]
    assert entry["hostNote"] == "keep me"
    assert entry["memoryFlushCompactionCount"] == 0


CLAIMER = r"""
import sys, time
from pathlib import Path
from memoryd.config import resolve_agent, validate_config
from memoryd.lifecycle.flush import check_flush
agent = resolve_agent(validate_config({}), "main", workspace=Path(sys.argv[1]))
go = Path(sys.argv[3])
while not go.exists():  # start together so the claims really race
    time.sleep(0.005)
wins = []
for cycle in range(int(sys.argv[2])):
    d = check_flush(agent, "main", token_estimate=199000, context_window=200000, compaction_count=cycle)
    if d.run:
        wins.append(cycle)
print(" ".join(map(str, wins)))
"""


@pytest.mark.timeout(120)
def test_concurrent_host_processes_never_flush_a_cycle_twice(
    workspace: Path, tmp_path: Path
) -> None:
    cycles = 30
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, str(workspace), str(cycles), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    go.write_text("")
    wins: list[int] = []
    for p in procs:
        out, err = p.communicate(timeout=100)
        assert p.returncode == 0, err
        wins += [int(x) for x in out.split()]
    assert len(wins) == len(set(wins)), f"a cycle flushed twice: {sorted(wins)}"
    assert cycles - 1 in wins


@pytest.mark.timeout(60)
def test_racing_threads_get_exactly_one_flush_per_cycle(workspace: Path) -> None:
    agent = agent_for(workspace)
    n_threads, cycles = 4, 12
    barrier = threading.Barrier(n_threads, timeout=20)
    wins = [0] * cycles
    errors: list[BaseException] = []
    guard = threading.Lock()

    def run() -> None:
        try:
            for cycle in range(cycles):
                barrier.wait()
                if check(agent, WINDOW, key="main", cycle=cycle).run:
                    with guard:
                        wins[cycle] += 1
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
    assert not errors
    assert wins == [1] * cycles


# ---------------------------------------------------------------- NO_REPLY

SILENT = [
    "NO_REPLY",
    "  NO_REPLY  ",
    "\nNO_REPLY\n",
    "no_reply",
    "NO_REPLY.",
    "NO_REPLY!",
    "**NO_REPLY**",
    "`NO_REPLY`",
    '"NO_REPLY"',
    "NO_REPLY NO_REPLY",
    "<think>nothing worth saving</think>\nNO_REPLY",
    '{"action": "NO_REPLY"}',
]
NOT_SILENT = [
    "",
    "   ",
    None,
    "Saved two notes to memory/2026-11-29.md. NO_REPLY",
    "NO_REPLY — but actually, one thing: the deploy is Friday.",
    "NO_REPLYING",
    "NO_REPLY_NEEDED",
    "The token is NO_REPLY",
    "NOREPLY",
    "NO REPLY",
    "**NO_REPLY*",
    '{"action": "reply", "text": "NO_REPLY"}',
    "<think>x</think>Here is a real answer.",
]


@pytest.mark.parametrize("text", SILENT)
def test_silent_answers_are_recognised(text: str) -> None:
    assert is_no_reply(text)


@pytest.mark.parametrize("text", NOT_SILENT)
def test_real_answers_are_not_suppressed(text: str | None) -> None:
    assert not is_no_reply(text)


def test_the_openclaw_example_runs_at_exactly_the_threshold(workspace: Path) -> None:
    # OpenClaw's rule (memory-flush.ts): run when tokens >= contextWindow - reserve - soft.
    # 176,000 tokens of a 200,000 window with reserve 20,000 and soft 4,000 must run.
    decision = check(agent_for(workspace), 176_000)
    assert decision.threshold == 176_000 and decision.run and decision.reason == "due"
