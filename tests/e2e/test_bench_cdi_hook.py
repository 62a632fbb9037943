"""`python -m bench cdi-hook` runs end to end (it broke unnoticed when the hook began refusing pid 1): one
round of every row, on a fresh and on a reused rootfs, and no mount left behind."""
from __future__ import annotations

import os
import re

import pytest

from bench import cdi_hook

pytestmark = pytest.mark.e2e


def test_one_round_of_every_row():
    if os.geteuid() != 0:
        pytest.skip("needs root (mount namespaces)")
    lines = cdi_hook.run(1).splitlines()
    labels = ["true in the hook's place (floor)", "hook: links", "hook: links, params",
              "hook: the spec's whole entry (with ldconfig)"]
    assert lines[0].endswith(", on a fresh rootfs") and lines[5].endswith(", on a reused rootfs (a restart)")
    assert [line.split(" median ")[0].strip() for line in lines[1:5]] == labels
    assert [line.split(" median ")[0].strip() for line in lines[6:]] == ["restart: " + label for label in labels]
    assert all(re.search(r"n=1\)", line) for line in lines[1:5] + lines[6:])
    with open("/proc/self/mountinfo") as f:
        assert "bench-cdihook-" not in f.read()
