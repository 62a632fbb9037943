"""The figures the reliability tests measure, kept for docs/RELIABILITY.md.

Each test fills a dict (the `figures` fixture); with GCT_RELIABILITY_FIGURES naming a file, the dict and
the test's outcome are appended to it as JSON lines, which `python -m tests.reliability.report` reads.
Without the variable nothing is written: the figures are then only checked, as in any run of the suite.
"""
from __future__ import annotations

import json
import os

FIGURES_ENV = "GCT_RELIABILITY_FIGURES"


def append(entry: dict) -> None:
    path = os.environ.get(FIGURES_ENV)
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")


def read(path: str) -> dict[str, dict]:
    """test id -> everything recorded for it (its figures, outcome and duration)."""
    tests: dict[str, dict] = {}
    with open(path) as f:
        for line in f:
            entry = json.loads(line)
            tests.setdefault(entry.pop("test"), {}).update(entry)
    return tests
