"""`docker run --gpus` on Docker 20.10 with our prestart hook, on a simulated host.

A private dockerd starts with the venv's bin first in its PATH: it looks up
nvidia-container-runtime-hook there once, at start, and adds it as a prestart hook (with its own
environment, which carries NVIDIA_CTK_CONFIG_FILE_PATH to a config naming the simulated driver root)
to every container run with --gpus. The image is a `docker import` of a busybox + glibc rootfs.
"""
from __future__ import annotations

import os
import shutil

import pytest

from tests.e2e.engines import docker, short_tempdir, start_dockerd, stop_daemon
from tests.e2e.hook_support import (BIN, LIBDIR, PROBE, make_simulated_host, mount_table, nodes, opened,
                                    require_root_and, smi, write_config)
from tests.e2e.rootfs import make_rootfs, rootfs_tar

pytestmark = pytest.mark.e2e
IMAGE = "gct-hook-glibc:latest"
VERSION = "550.54.15"
EPERM, ENXIO = "Operation not permitted", "No such device or address"


@pytest.fixture(scope="module")
def dockerd():
    require_root_and("dockerd", "containerd", "runc", "gcc")
    work = short_tempdir("gct-hookd-")
    daemon = None
    try:
        inventory = make_simulated_host(work / "host")
        config = write_config(work / "config.toml", work / "host")
        (work / "daemon.json").write_text('{"storage-driver": "vfs"}\n')
        path = f"{BIN}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        (work / "d").mkdir()
        daemon = start_dockerd(work / "daemon.json", workdir=work / "d",
                               env={"PATH": path, "NVIDIA_CTK_CONFIG_FILE_PATH": str(config)})
        tar = rootfs_tar(make_rootfs(work / "rootfs", glibc=True), work / "rootfs.tar")
        docker(daemon, "import", str(tar), IMAGE)
        yield daemon, inventory
    finally:
        if daemon is not None:
            docker(daemon, "rm", "--force", *_all_containers(daemon), check=False)
            stop_daemon(daemon)
        shutil.rmtree(work, ignore_errors=True)


def _all_containers(daemon) -> list[str]:
    return docker(daemon, "ps", "-aq", check=False).stdout.split() or ["none"]


def run_gpus(daemon, gpus: str, *extra: str, script: str = PROBE):
    before = mount_table()
    result = docker(daemon, "run", "--rm", "--network", "none", "--gpus", gpus, *extra, IMAGE, "sh", "-c", script,
                    check=False)
    assert mount_table() == before, "the host's mount table changed"
    return result


def gpu_uuids(inventory, *indexes: int) -> list[str]:
    return [inventory["gpus"][i]["uuid"] for i in indexes]


def test_gpus_all(dockerd):
    daemon, inventory = dockerd
    result = run_gpus(daemon, "all")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # "all" (Inventory.all_devices): GPU 0, and GPU 1 (in MIG mode) through its MIG devices
    caps = {f"/dev/nvidia-caps/nvidia-cap{m[k]}" for m in inventory["gpus"][1]["mig_devices"]
            for k in ("gi_cap_minor", "ci_cap_minor")}
    assert nodes(lines) == {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm",
                            "/dev/nvidia-uvm-tools"} | caps
    listed = "\n".join(smi(lines))
    assert all(uuid in listed for uuid in gpu_uuids(inventory, 0, 1))
    assert all(m["uuid"] in listed for m in inventory["gpus"][1]["mig_devices"])
    assert f"link {LIBDIR}/libcuda.so.1 -> libcuda.so.{VERSION}" in lines
    assert "ldcache-ok" in lines
    assert ENXIO in opened(lines, 0) and ENXIO in opened(lines, 1)


def test_gpus_device_1(dockerd):
    daemon, inventory = dockerd
    result = run_gpus(daemon, '"device=1"')
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "/dev/nvidia1" in nodes(lines) and "/dev/nvidia0" not in nodes(lines)
    listed = "\n".join(smi(lines))
    assert gpu_uuids(inventory, 1)[0] in listed and gpu_uuids(inventory, 0)[0] not in listed
    assert "ldcache-ok" in lines
    assert EPERM in opened(lines, 0) and ENXIO in opened(lines, 1)


