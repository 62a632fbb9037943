"""The CLI path of LXC: an unprivileged LXC container with LXC's nvidia mount hook against the same
container without it, with plain runc in the same rounds.

LXC's `hooks/nvidia` (shipped with LXC, Debian package lxc) runs `nvidia-container-cli --user configure
--no-cgroups --ldconfig=@<host ldconfig> --device=... --<capabilities> <rootfs>` from inside the
container's user namespace when the container is unprivileged (docs/reference.md#ctr-gpus); it reads
NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES from `lxc.environment` and finds
nvidia-container-cli in its PATH. Rows, round-robin (bench.harness.time_rounds), each on a new copy of
a busybox + glibc rootfs (copied and handed to the container's root, host uid 100000, outside the timing):
  - plain runc: create/start/wait/delete of `true`;
  - `lxc-execute -n NAME -P DIR -- true`, an unprivileged container (ids 0-65535 mapped to the host's
    100000-165535), no network;
  - the same with `lxc.hook.mount = hooks/nvidia` and GPU 0 (compute,utility) of a simulated host;
  - the same with `true` in the place of nvidia-container-cli (first in the hook's PATH): what LXC's
    shell script costs by itself (getopt, awk, grep, reading the uid map), which is not ours to cut.
LXC maps the ids with newuidmap when it is installed, which only allows what /etc/subuid and
/etc/subgid grant; so the bench runs in a mount namespace of its own in which files of its temp dir,
granting root 100000-165535, are bind-mounted over those two (the machine's files are not changed).
A checkout the container's root cannot reach (under /root, mode 0700) is made reachable in that
namespace too (_reachable_by_container_root). The hook gets lxc-execute's environment: the venv's
programs first in PATH, and the toolkit config named by NVIDIA_CTK_CONFIG_FILE_PATH with
NVIDIA_CTK_CACHE_DIR set. When a container stops, LXC moves its monitor to a cgroup `lxc.pivot` that it
never removes; the configs name a pivot of this run's own (monitor_pivot), removed after the rows.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from bench.fresh_host import fresh_copy
from bench.harness import lifecycle, load_line, report, run_timed, time_rounds, wait_until_settled

BIN = Path(sys.executable).parent
CLI = BIN / "nvidia-container-cli"
LXC_HOOK = Path("/usr/share/lxc/hooks/nvidia")
REPO = Path(__file__).resolve().parents[1]
BASE = 100000           # the host uid and gid that are root in the container
GOAL = 1.8              # nvidia-container-cli's budget on ctr's path (issue 25), the same here


def monitor_pivot(work: Path) -> str:
    """The cgroup (in every hierarchy) under which LXC makes `lxc.pivot` for the monitors of the containers
    whose dir is in work: LXC moves a monitor there when its container stops and leaves the cgroup behind
    (by default /lxc.pivot). Named after work, so the run that made work can remove it
    (tests.support.cgroups.remove_cgroup_everywhere) once its monitors have exited."""
    return f"gct-lxc-pivot-{work.name}"


def _lxc_config(path: Path, name: str, rootfs: Path, gpu: bool) -> None:
    """The config of container `name` (its dir is path's, in the run's work dir: path.parent.parent)."""
    lines = [f"lxc.uts.name = {name}", f"lxc.rootfs.path = dir:{rootfs}",
             f"lxc.cgroup.dir.monitor.pivot = {monitor_pivot(path.parent.parent)}",
             f"lxc.idmap = u 0 {BASE} 65536", f"lxc.idmap = g 0 {BASE} 65536",
             "lxc.mount.auto = proc:mixed sys:mixed", "lxc.net.0.type = empty",
             "lxc.apparmor.profile = unconfined"]
    if gpu:
        lines += ["lxc.environment = NVIDIA_VISIBLE_DEVICES=0",
                  "lxc.environment = NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                  f"lxc.hook.mount = {LXC_HOOK}"]
    path.write_text("\n".join(lines) + "\n")


def _fresh_for_lxc(image: Path, rootfs: Path) -> None:
    fresh_copy(image, rootfs)
    subprocess.run(["chown", "-R", "-h", f"{BASE}:{BASE}", str(rootfs)], check=True)


def _lxc_once(work: Path, name: str, image: Path, env: dict) -> float:
    _fresh_for_lxc(image, work / name / "rootfs")
    return run_timed(["lxc-execute", "-n", name, "-P", str(work), "--", "true"], env)


def _runc_once(bundle: Path, image: Path, state: Path) -> float:
    fresh_copy(image, bundle / "rootfs")
    return lifecycle(["runc"], bundle, state)


def _reachable_by_container_root(path: Path) -> None:
    """Lets the container's root (host uid 100000) reach path, in this mount namespace only: a folder on
    the way that others may not enter (a checkout under /root, mode 0700) is covered by a tmpfs they may
    enter, holding only the way on, bound back. The venv's interpreter and the toolkit's modules are then
    as reachable as an installed toolkit's are; the machine's folders are not changed."""
    from tests.support.mountns import cover_with_tmpfs

    parts = path.resolve().parts
    for depth in range(1, len(parts)):
        folder = Path(*parts[:depth])
        if not os.stat(folder).st_mode & 0o001:
            cover_with_tmpfs(str(folder), "gct-bench-lxc", keep=[str(Path(*parts[:depth + 1]))])


def _in_namespace(runs: int, work: Path) -> str:
    """The rows, in this process's own mount namespace (see the module docstring)."""
    from tests.e2e.bundle import make_bundle
    from tests.e2e.rootfs import make_rootfs

    for path in (REPO, BIN):
        _reachable_by_container_root(path)
    subid = work / "subid"
    subid.write_text(f"root:{BASE}:65536\n")
    for name in ("/etc/subuid", "/etc/subgid"):
        if os.path.exists(name):
            subprocess.run(["mount", "-n", "--bind", str(subid), name], check=True)
    os.chmod(work, 0o755)   # the container's root (host uid 100000) must reach its rootfs
    host = work / "host"
    subprocess.run([str(BIN / "nvidia-ctk"), "simulate", "create", str(host), "--gpus", "2"], check=True,
                   capture_output=True)
    made = time.time_ns()
    toolkit = work / "toolkit.toml"
    toolkit.write_text(f'[nvidia-container-cli]\nroot = "{host}"\n')
    (work / "cache").mkdir(mode=0o755)
    env = {"PATH": f"{BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "NVIDIA_CTK_CONFIG_FILE_PATH": str(toolkit), "NVIDIA_CTK_CACHE_DIR": str(work / "cache")}
    stand_in = work / "stand-in"
    stand_in.mkdir()
    (stand_in / "nvidia-container-cli").symlink_to(shutil.which("true"))
    script_env = {**env, "PATH": f"{stand_in}:{env['PATH']}"}
    image = make_rootfs(work / "image", glibc=True)
    for name, gpu in (("plain", False), ("gpu", True), ("script", True)):
        (work / name).mkdir(mode=0o755)
        _lxc_config(work / name / "config", name, work / name / "rootfs", gpu)
    bundle = make_bundle(work / "bundle", ["true"], glibc=True)
    wait_until_settled(made)
    _fresh_for_lxc(image, work / "gpu" / "rootfs")
    check = subprocess.run(["lxc-execute", "-n", "gpu", "-P", str(work), "--", "sh", "-c", "ls /dev | grep nvidia0"],
                           env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check.returncode != 0 or check.stdout.strip() != "nvidia0":
        raise RuntimeError(f"lxc-execute with the nvidia hook did not give the container GPU 0: {check.stderr.strip()}")
    runc, plain, gpu, script = time_rounds([
        ("runc, no GPU (fresh rootfs copy)", partial(_runc_once, bundle, image, work / "runc-state")),
        ("lxc-execute, unprivileged (fresh rootfs copy)", partial(_lxc_once, work, "plain", image, env)),
        ("lxc-execute + hooks/nvidia, GPU 0", partial(_lxc_once, work, "gpu", image, env)),
        ("lxc-execute + hooks/nvidia running `true`", partial(_lxc_once, work, "script", image, script_env))],
        runs)
    ratio = gpu.median_ms / plain.median_ms
    return "\n".join([
        report("LXC (unprivileged, lxc-execute), busybox + glibc `true`, rows round-robin; paired: the median of "
               "each round's ratio to that round's runc", [runc, plain, gpu, script], runc, with_paired=True),
        f"lxc-execute + hooks/nvidia vs lxc-execute: {ratio:.2f}x, +{gpu.median_ms - plain.median_ms:.1f} ms "
        f"(goal <= {GOAL:.1f}x, as ctr's) {'OK' if ratio <= GOAL else 'OVER'}; of which LXC's script "
        f"+{script.median_ms - plain.median_ms:.1f} ms, nvidia-container-cli +{gpu.median_ms - script.median_ms:.1f} ms"])


def run(runs: int) -> str:
    missing = [name for name in ("lxc-execute", "runc", "unshare") if shutil.which(name) is None]
    if missing or not LXC_HOOK.exists():
        return "== LXC hooks/nvidia: skipped (LXC is not installed: `apt-get install lxc`)"
    if not CLI.exists():
        return "== LXC hooks/nvidia: skipped (the nvidia-container-cli launcher is missing: run `make venv`)"
    from tests.support.cgroups import remove_cgroup_everywhere

    load_before = load_line("before")
    with tempfile.TemporaryDirectory(prefix="bench-lxc-") as tmp:
        try:
            done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-m",
                                   "bench.lxc_lifecycle", str(runs), tmp], capture_output=True, text=True, cwd=REPO)
        finally:
            remove_cgroup_everywhere(monitor_pivot(Path(tmp)))
    if done.returncode != 0:
        raise RuntimeError(f"the LXC bench failed: {done.stderr.strip()}")
    return "\n".join([done.stdout.rstrip("\n"), load_before, load_line("after")])


if __name__ == "__main__":
    # python -m bench.lxc_lifecycle RUNS WORKDIR, in a mount namespace of its own (run() starts it so)
    print(_in_namespace(int(sys.argv[1]), Path(sys.argv[2])))
