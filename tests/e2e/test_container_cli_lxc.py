"""Issue 27.12 under real LXC: an unprivileged container's `hooks/nvidia` runs nvidia-container-cli as the
container's root (root in its user namespace, host uid 100000). With the program's interpreter behind a
folder only the host's root may enter (a venv on a Python under /root), the start fails, and LXC's log
gets our one line naming the host uid and what to fix, not a bare "Permission denied" (read from the
hook's stderr: LXC logs a hook's output as it reads it, in chunks, the last one not always).

Set up as bench/lxc_lifecycle.py sets up its rows (its helpers), in a mount namespace of its own where
/etc/subuid and /etc/subgid grant root 100000-165535 (files of the test's dir bound over them), and the
cgroup LXC leaves for its monitor (lxc.pivot) under one of the test's own, removed afterwards."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench.lxc_lifecycle import monitor_pivot
from tests.support.cgroups import remove_cgroup_everywhere

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
LXC_HOOK = Path("/usr/share/lxc/hooks/nvidia")

IN_NAMESPACE = r"""
import json, os, subprocess, sys
from pathlib import Path
from bench.lxc_lifecycle import BASE, LXC_HOOK, _fresh_for_lxc, _lxc_config
from launcher import install_launchers
from tests.e2e.rootfs import make_rootfs

work = Path(sys.argv[1])
subid = work / "subid"
subid.write_text(f"root:{BASE}:65536\n")
for name in ("/etc/subuid", "/etc/subgid"):
    if os.path.exists(name):
        subprocess.run(["mount", "-n", "--bind", str(subid), name], check=True)
bindir = work / "bin"
bindir.mkdir(mode=0o755)
(work / "libexec").mkdir(mode=0o755)
install_launchers.build_wheel_scripts(bindir, work / "libexec", "9.8.7")
private = work / "private"
private.mkdir(mode=0o700)
(private / "python3").symlink_to(sys.executable)
(bindir / install_launchers.INTERPRETER_FILE).write_text(f"#!{private}/python3\n")
image = make_rootfs(work / "image", glibc=True)
(work / "gpu").mkdir(mode=0o755)
_lxc_config(work / "gpu" / "config", "gpu", work / "gpu" / "rootfs", True)
# LXC's own hook, its stderr also kept in a file (LXC logs a hook's output in chunks, not always the last)
stderr_file = work / "hook-stderr"
stderr_file.touch(mode=0o666)
os.chmod(stderr_file, 0o666)
wrapper = work / "hook"
wrapper.write_text(f'#!/bin/sh\nexec {LXC_HOOK} "$@" 2>>{stderr_file}\n')
wrapper.chmod(0o755)
config = work / "gpu" / "config"
config.write_text(config.read_text().replace(f"lxc.hook.mount = {LXC_HOOK}", f"lxc.hook.mount = {wrapper}"))
_fresh_for_lxc(image, work / "gpu" / "rootfs")
# the CLI's cache dir is the test's (else the machine's /run/nvidia-container-toolkit)
env = {"PATH": f"{bindir}:/usr/sbin:/usr/bin:/sbin:/bin", "NVIDIA_CTK_CACHE_DIR": str(work / "cache")}
done = subprocess.run(["lxc-execute", "-n", "gpu", "-P", str(work), "--", "true"], env=env, capture_output=True,
                      text=True, stdin=subprocess.DEVNULL, timeout=120)
print(json.dumps({"rc": done.returncode, "stderr": done.stderr, "hook_stderr": stderr_file.read_text()}))
"""


def test_an_unprivileged_lxc_container_is_told_what_to_fix():
    if os.geteuid() != 0:
        pytest.skip("needs root (LXC, mount namespaces)")
    missing = [p for p in ("lxc-execute", "unshare", "gcc") if shutil.which(p) is None]
    if missing or not LXC_HOOK.exists():
        pytest.skip(f"not installed: {', '.join(missing) or LXC_HOOK}")
    work = Path(tempfile.mkdtemp(prefix="gct-lxc-cli-", dir="/tmp"))
    try:
        os.chmod(work, 0o755)   # the container's root (host uid 100000) must reach its rootfs
        ran = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", IN_NAMESPACE,
                              str(work)], capture_output=True, text=True, cwd=REPO, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
        assert ran.returncode == 0, ran.stderr[-3000:]
        result = json.loads(ran.stdout.splitlines()[-1])
        pivots = list(Path("/sys/fs/cgroup").glob(f"*/{monitor_pivot(work)}/lxc.pivot"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        remove_cgroup_everywhere(monitor_pivot(work))
    # LXC moved the stopping container's monitor to a pivot under the test's cgroup, which is gone now
    assert pivots, "LXC did not use lxc.cgroup.dir.monitor.pivot"
    assert list(Path("/sys/fs/cgroup").glob(f"*/{monitor_pivot(work)}")) == []
    assert result["rc"] != 0
    ours = [line for line in result["hook_stderr"].splitlines() if line.startswith("nvidia-container-cli: ")]
    assert ours == [
        "nvidia-container-cli: error: cannot execute the interpreter as host uid 100000: Permission denied; this "
        "program runs as that user here (an unprivileged container's root, a rootless engine): install "
        "gpu-container-toolkit where every user can read and run it, as the packages do (not in a venv under /root) "
        f"({work}/private/python3)"], result["hook_stderr"]
