"""`memoryd forget` and `memoryd reset`: list, confirm, then remove or rebuild (docs/lifecycle.md)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from .cli_common import as_json, forward, print_json, service
from .core.text import visible_controls
from .errors import InvalidInput, MemorydError

#: forget and reset may rebuild an index: a forwarded one waits up to an hour for serve
_WAIT_S = 3600.0


def _confirm(question: str, refusal: str) -> None:
    """Ask on the terminal; without one, refuse with `refusal` (pass --yes)."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise InvalidInput(refusal)
    sys.stderr.write(question + " [y/N] ")
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise MemorydError("not confirmed: nothing was changed")


def _lines_named(ranges: list[list[int]]) -> str:
    """`line 3`, `lines 3-5, 9`."""
    parts = [f"{a}-{b}" if a != b else str(a) for a, b in ranges]
    one = len(ranges) == 1 and ranges[0][0] == ranges[0][1]
    return ("line " if one else "lines ") + ", ".join(parts)


def _print_forget_plan(plan: dict[str, Any], out: Any, *, dry_run: bool) -> None:
    print("would remove:" if dry_run else "to remove:", file=out)
    for sel in plan["selections"]:
        print(f"{visible_controls(sel['path'])} ({_lines_named(sel['ranges'])}):", file=out)
        for line in sel["lines"]:
            print(f"  {line['line']:>5}  {visible_controls(line['text'])}", file=out)


def cmd_forget(args: argparse.Namespace) -> int:
    from .progress import ProgressReporter

    asked = {"target": args.target, "maxResults": args.max_results}
    with contextlib.ExitStack() as stack:
        svc = None
        plan = forward(args, {"op": "forget-plan", **asked}, wait_s=_WAIT_S)
        if plan is None:
            svc = stack.enter_context(service(args))
            plan = svc.forget_plan(args.target, agent_id=args.agent, max_results=args.max_results)
        if not plan["selections"]:
            raise MemorydError(f"nothing to forget: no memory line matches {args.target!r}")
        if args.dry_run:
            if args.json:
                print_json({**plan, "dryRun": True})
            else:
                _print_forget_plan(plan, None, dry_run=True)
            return 0
        _print_forget_plan(plan, sys.stderr if args.json else sys.stdout, dry_run=False)
        if plan["confirm"] and not args.yes:
            n = sum(len(s["lines"]) for s in plan["selections"])
            _confirm(
                f"remove these {n} lines from memory for good?",
                "forget by query or of a whole file removes only what you confirmed: check "
                "the list with --dry-run, then pass --yes (or name PATH#Lx-Ly)",
            )
        keys = ("path", "ranges", "sha256")
        chosen = [{k: s[k] for k in keys} for s in plan["selections"]]
        if svc is None:
            out = forward(args, {"op": "forget", "selections": chosen}, wait_s=_WAIT_S)
            if out is None:
                raise MemorydError("memoryd serve stopped between listing and removing: run again")
        else:
            with ProgressReporter() as progress:
                out = svc.forget(chosen, agent_id=args.agent, progress=progress)
    if as_json(args, out):
        return 0
    for r in out["removed"]:
        what = f"{_lines_named(r['ranges'])} of {visible_controls(r['path'])}"
        print(f"removed {what}; backup (delete it when sure): {r['backup']}")
    names = {"builtin": "the built-in index", "qmd": "qmd"}
    engines = " and ".join(v for k, v in names.items() if k in out["engines"])
    purged = f"; transcripts re-indexed without it: {len(out['transcriptsPurged'])}"
    print(f"purged from {engines}{purged if out['transcriptsPurged'] else ''}")
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    from .progress import ProgressReporter

    if not args.yes:
        _confirm(
            "drop this agent's index, qmd home, health and exports for this workspace and "
            "rebuild them from the Markdown?",
            "reset drops the derived index and rebuilds it: pass --yes to confirm",
        )
    out = forward(args, {"op": "reset"}, wait_s=_WAIT_S)
    if out is None:
        with service(args) as svc, ProgressReporter() as progress:
            out = svc.reset(args.agent, progress=progress)
    if as_json(args, out):
        return 0
    print(f"removed {len(out['removed'])} derived files and folders")
    if "builtin" in out:
        b = out["builtin"]
        print(f"rebuilt the built-in index: {b['files']} files, {b['chunks']} chunks")
    if "qmd" in out:
        print(f"rebuilt qmd: {len(out['qmd']['collections'])} collections")
    return 0
