"""`nvidia-ctk cdi generate` on a simulated host (2 GPUs, GPU 1 in MIG mode with two MIG devices),
run by real podman 4.3 (runc): each CDI name gives the container exactly its devices, the driver
libraries with their links (made by nvidia-cdi-hook at createRuntime), libcuda.so.1 in the
container's ld cache, and an nvidia-smi that lists what was asked for.

The image is built here without a registry: busybox + the host's glibc + a static ldconfig.
The spec goes to the private podman's own /run/cdi (tests.e2e.podman_env), never the machine's.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cdi.spec import Hook
from cdi.spec_file import load_spec_file
from tests.e2e.engines import short_tempdir, start_podman, stop_podman
from tests.e2e.host_setup import ensure_hugetlb_on_v1
from tests.e2e.podman_env import installed_spec
from tests.e2e.rootfs import make_rootfs, rootfs_tar
from tests.support.simulated_host import marker_inventory, simulate_create

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
NVIDIA_CTK = str(BIN / "nvidia-ctk")
IMAGE = "localhost/gct-glibc:latest"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
VERSION = "550.54.15"
# What the container reports about itself; one command per run keeps the podman runs few.
PROBE = ("ls /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-caps/* 2>/dev/null | sed 's/^/node /'; "
         f"for l in {LIBDIR}/libcuda.so.1 {LIBDIR}/libcuda.so {LIBDIR}/libnvidia-ml.so.1 {LIBDIR}/libnvidia-ml.so "
         f"{LIBDIR}/libnvidia-opticalflow.so {LIBDIR}/libGLX_indirect.so.0 {LIBDIR}/gbm/nvidia-drm_gbm.so; do "
         "echo \"link $l -> $(readlink $l)\"; done; "
         "ldconfig -p | grep -q 'libcuda.so.1 .*=> " + LIBDIR + "/libcuda.so.1' && echo ldcache-ok; "
         "echo \"env NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES\"; "
         "nvidia-smi -L | sed 's/^/smi /'; "
         "touch /gct-rw-probe 2>/dev/null && echo rootfs-rw || echo rootfs-ro")


@pytest.fixture(scope="module")
def setup():
    if os.geteuid() != 0:
        pytest.skip("podman e2e needs root")
    for program in ("podman", "runc", "gcc"):
        if shutil.which(program) is None:
            pytest.skip(f"not installed: {program}")
    if not (BIN / "nvidia-cdi-hook").exists():
        pytest.skip("nvidia-cdi-hook launcher not installed (run `make venv`)")
    ensure_hugetlb_on_v1()
    work = short_tempdir("gct-cdigen-")
    podman = None
    try:
        host = work / "host"
        simulate_create(host)
        spec_file = work / "nvidia.yaml"
        subprocess.run([NVIDIA_CTK, "cdi", "generate", "--driver-root", str(host), "--output", str(spec_file)],
                       check=True, capture_output=True)
        hooks = work / "hooks.d"
        hooks.mkdir()
        (work / "p").mkdir()
        podman = start_podman(hooks, workdir=work / "p")
        tar = rootfs_tar(make_rootfs(work / "rootfs", glibc=True), work / "rootfs.tar")
        podman("import", str(tar), IMAGE)
        podman.generated_spec = spec_file   # for tests that build variants of it
        with installed_spec(podman, load_spec_file(spec_file), ".yaml"):
            yield podman, marker_inventory(host)
    finally:
        if podman is not None:
            stop_podman(podman)
        shutil.rmtree(work, ignore_errors=True)


def run(podman, device: str, runtime: str = "runc", image: str = IMAGE, extra: tuple[str, ...] = ()) -> list[str]:
    argv = podman.argv("run", "--rm", "--network", "none", *extra, "--device", f"nvidia.com/gpu={device}", image,
                       "sh", "-c", PROBE)
    argv[argv.index("--runtime") + 1] = runtime
    result = subprocess.run(argv, capture_output=True, text=True, env=podman.env, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def nodes(lines: list[str]) -> set[str]:
    return {line.split(" ", 1)[1] for line in lines if line.startswith("node ")}


def smi(lines: list[str]) -> list[str]:
    return [line[4:] for line in lines if line.startswith("smi ")]


# crun runs hooks with the bundle as cwd, runc createContainer hooks with the rootfs: the hook must not care
@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_gpu_0_gets_its_node_the_libraries_and_nvidia_smi_sees_only_it(setup, runtime):
    if shutil.which(runtime) is None:
        pytest.skip(f"not installed: {runtime}")
    podman, inventory = setup
    lines = run(podman, "0", runtime)
    assert nodes(lines) == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"}
    assert f"link {LIBDIR}/libcuda.so.1 -> libcuda.so.{VERSION}" in lines
    assert f"link {LIBDIR}/libcuda.so -> libcuda.so.1" in lines
    assert f"link {LIBDIR}/libnvidia-ml.so.1 -> libnvidia-ml.so.{VERSION}" in lines
    # the links NVIDIA's spec makes too: dlopen() names, GLVND's indirect GLX, Mesa's GBM backend
    assert {f"link {LIBDIR}/libnvidia-ml.so -> libnvidia-ml.so.1",
            f"link {LIBDIR}/libnvidia-opticalflow.so -> libnvidia-opticalflow.so.1",
            f"link {LIBDIR}/libGLX_indirect.so.0 -> libGLX_nvidia.so.{VERSION}",
            f"link {LIBDIR}/gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1"} <= set(lines), lines
    assert "ldcache-ok" in lines
    assert "env NVIDIA_VISIBLE_DEVICES=void" in lines
    gpu0 = inventory["gpus"][0]
    listed = smi(lines)
    assert len(listed) == 1 and listed[0].startswith("GPU 0:") and gpu0["uuid"] in listed[0], listed


@pytest.mark.parametrize("by", ["index", "uuid"])
def test_mig_device_gets_parent_node_and_its_two_cap_nodes_only(setup, by):
    podman, inventory = setup
    mig0, mig1 = inventory["gpus"][1]["mig_devices"]
    lines = run(podman, "1:0" if by == "index" else mig0["uuid"])
    expected = {"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm",
                f"/dev/nvidia-caps/nvidia-cap{mig0['gi_cap_minor']}",
                f"/dev/nvidia-caps/nvidia-cap{mig0['ci_cap_minor']}"}
    assert nodes(lines) == expected  # nothing of GPU 0, nothing of the other MIG device
    assert f"nvidia-cap{mig1['gi_cap_minor']}" not in "\n".join(lines)
    listed = "\n".join(smi(lines))
    assert mig0["uuid"] in listed and mig1["uuid"] not in listed
    assert inventory["gpus"][0]["uuid"] not in listed


def test_all_gets_every_device(setup):
    podman, inventory = setup
    lines = run(podman, "all")
    caps = {f"/dev/nvidia-caps/nvidia-cap{m[k]}" for m in inventory["gpus"][1]["mig_devices"]
            for k in ("gi_cap_minor", "ci_cap_minor")}
    assert nodes(lines) == {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"} | caps
    listed = "\n".join(smi(lines))
    for gpu in inventory["gpus"]:
        assert gpu["uuid"] in listed
    for mig in inventory["gpus"][1]["mig_devices"]:
        assert mig["uuid"] in listed
    assert "ldcache-ok" in lines



def test_a_read_only_container_still_gets_its_links_and_cache(setup):
    # createRuntime (and createContainer) hooks run before the runtime makes the rootfs read-only
    podman, _ = setup
    lines = run(podman, "0", extra=("--read-only",))
    assert "rootfs-ro" in lines
    assert f"link {LIBDIR}/libcuda.so.1 -> libcuda.so.{VERSION}" in lines
    assert "ldcache-ok" in lines and len(smi(lines)) == 1


def test_a_spec_in_nvidias_style_runs_with_our_hook(setup, tmp_path):
    # NVIDIA's generator writes one hook entry per subcommand, and newer ones add subcommands we do
    # not have: each entry runs, the unknown one only warns, and the container starts complete.
    podman, _ = setup
    spec = load_spec_file(podman.generated_spec)
    (ours,) = spec.container_edits.hooks
    args = ours.args[1:]
    split = args.index("update-ldcache")
    entries = [["nvidia-cdi-hook", *args[:split]], ["nvidia-cdi-hook", *args[split:]],
               ["nvidia-cdi-hook", "enable-cuda-compat", "--host-driver-version", VERSION]]
    spec.container_edits.hooks = [Hook(hook_name="createContainer", path=ours.path, args=a, env=list(ours.env))
                                  for a in entries]
    spec.kind = "upstream.example/gpu"
    with installed_spec(podman, spec, ".json"):
        argv = podman.argv("run", "--rm", "--network", "none", "--device", "upstream.example/gpu=0", IMAGE,
                           "sh", "-c", PROBE)
        result = subprocess.run(argv, capture_output=True, text=True, env=podman.env, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"link {LIBDIR}/libcuda.so -> libcuda.so.1" in lines
    assert "ldcache-ok" in lines and len(smi(lines)) == 1
