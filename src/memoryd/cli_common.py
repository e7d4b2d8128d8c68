"""What the CLI's commands share: JSON output, who is asking, forwarding to `serve`, the service."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

from .errors import MemorydError, NotServed, ServerBusy


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")


def as_json(args: argparse.Namespace, data: Any) -> bool:
    """Print `data` as JSON if `--json` was given; whether it was."""
    if args.json:
        print_json(data)
    return bool(args.json)


def forward(
    args: argparse.Namespace, payload: dict[str, Any], *, wait_s: float | None = None
) -> dict[str, Any] | None:
    """The answer of a `memoryd serve` that serves this caller (its failure raised), else None;
    with `wait_s`, a serve that stops answering is an error, never a reason to run it here too."""
    if os.environ.get("MEMORYD_NO_SERVER"):
        return None
    from . import paths

    sock = paths.socket_path()
    if not sock.exists():  # no server: skip its module (socket) and the config hash
        return None
    from .server import config_identity, ping, request

    raw_ws = args.workspace or os.environ.get("MEMORYD_WORKSPACE")
    identity = {  # who is asking, as `serve` compares it
        "config": config_identity(paths.config_file(args.config)),
        "workspace": os.path.abspath(os.path.expanduser(raw_ws)) if raw_ws else None,
        "cwd": os.getcwd(),
    }
    full = {**payload, "agent": args.agent, "identity": identity}
    op = payload["op"]
    # forget and reset say who did the work; forget's listing is only a question
    announce = wait_s is not None and op != "forget-plan"
    if wait_s is None:
        out = request(sock, full)
        if out is None:
            return None
        run_here: tuple[str, ...] = (NotServed.code, ServerBusy.code)
    else:
        alive = ping(sock)
        if alive is None:
            return None
        if announce:
            print(f"memoryd: {op}: asking memoryd serve (pid {alive.get('pid')})", file=sys.stderr)
        out = request(sock, full, timeout=wait_s)
        if out is None:
            raise MemorydError(f"memoryd serve did not answer {op}; see `memoryd status`")
        run_here = (NotServed.code,)
    if out.get("code") in run_here:
        logging.getLogger("memoryd").info("%s; running in this process", out.get("error"))
        return None
    if out.get("disabled"):
        raise MemorydError.from_result(out)
    if announce:
        print(f"memoryd: {op} done by memoryd serve", file=sys.stderr)
    return out


def service(args: argparse.Namespace, *, one_off: bool = True) -> Any:
    """The service for this command (`one_off`: it answers once and the process exits)."""
    # imported here: a search forwarded to `memoryd serve` never pays for config, numpy or SQLite
    from .config_files import load_config
    from .orchestrator import MemoryService

    config = load_config(args.config)
    # a one-off command: each search catches the index up itself (`serve` starts its own work)
    return MemoryService(config, workspace=args.workspace, background=False, one_off=one_off)
