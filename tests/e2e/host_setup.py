"""Once-per-boot host quirks that real runtimes need on these machines (docs/reference.md#test-hosts).

crun (and podman through it) refuse hybrid cgroups while the hugetlb controller sits on cgroup v2;
binding it to a v1 hierarchy fixes that. This changes no file under /etc: it is a mount under
/sys/fs/cgroup, which the kernel forgets at reboot. EBUSY means another hierarchy already holds it.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

HUGETLB = Path("/sys/fs/cgroup/hugetlb")


def _mounted(path: Path) -> bool:
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == str(path) for line in mounts)


def ensure_hugetlb_on_v1() -> None:
    if _mounted(HUGETLB) or not Path("/sys/fs/cgroup/unified").exists():
        return
    HUGETLB.mkdir(exist_ok=True)
    result = subprocess.run(["mount", "-n", "-t", "cgroup", "-o", "hugetlb", "cgroup", str(HUGETLB)],
                            capture_output=True, text=True)
    if result.returncode != 0 and "busy" not in result.stderr.lower():
        raise RuntimeError(f"cannot bind hugetlb to cgroup v1: {result.stderr.strip()}")


def is_root() -> bool:
    return os.geteuid() == 0
