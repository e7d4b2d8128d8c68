"""Retrieval-quality evaluation for memoryd: judged datasets → workspaces → metrics → report.

Run `python -m bench.eval --help` from the repository root; see bench/eval/README.md.
"""
