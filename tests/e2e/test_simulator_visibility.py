"""The visibility rule of the simulated NVML, in real mount namespaces, device cgroups and chroots: a
process sees exactly the GPUs (and MIG devices) whose nodes it can open, numbered from 0."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.simulated_host import create_in_process

pytestmark = pytest.mark.e2e

LIB_DIR = "usr/lib/x86_64-linux-gnu"

PROBE = """
import ctypes, json, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import pynvml as n
try:
    n.nvmlInit()
except n.NVMLError as e:
    print(json.dumps({"init_error": e.value}))
    sys.exit(0)
gpus = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    migs = []
    for k in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            migs.append(n.nvmlDeviceGetUUID(n.nvmlDeviceGetMigDeviceHandleByIndex(h, k)))
        except n.NVMLError_NotFound:
            pass
    gpus.append({"index": n.nvmlDeviceGetIndex(h), "uuid": n.nvmlDeviceGetUUID(h),
                 "minor": n.nvmlDeviceGetMinorNumber(h), "migs": migs})
print(json.dumps({"gpus": gpus}))
"""


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if os.geteuid() != 0 or not shutil.which("gcc") or not shutil.which("unshare"):
        pytest.skip("needs root (mknod, mount namespaces), gcc and unshare")
    root = tmp_path_factory.mktemp("vis") / "host"
    data = create_in_process(root, mig_options=("1=3g.20gb,1g.5gb",))
    return root, data["inventory"], data["majors"]


@pytest.fixture
def probe(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    return path


def nodes_script(dev_dir: str, majors: dict, minors: list[int], caps: list[int], ctl: bool = True) -> str:
    """Shell lines that mount an empty tmpfs over dev_dir and make only the given nodes in it."""
    lines = [f"mount -n -t tmpfs -o mode=755 tmpfs {dev_dir}", f"mkdir {dev_dir}/nvidia-caps",
             f"mknod -m 666 {dev_dir}/null c 1 3"]
    if ctl:
        lines.append(f"mknod -m 666 {dev_dir}/nvidiactl c {majors['nvidia']} 255")
    lines += [f"mknod -m 666 {dev_dir}/nvidia{m} c {majors['nvidia']} {m}" for m in minors]
    lines += [f"mknod -m 444 {dev_dir}/nvidia-caps/nvidia-cap{c} c {majors['nvidia-caps']} {c}" for c in caps]
    return "\n".join(lines)


def in_private_mount_namespace(script: str) -> dict:
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-ec", script],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_host_view_lists_every_gpu_and_mig_device(host, probe):
    root, inv, _ = host
    out = in_private_mount_namespace(f"exec {sys.executable} {probe} {root}/{LIB_DIR}/libnvidia-ml.so.1")
    assert [(g["index"], g["uuid"], g["minor"]) for g in out["gpus"]] == \
           [(g["index"], g["uuid"], g["minor"]) for g in inv["gpus"]]
    assert out["gpus"][1]["migs"] == [m["uuid"] for m in inv["gpus"][1]["mig_devices"]]


def test_only_the_present_node_is_seen_and_renumbered_from_zero(host, probe):
    root, inv, majors = host
    script = nodes_script(f"{root}/dev", majors, minors=[1], caps=[])
    out = in_private_mount_namespace(f"{script}\nexec {sys.executable} {probe} {root}/{LIB_DIR}/libnvidia-ml.so.1")
    gpu1 = inv["gpus"][1]
    assert out == {"gpus": [{"index": 0, "uuid": gpu1["uuid"], "minor": 1, "migs": []}]}


def test_a_mig_device_is_seen_only_with_both_of_its_cap_nodes(host, probe):
    root, inv, majors = host
    second = inv["gpus"][1]["mig_devices"][1]
    first = inv["gpus"][1]["mig_devices"][0]
    lib = f"{root}/{LIB_DIR}/libnvidia-ml.so.1"
    script = nodes_script(f"{root}/dev", majors, minors=[1], caps=[second["gi_cap_minor"], second["ci_cap_minor"],
                                                                  first["gi_cap_minor"]])
    out = in_private_mount_namespace(f"{script}\nexec {sys.executable} {probe} {lib}")
    # the first MIG device lacks its CI cap node; the second is now MIG device 0
    assert out["gpus"][0]["migs"] == [second["uuid"]]


def test_no_nvidiactl_means_driver_not_loaded(host, probe):
    root, _, majors = host
    script = nodes_script(f"{root}/dev", majors, minors=[0, 1], caps=[], ctl=False)
    out = in_private_mount_namespace(f"{script}\nexec {sys.executable} {probe} {root}/{LIB_DIR}/libnvidia-ml.so.1")
    assert out == {"init_error": 9}     # NVML_ERROR_DRIVER_NOT_LOADED


def test_a_library_outside_a_marked_root_looks_in_slash_dev(host, probe, tmp_path):
    """What happens in a container: the injected library has no marker beside its root, so it uses /dev."""
    root, inv, majors = host
    container = tmp_path / "rootfs"
    (container / LIB_DIR).mkdir(parents=True)
    lib = container / LIB_DIR / "libnvidia-ml.so.1"
    shutil.copy2(root / LIB_DIR / "libnvidia-ml.so.550.54.15", lib)
    script = nodes_script("/dev", majors, minors=[0], caps=[])
    out = in_private_mount_namespace(f"{script}\nexec {sys.executable} {probe} {lib}")
    assert out == {"gpus": [{"index": 0, "uuid": inv["gpus"][0]["uuid"], "minor": 0, "migs": []}]}


def test_a_node_the_device_cgroup_denies_counts_as_absent(host, probe):
    root, inv, majors = host
    devices = Path("/sys/fs/cgroup/devices")
    if not (devices / "devices.deny").exists():
        pytest.skip("no cgroup v1 devices controller")
    cgroup = devices / f"nvsim-test-{uuid.uuid4().hex[:12]}"
    cgroup.mkdir()
    try:
        (cgroup / "devices.deny").write_text(f"c {majors['nvidia']}:0 rwm")
        script = (f"echo $$ > {cgroup}/cgroup.procs\n"
                  f"exec {sys.executable} {probe} {root}/{LIB_DIR}/libnvidia-ml.so.1")
        done = subprocess.run(["sh", "-ec", script], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
    finally:
        cgroup.rmdir()
    # GPU 0's node gives EPERM inside the cgroup: only GPU 1 is listed, as index 0
    assert [(g["index"], g["uuid"]) for g in out["gpus"]] == [(0, inv["gpus"][1]["uuid"])]


def make_chroot(base: Path, root: Path, majors: dict, minors: list[int], caps: list[int], ctl: bool = True) -> Path:
    """A minimal container-like root: only the static nvidia-smi and the given device nodes."""
    (base / "usr/bin").mkdir(parents=True)
    (base / "dev/nvidia-caps").mkdir(parents=True)
    shutil.copy2(root / "usr/bin/nvidia-smi", base / "usr/bin/nvidia-smi")
    nodes = [("nvidiactl", majors["nvidia"], 255)] if ctl else []
    nodes += [(f"nvidia{m}", majors["nvidia"], m) for m in minors]
    nodes += [(f"nvidia-caps/nvidia-cap{c}", majors["nvidia-caps"], c) for c in caps]
    for name, major, minor in nodes:
        os.mknod(base / "dev" / name, 0o20666, os.makedev(major, minor))
    return base


def smi_in(chroot: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["chroot", str(chroot), "/usr/bin/nvidia-smi", *args], capture_output=True, text=True)


def test_static_nvidia_smi_in_a_bare_root_sees_only_injected_nodes(host, tmp_path):
    root, inv, majors = host
    first = inv["gpus"][1]["mig_devices"][0]
    chroot = make_chroot(tmp_path / "ctr", root, majors, minors=[1], caps=[first["gi_cap_minor"], first["ci_cap_minor"]])
    done = smi_in(chroot, "-L")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {inv['gpus'][1]['uuid']})\n"
                           f"  MIG 3g.20gb     Device  0: (UUID: {first['uuid']})\n")


def test_nvidia_smi_exit_codes_without_driver_or_devices(host, tmp_path):
    root, _, majors = host
    no_ctl = smi_in(make_chroot(tmp_path / "a", root, majors, minors=[0], caps=[], ctl=False), "-L")
    assert no_ctl.returncode == 9 and "couldn't communicate with the NVIDIA driver" in no_ctl.stderr
    no_gpu = smi_in(make_chroot(tmp_path / "b", root, majors, minors=[], caps=[]))
    assert no_gpu.returncode == 6 and no_gpu.stdout == "No devices were found\n"
