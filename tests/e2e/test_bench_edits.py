"""`python -m bench edits` (issue 25's "where a fresh rootfs's time goes"): the variants of the cdi row's
config.json are the ones named, and one round of every row runs end to end, no mount left behind."""
from __future__ import annotations

import os
import re

import pytest

from bench import edits

pytestmark = pytest.mark.e2e

HOOK = {"path": "/usr/bin/nvidia-cdi-hook", "env": ["PATH=/usr/bin"],
        "args": ["nvidia-cdi-hook", "create-symlinks", "--link", "libcuda.so.1::/usr/lib/libcuda.so",
                 "enable-cuda-compat", "--host-driver-version=570.1", "update-ldcache", "--folder", "/usr/lib",
                 "disable-device-node-modification"]}


def test_each_variant_adds_one_part_of_the_edits():
    plain = {"process": {}, "mounts": [{"destination": "/proc"}], "linux": {"devices": [], "resources": {}}}
    edited = {"process": {}, "mounts": [{"destination": "/proc"}, {"destination": "/usr/lib/libcuda.so.570.1"}],
              "linux": {"devices": [{"path": "/dev/nvidia0"}], "resources": {"devices": [{"allow": True}]}},
              "hooks": {"createRuntime": [HOOK]}}
    configs = edits.variants(plain, edited)
    assert len(configs) == len(edits.LABELS)
    assert configs[0] == plain and configs[-1] == edited
    assert configs[1]["linux"] == edited["linux"] and configs[1]["mounts"] == plain["mounts"]
    assert all(c["mounts"] == edited["mounts"] and c["linux"] == plain["linux"] for c in configs[2:6])
    hooks = [c.get("hooks") for c in configs[2:6]]
    assert hooks[0] is None
    args = [h["createRuntime"][0]["args"] for h in hooks[1:]]
    assert args[0] == HOOK["args"][:4]
    assert args[1] == HOOK["args"][:4] + HOOK["args"][9:]   # no update-ldcache, no enable-cuda-compat
    assert args[2] == HOOK["args"]
    assert all(h["createRuntime"][0]["env"] == HOOK["env"] for h in hooks[1:])
    assert HOOK["args"][1] == "create-symlinks"  # the input was not changed


def test_one_round_of_every_row():
    if os.geteuid() != 0:
        pytest.skip("needs root (runc, mount namespaces)")
    lines = edits.run(1).splitlines()
    assert lines[0].startswith("== runc alone on variants") and lines[8].startswith("== the same on a reused")
    rows = lines[1:8] + lines[9:16]
    assert [line.split(" median ")[0].strip() for line in rows] == edits.LABELS + [
        "restart: " + label for label in edits.LABELS]
    assert all("n=1)" in line for line in rows)
    assert all(re.search(r"paired +\d+\.\d\dx$", line) for line in rows[1:7] + rows[8:])
    assert re.fullmatch(r"load average before: [\d.]+ [\d.]+ [\d.]+ \(1, 5, 15 min; \d+ cores\)", lines[16])
    assert lines[17].startswith("load average after: ") and len(lines) == 18
    with open("/proc/self/mountinfo") as f:
        assert "bench-edits-" not in f.read()
