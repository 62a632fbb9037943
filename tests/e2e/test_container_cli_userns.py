"""nvidia-container-cli from inside a user namespace, as LXC's unprivileged containers run it:
`nvidia-container-cli --user configure --no-cgroups ... ROOTFS` in a mount namespace the user namespace
owns. It injects what that namespace allows (bind mounts, links, the ld cache through the sandboxed
ldconfig) and fails with one line, leaving nothing mounted, on what it cannot (device cgroups, another
namespace's container). Everything the namespace mounted dies with it: the host never sees a mount."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.rootfs import make_rootfs

pytestmark = pytest.mark.e2e

CLI = Path(sys.executable).parent / "nvidia-container-cli"
V = "550.54.15"


@pytest.fixture
def userns_host(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("building the simulated host needs root (mknod)")
    if not CLI.exists():
        pytest.skip("the nvidia-container-cli launcher is not installed: run `make venv`")
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    from simulator.host_builder import create_simulated_host
    from simulator.models import DEFAULT_MODEL

    host = tmp_path / "host"
    create_simulated_host(str(host), gpus=2, model=DEFAULT_MODEL, driver_version=V, cuda_version="12.4")
    return host, make_rootfs(tmp_path / "rootfs", glibc=True)


def in_user_namespace(script: str, host: Path) -> subprocess.CompletedProcess:
    """Run `script` in a new user namespace (the caller mapped to its root) with its own mount namespace."""
    # the CLI keeps the driver files it finds in NVIDIA_CTK_CACHE_DIR: the host's, not the machine's /run
    env = {"PATH": f"{CLI.parent}:/usr/sbin:/usr/bin:/sbin:/bin", "CLI": str(CLI), "HOST": str(host),
           "NVIDIA_CTK_CACHE_DIR": str(host.parent / "cache")}
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
                          capture_output=True, text=True, env=env, timeout=120)


def mounts_under(path: Path, mountinfo: str) -> list[str]:
    return [line for line in mountinfo.splitlines() if str(path) in line]


def test_user_no_cgroups_injects_what_the_namespace_allows(userns_host):
    host, rootfs = userns_host
    script = f"""
set -e
test "$(cat /proc/self/uid_map | tr -s ' ')" != " 0 0 4294967295"      # really in a user namespace
"$CLI" --user --root "$HOST" configure --no-cgroups --device=0 --compute --utility {rootfs}
echo "nodes: $(ls {rootfs}/dev | grep nvidia | sort | tr '\\n' ' ')"
chroot {rootfs} sh -c 'cat /dev/nvidia0 2>&1 >/dev/null; nvidia-smi -L; ldconfig -p | grep -c "libcuda.so.1 "'
"""
    done = in_user_namespace(script, host)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    gpu0 = (host / ".nvidia-simulated-host.json").read_text().split('"uuid": "')[1].split('"')[0]
    assert done.stdout.splitlines() == [
        "nodes: nvidia-uvm nvidia-uvm-tools nvidia0 nvidiactl ",
        "cat: can't open '/dev/nvidia0': No such device or address",
        f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {gpu0})",
        "1",
    ]
    with open("/proc/self/mountinfo") as f:
        assert mounts_under(rootfs, f.read()) == []


def test_user_with_pid_of_a_namespace_it_owns(userns_host):
    # --pid of a "container" whose mount namespace this user namespace owns: the injector enters it, and the
    # mounts appear there only (seen through /proc/PID/root), not in the caller's namespace
    host, rootfs = userns_host
    script = f"""
unshare --mount sleep 60 & SPID=$!
while [ "$(readlink /proc/$SPID/ns/mnt)" = "$(readlink /proc/self/ns/mnt)" ]; do sleep 0.05; done
"$CLI" --user --root "$HOST" configure --no-cgroups --pid=$SPID --device=1 --utility {rootfs} || echo failed
ls /proc/$SPID/root{rootfs}/dev | grep -E '^nvidia[0-9]+$'
[ -s /proc/$SPID/root{rootfs}/usr/bin/nvidia-smi ] && echo "mounted there"
[ -s {rootfs}/usr/bin/nvidia-smi ] || echo "placeholder here"
grep -c {rootfs} /proc/self/mountinfo
kill $SPID
"""
    done = in_user_namespace(script, host)
    assert done.stderr == ""
    assert done.stdout.splitlines() == ["nvidia1", "mounted there", "placeholder here", "0"]


@pytest.mark.parametrize("flags, message", [
    # the kernel lets only the initial user namespace change device cgroups: refused before anything
    ("--pid=$$", "nvidia-container-cli: error: device cgroups cannot be changed from a user namespace: "
                 "pass --no-cgroups (--user)"),
    # no process to find a cgroup from (LXC's mount hook passes --no-cgroups)
    ("", "nvidia-container-cli: error: device cgroups need the container's process: pass --pid, or "
         "--no-cgroups when the caller manages the cgroup (configure)"),
    # a container in a namespace this user namespace does not own: its root (the container's view of
    # the rootfs, where the links are judged) cannot be opened, nothing is mounted
    ("--no-cgroups --pid=1", "nvidia-container-cli: error: cannot open the container's root: "
                             "Permission denied (/proc/1/root)"),
])
def test_user_fails_clearly_on_what_it_cannot(userns_host, flags, message):
    host, rootfs = userns_host
    script = f"""
"$CLI" --user --root "$HOST" configure {flags} --device=0 --compute {rootfs}; echo "rc=$?"
grep -c {rootfs} /proc/self/mountinfo
"""
    done = in_user_namespace(script, host)
    assert done.stderr.strip() == message
    assert done.stdout.splitlines() == ["rc=1", "0"]   # one line, exit 1, nothing mounted in the namespace
