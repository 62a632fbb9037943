"""`python -m bench driver-dir` runs end to end: every variant of the cdi edits starts a container on
both images, the ones with a driver dir mount it once, the library loads where each variant says, and
nothing of the run is left mounted."""
from __future__ import annotations

import os
import re

import pytest

from bench import driver_dir

pytestmark = pytest.mark.e2e

LABELS = ["plain (no GPU edits)", "files (as generated)", "files, no rprivate", "dir + links at every usual path",
          "dir + soname and binary links", "dir, ld cache only"]


def test_one_round_of_every_variant():
    if os.geteuid() != 0:
        pytest.skip("needs root (runc, mount namespaces)")
    lines = driver_dir.run(1).splitlines()
    seen = dict(line.split(": ", 1) for line in lines[1:1 + 2 * len(LABELS)])
    mounts = {key: int(re.search(r"mounts (\d+)", value).group(1)) for key, value in seen.items()}
    plain = mounts["plain (no GPU edits), glibc"]
    # the generated edits: one mount per driver file (dozens); a driver dir: the dir and the socket
    assert mounts["files (as generated), glibc"] > plain + 30
    for label in LABELS[3:]:
        assert mounts[f"{label}, glibc"] == plain + 2
        assert mounts[f"{label}, busybox"] == plain + 2
    usual = "nvml /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1:nvmlInit=0:gpus=1"
    for label in LABELS[1:5]:
        assert usual in seen[f"{label}, glibc"]
        for image in ("glibc", "busybox"):
            assert "nvidia-smi /usr/bin/nvidia-smi, runs yes" in seen[f"{label}, {image}"]
    only_dir = seen["dir, ld cache only, glibc"]
    assert "nvml /usr/local/nvidia/lib64/libnvidia-ml.so.1:nvmlInit=0:gpus=1" in only_dir
    assert "nvidia-smi not-in-PATH, runs only-as-/usr/local/nvidia/bin/nvidia-smi" in only_dir
    assert "libnvidia-ml.so.1-not-found" in seen["plain (no GPU edits), glibc"]
    assert "no-glibc-probe" in seen["files (as generated), busybox"]
    timed = [line for line in lines if " median " in line and not line.startswith("==")]
    assert [line.split(" median ")[0].strip() for line in timed] == LABELS + ["restart: " + x for x in LABELS]
    assert all("n=1)" in line for line in timed)
    with open("/proc/self/mountinfo") as f:
        assert "bench-driver-dir-" not in f.read()
