"""`ctr run --gpus` on a private containerd 1.6 with our nvidia-container-cli, on a simulated GPU host.

ctr adds the prestart hook `containerd oci-hook -- <nvidia-container-cli found in ctr's PATH>
--load-kmods configure --device=0 --compute --compat32 --graphics --utility --video --display
--pid={{pid}} {{rootfs}}` with ctr's own environment as the hook's env (docs/reference.md#ctr-gpus; checked here on
the spec ctr writes). So ctr runs with the venv's bin first in PATH and NVIDIA_CTK_CONFIG_FILE_PATH
naming a config whose `[nvidia-container-cli] root` is the simulated host. The image is a docker-archive
tar built here from a busybox+glibc rootfs (no registry)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.engines import short_tempdir, write_containerd_config_without_cri
from tests.e2e.rootfs import docker_archive, make_rootfs
from tests.support.simulated_host import create_in_process, marker_inventory

pytestmark = pytest.mark.e2e

VENV_BIN = Path(sys.executable).parent
CLI = VENV_BIN / "nvidia-container-cli"
IMAGE = "gct.test/cli-busybox:latest"


@pytest.fixture
def gpu_containerd(ctr_namespace, private_containerd):
    """(ctr(*args) -> CompletedProcess, simulated host, the containerd Daemon) with the image imported."""
    if not CLI.exists():
        pytest.skip("the nvidia-container-cli launcher is not installed: run `make venv`")
    workdir = short_tempdir("gct-cli-ctr-")
    host = workdir / "host"
    create_in_process(host, mig_options=("1=1g.5gb",))
    toolkit_config = workdir / "toolkit.toml"
    toolkit_config.write_text(f'[nvidia-container-cli]\nroot = "{host}"\n')
    socket = workdir / "c.sock"
    dirs = [workdir / "root", workdir / "state", workdir / "opt"]
    config = write_containerd_config_without_cri(workdir, socket, dirs)
    daemon = private_containerd(config, socket, dirs, workdir=workdir)
    # ctr's environment becomes the hook's: our programs first in PATH, our config, nothing from the host's
    env = {"PATH": f"{VENV_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "NVIDIA_CTK_CONFIG_FILE_PATH": str(toolkit_config),
           # the CLI's caches (config, driver files) in the test's dir, not the machine's /run
           "NVIDIA_CTK_CACHE_DIR": str(workdir / "cache")}

    def ctr(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        done = subprocess.run(daemon.enter(["ctr", "--address", str(socket), "--namespace", ctr_namespace, *args]),
                              capture_output=True, text=True, env=env, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"ctr {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}\n"
                                 f"--- containerd log ---\n{daemon.log_tail()}")
        return done

    image = docker_archive(make_rootfs(workdir / "image-root", glibc=True), workdir / "image.tar", IMAGE)
    ctr("image", "import", str(image))
    yield ctr, host, daemon
    ctr("tasks", "ls", check=False)     # the daemon fixture stops containerd and clears its dirs


def runtime_mounts_under(daemon, path: Path) -> list[str]:
    """Mounts naming path in the mount namespace containerd, its shims and the hook run in."""
    return [line for line in daemon.mountinfo().splitlines() if str(path) in line]


INSIDE = r"""
ls /dev | grep nvidia | sort | tr '\n' ' '; echo
for n in /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl; do cat $n >/dev/null 2>/tmp/err; echo "$n: $(cat /tmp/err)"; done
mknod /tmp/nvidia1 c 195 1 && cat /tmp/nvidia1 >/dev/null 2>/tmp/err; echo "made: $(cat /tmp/err)"
nvidia-smi -L
ldconfig -p | grep -E 'libcuda.so.1 |libnvidia-ml.so.1 ' | sed 's/ (.*) => / => /' | sort
ls /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15 /usr/bin/nvidia-smi
"""


def test_ctr_run_gpus_0_gets_exactly_gpu_0(gpu_containerd):
    ctr, host, daemon = gpu_containerd
    gpus = marker_inventory(host)["gpus"]
    before = runtime_mounts_under(daemon, host)

    # the hook ctr writes: our program, found in ctr's PATH, with the argv of docs/reference.md#ctr-gpus
    ctr("containers", "create", "--gpus", "0", IMAGE, "spec-check", "true")
    spec = json.loads(ctr("containers", "info", "spec-check").stdout)["Spec"]
    ctr("containers", "rm", "spec-check")
    hook = spec["hooks"]["prestart"][-1]
    assert hook["args"][:4] == ["containerd", "oci-hook", "--", str(CLI)]
    assert hook["args"][4:] == ["--load-kmods", "configure", "--device=0", "--compute", "--compat32", "--graphics",
                                "--utility", "--video", "--display", "--pid={{pid}}", "{{rootfs}}"]

    out = ctr("run", "--rm", "--gpus", "0", IMAGE, "gpu0", "sh", "-c", INSIDE).stdout.splitlines()
    assert out[0].split() == ["nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidiactl"]
    # allowed by the device cgroup, no driver behind it: ENXIO; the other GPU is not there at all
    assert out[1] == "/dev/nvidia0: cat: can't open '/dev/nvidia0': No such device or address"
    assert out[2] == "/dev/nvidia1: cat: can't open '/dev/nvidia1': No such file or directory"
    assert out[3] == "/dev/nvidiactl: cat: can't open '/dev/nvidiactl': No such device or address"
    # the device cgroup denies the nodes that were not given: GPU 1's, made inside, gives EPERM
    assert out[4] == "made: cat: can't open '/tmp/nvidia1': Operation not permitted"
    assert out[5] == f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {gpus[0]['uuid']})"
    cache = set(out[6:-2])
    assert {"\tlibcuda.so.1 => /usr/lib/x86_64-linux-gnu/libcuda.so.1",
            "\tlibnvidia-ml.so.1 => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"} <= cache
    if (host / "usr/lib/i386-linux-gnu").is_dir():   # --compat32: the 32-bit ones too
        assert "\tlibcuda.so.1 => /usr/lib/i386-linux-gnu/libcuda.so.1" in cache
    assert out[-2:] == ["/usr/bin/nvidia-smi", "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"]
    assert runtime_mounts_under(daemon, host) == before == []


def test_ctr_run_gpus_1_gets_only_gpu_1(gpu_containerd):
    ctr, host, daemon = gpu_containerd
    gpus = marker_inventory(host)["gpus"]
    out = ctr("run", "--rm", "--gpus", "1", IMAGE, "gpu1", "sh", "-c",
              "ls /dev | grep -E '^nvidia[0-9]+$'; nvidia-smi -L").stdout.splitlines()
    # numbered from 0 inside, as NVML numbers the GPUs a process can open
    assert out == ["nvidia1", f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {gpus[1]['uuid']})"]


def test_ctr_run_unknown_gpu_does_not_start(gpu_containerd):
    ctr, host, daemon = gpu_containerd
    done = ctr("run", "--rm", "--gpus", "5", IMAGE, "gpu5", "true", check=False)
    assert done.returncode != 0
    assert "nvidia-container-cli: error: unknown device id '5': GPU index 5 out of range, this host has" in done.stderr
    assert "Traceback" not in done.stderr
    assert ctr("tasks", "ls", "-q").stdout.strip() == ""
    assert runtime_mounts_under(daemon, host) == []
