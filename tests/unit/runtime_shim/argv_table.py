"""The one table of runc command lines (argv_cases.json), shared by the Python parser tests, the C
launcher tests and the check against the real runc."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

TABLE = Path(__file__).with_name("argv_cases.json")
CASES = json.loads(TABLE.read_text())["cases"]


def parametrize_cases(cases=None):
    cases = CASES if cases is None else cases
    return pytest.mark.parametrize("case", cases, ids=[c["name"] for c in cases])
