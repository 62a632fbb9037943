"""`python -m bench ctr` and `python -m bench lxc` (issue 25's CLI paths) run end to end, so they cannot rot
unnoticed: one round of every row, the GPU rows checked (before timing) to have given the container GPU 0,
and nothing left behind (no mount naming the bench's dirs, no bench dir in /tmp)."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from bench import ctr_lifecycle, lxc_lifecycle

pytestmark = pytest.mark.e2e
ROW = r" +median +\d+\.\d ms  \(min +\d+\.\d, max +\d+\.\d, n=1\)"
LOAD = r"load average (before|after): [\d.]+ [\d.]+ [\d.]+ \(1, 5, 15 min; \d+ cores\)"


def _left_behind(prefix: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        mounts = [line for line in f if prefix in line]
    return mounts + [p for p in os.listdir(tempfile.gettempdir()) if p.startswith(prefix)] + \
        [p for p in os.listdir("/tmp") if p.startswith(prefix)]


def _require(*programs: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (runc, mount namespaces)")
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


def test_ctr_rows_one_round():
    _require("containerd", "ctr", "runc")
    lines = ctr_lifecycle.run(1).splitlines()
    assert re.fullmatch(r"runc, no GPU \(fresh rootfs copy\)" + ROW, lines[1]), lines[1]
    assert re.fullmatch(r"ctr run --rm \(new snapshot\)" + ROW + r"  ratio .*paired +\d+\.\d\dx", lines[2]), lines[2]
    assert lines[3].startswith("ctr run --rm --gpus 0 (nvidia-container-cli) ")
    assert re.fullmatch(r"ctr run --gpus 0 vs ctr run: \d+\.\d\dx \(goal <= 1\.8x\) (OK|OVER)", lines[4]), lines[4]
    assert all(re.fullmatch(LOAD, line) for line in lines[5:]) and len(lines) == 7
    assert _left_behind("bench-ctr-") == []


def test_lxc_rows_one_round():
    _require("lxc-execute", "runc", "unshare")
    if not lxc_lifecycle.LXC_HOOK.exists():
        pytest.skip("LXC's hooks/nvidia is not installed")
    before = Path("/etc/subuid").read_bytes() if os.path.exists("/etc/subuid") else None
    lines = lxc_lifecycle.run(1).splitlines()
    labels = [line.split(" median ")[0].strip() for line in lines[1:5]]
    assert labels == ["runc, no GPU (fresh rootfs copy)", "lxc-execute, unprivileged (fresh rootfs copy)",
                      "lxc-execute + hooks/nvidia, GPU 0", "lxc-execute + hooks/nvidia running `true`"]
    assert re.fullmatch(r"lxc-execute \+ hooks/nvidia vs lxc-execute: \d+\.\d\dx, \+-?\d+\.\d ms \(goal <= 1\.8x, "
                        r"as ctr's\) (OK|OVER); of which LXC's script \+-?\d+\.\d ms, nvidia-container-cli "
                        r"\+-?\d+\.\d ms", lines[5]), lines[5]
    assert all(re.fullmatch(LOAD, line) for line in lines[6:]) and len(lines) == 8
    # the subuid grant was the bench's namespace's only
    assert (Path("/etc/subuid").read_bytes() if os.path.exists("/etc/subuid") else None) == before
    assert _left_behind("bench-lxc-") == []
