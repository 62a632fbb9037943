"""`python -m bench driver-dir` runs end to end: every variant of the cdi edits starts a container on
each image, the ones with a driver dir mount it once, the libraries load from where each variant
says (the image's forward-compat libcuda first, except with the dir where CUDA images' LD_LIBRARY_PATH
looks), and nothing of the run is left mounted."""
from __future__ import annotations

import os
import re

import pytest

from bench import driver_dir

pytestmark = pytest.mark.e2e

LABELS = ["plain (no GPU edits)", "files (as generated)", "files, no rprivate", "dir + links at every usual path",
          "dir + soname and binary links", "dir, ld cache only", "dir at /usr/local/nvidia, ld cache only"]
IMAGES = ("glibc", "busybox", "cuda-like")
USUAL_NVML = "nvml /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1:nvmlInit=0:gpus=1"
COMPAT_CUDA = "libcuda /usr/local/cuda/compat/libcuda.so.1"


def test_one_round_of_every_variant():
    if os.geteuid() != 0:
        pytest.skip("needs root (runc, mount namespaces)")
    lines = driver_dir.run(1).splitlines()
    seen = dict(line.split(": ", 1) for line in lines[1:1 + len(IMAGES) * len(LABELS)])
    assert set(seen) == {f"{label}, {image}" for label in LABELS for image in IMAGES}
    mounts = {key: int(re.search(r"mounts (\d+)", value).group(1)) for key, value in seen.items()}
    plain = mounts["plain (no GPU edits), glibc"]
    # the generated edits: one mount per driver file (dozens); a driver dir: the dir and the socket
    assert mounts["files (as generated), glibc"] > plain + 30
    assert all(mounts[f"{label}, {image}"] == plain + 2 for label in LABELS[3:] for image in IMAGES)
    for label in LABELS[1:5]:   # a file or a link at every name the generated spec gives today
        assert USUAL_NVML in seen[f"{label}, glibc"] and USUAL_NVML in seen[f"{label}, cuda-like"]
        assert "libcuda /usr/lib/x86_64-linux-gnu/libcuda.so.1" in seen[f"{label}, glibc"]
        assert COMPAT_CUDA in seen[f"{label}, cuda-like"]
        assert all("nvidia-smi /usr/bin/nvidia-smi, runs yes" in seen[f"{label}, {image}"] for image in IMAGES)
    only_dir = seen["dir, ld cache only, glibc"]
    assert "nvml /usr/local/nvidia-driver/lib64/libnvidia-ml.so.1:nvmlInit=0:gpus=1" in only_dir
    assert "nvidia-smi not-in-PATH, runs only-as-/usr/local/nvidia-driver/bin/nvidia-smi" in only_dir
    assert COMPAT_CUDA in seen["dir, ld cache only, cuda-like"]
    # at /usr/local/nvidia a CUDA image finds nvidia-smi, and the driver's libcuda before its compat one
    at_cuda_dir = seen["dir at /usr/local/nvidia, ld cache only, cuda-like"]
    assert "libcuda /usr/local/nvidia/lib64/libcuda.so.1" in at_cuda_dir
    assert "nvidia-smi /usr/local/nvidia/bin/nvidia-smi, runs yes" in at_cuda_dir
    assert "libnvidia-ml.so.1-not-found" in seen["plain (no GPU edits), glibc"]
    assert "no-glibc-probe" in seen["files (as generated), busybox"]
    timed = [line for line in lines if " median " in line and not line.startswith("==")]
    assert [line.split(" median ")[0].strip() for line in timed] == LABELS + ["restart: " + x for x in LABELS]
    assert all("n=1)" in line for line in timed)
    with open("/proc/self/mountinfo") as f:
        assert "bench-driver-dir-" not in f.read()