def test_gpus_count_2(dockerd):
    daemon, inventory = dockerd
    result = run_gpus(daemon, "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert {"/dev/nvidia0", "/dev/nvidia1"} <= nodes(lines)
    listed = "\n".join(smi(lines))
    assert all(uuid in listed for uuid in gpu_uuids(inventory, 0, 1))


def test_gpus_capabilities_compute_utility(dockerd):
    daemon, inventory = dockerd
    # a bare capabilities request means one GPU: GPU 0
    result = run_gpus(daemon, '"capabilities=compute,utility"')
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert nodes(lines) == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    assert f"link {LIBDIR}/libcuda.so.1 -> libcuda.so.{VERSION}" in lines
    assert f"link {LIBDIR}/libnvidia-ml.so.1 -> libnvidia-ml.so.{VERSION}" in lines
    assert "ldcache-ok" in lines
    listed = smi(lines)
    assert len(listed) == 1 and gpu_uuids(inventory, 0)[0] in listed[0]
    assert EPERM in opened(lines, 1)


def test_require_cuda_99_stops_the_container_with_our_message(dockerd):
    daemon, _ = dockerd
    result = run_gpus(daemon, "all", "-e", "NVIDIA_REQUIRE_CUDA=cuda>=99.0", script="echo STARTED")
    assert result.returncode != 0
    assert "STARTED" not in result.stdout
    assert "nvidia-container-runtime-hook: error: unsatisfied condition 'cuda>=99.0'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_device_fails_clearly(dockerd):
    daemon, _ = dockerd
    result = run_gpus(daemon, '"device=7"', script="echo STARTED")
    assert result.returncode != 0
    assert "STARTED" not in result.stdout
    assert ("nvidia-container-runtime-hook: error: unknown device id '7': GPU index 7 out of range, "
            "this host has") in result.stderr, result.stderr


def test_more_gpus_than_the_host_has_names_what_the_user_typed(dockerd):
    """Issue 27.5: `docker run --gpus 5` on a 2-GPU host said "unknown device id '2' (NVIDIA_VISIBLE_DEVICES)",
    a variable the user never set; docker writes 0,1,2,3,4 into it, and the line names --gpus 5."""
    daemon, _ = dockerd
    result = run_gpus(daemon, "5", script="echo STARTED")
    assert result.returncode != 0 and "STARTED" not in result.stdout
    assert ("nvidia-container-runtime-hook: error: 5 GPUs asked for (docker --gpus 5, or NVIDIA_VISIBLE_DEVICES="
            "0,1,2,3,4): this host has 2 GPUs (0-1); ask for fewer (NVIDIA_VISIBLE_DEVICES)") in result.stderr, \
        result.stderr


def test_container_without_gpus_is_left_alone(dockerd):
    daemon, _ = dockerd
    result = docker(daemon, "run", "--rm", "--network", "none", IMAGE, "sh", "-c", PROBE)
    lines = result.stdout.splitlines()
    assert nodes(lines) == set() and smi(lines) == []


def test_read_only_container(dockerd):
    # docker applies --read-only after the prestart hooks: injection still works
    daemon, inventory = dockerd
    result = run_gpus(daemon, '"device=0"', "--read-only", script=PROBE.replace("/tmp/probe", "/dev/shm/probe"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "/dev/nvidia0" in nodes(lines) and "ldcache-ok" in lines
    assert len(smi(lines)) == 1


def test_privileged_container_may_have_mig_config_and_monitor(dockerd):
    # CAP_SYS_ADMIN in the bounding set is what counts (--privileged itself cannot run on this host:
    # root here lacks capabilities runc would apply)
    daemon, _ = dockerd
    result = run_gpus(daemon, '"device=1"', "--cap-add", "SYS_ADMIN", "-e", "NVIDIA_MIG_CONFIG_DEVICES=all",
                      "-e", "NVIDIA_MIG_MONITOR_DEVICES=all")
    assert result.returncode == 0, result.stderr
    found = nodes(result.stdout.splitlines())
    assert {"/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"} <= found
