"""An MPS share in a real container: `nvidia-ctk mps start` gives GPU 0 of a simulated host 2 shares, a CDI
spec holds the share's edits (cdi.mps.share_edits) as device nvidia.com/gpu=0::0, and runc, through our
shim, runs a container asking for GPU 0 and that share. Inside, the simulated CUDA client
(gct-cuda-mps-client, copied into the image) connects through CUDA_MPS_PIPE_DIRECTORY and reads 50% of the
threads and half the memory from the daemon; its own CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 does not raise
that, and the control program (injected with the driver's compute binaries) cannot change the daemon from
the container. Everything runs in a private mount namespace (the shm tmpfs is never the machine's) and the
daemon is stopped at the end."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.e2e.bundle import make_bundle
from tests.e2e.shim_host import NVIDIA_CTK, SHIM, ShimLifecycle, build_gpu_host, shim_env, write_shim_config
from tests.support.mountns import run_in_private_mount_ns

pytestmark = pytest.mark.e2e

REPORT = ("gct-cuda-mps-client; echo ---; CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 gct-cuda-mps-client; echo ---; "
          "echo set_default_active_thread_percentage 100 | nvidia-cuda-mps-control; echo ---; "
          "echo from-the-container > /dev/shm/mark; ls /tmp/nvidia-mps; echo ---; "
          "rm -f /tmp/nvidia-mps/control 2>&1 | sed 's/.*: //'; touch /tmp/nvidia-mps/control.fake 2>&1 | sed 's/.*: //'")


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (device nodes, mounts, runc)")
    if not SHIM.exists() or shutil.which("runc") is None:
        pytest.skip("needs the shim (make venv) and runc")
    return build_gpu_host(tmp_path_factory.mktemp("mps-e2e"))


def _ctk(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([str(NVIDIA_CTK), *args], capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr
    return done


def _share_in_a_container(gpu_host, work) -> dict:
    """(In a private mount namespace.) The container's output, the daemon's status, the shm's files."""
    from cdi.mps import share_edits
    from cdi.spec import Device, Spec
    from cdi.spec_file import write_spec

    mps_root = work / "mps"
    _ctk("mps", "start", "--device", "0", "--replicas", "2", "--mps-root", str(mps_root),
         "--driver-root", str(gpu_host.root))
    uuid = gpu_host.gpu_uuids[0]
    try:
        spec = Spec(version=None, kind="nvidia.com/gpu",
                    devices=[Device(name="0::0", container_edits=share_edits(str(mps_root), uuid))])
        write_spec(spec, gpu_host.spec_dir / "mps-shares.json")
        bundle = make_bundle(work / "bundle", ["sh", "-c", REPORT], glibc=True,
                             annotations={"cdi.k8s.io/gct-mps": "nvidia.com/gpu=0,nvidia.com/gpu=0::0"})
        shutil.copy2(gpu_host.root / "usr/bin/gct-cuda-mps-client", bundle / "rootfs/usr/bin/gct-cuda-mps-client")
        config = write_shim_config(work / "config.toml", gpu_host, runtime="runc", mode="cdi")
        code, output, stderr = ShimLifecycle(shim_env(config, work / "cache"), work / "state").run(bundle)
        status = json.loads(_ctk("mps", "status", "--mps-root", str(mps_root), "--format", "json").stdout)
        shm = {name: (mps_root / uuid / "shm" / name).read_text() for name in os.listdir(mps_root / uuid / "shm")}
        return {"code": code, "output": output, "stderr": stderr, "status": status, "shm": shm}
    finally:
        (gpu_host.spec_dir / "mps-shares.json").unlink(missing_ok=True)
        _ctk("mps", "stop", "--all", "--mps-root", str(mps_root))


def test_a_share_reads_its_limits_in_a_container_and_cannot_raise_them(gpu_host, tmp_path):
    seen = run_in_private_mount_ns(_share_in_a_container, gpu_host, tmp_path)
    assert seen["code"] == 0, seen["stderr"]
    plain, raised, control, files, writes = seen["output"].split("---\n")
    half = 20 << 30                                     # an A100 40GB in 2 shares
    uuid = gpu_host.gpu_uuids[0]
    for report in (plain, raised):
        values = dict(line.split("=", 1) for line in report.splitlines() if not line.startswith("device="))
        assert values["pipe_directory"] == "/tmp/nvidia-mps"
        assert values["daemon_active_thread_percentage"] == values["active_thread_percentage"] == "50.0"
        assert f"device=0 name={uuid} pinned_mem_limit={half} daemon_pinned_mem_limit={half}" in report
    assert control == "Refused: set_default_active_thread_percentage only from the daemon's own PID namespace\n"
    assert files.split() == ["control", "nvidia-cuda-mps-control.pid"]
    # the pipe folder is read-only in the container: no share can replace the socket the others use
    assert writes.splitlines() == ["Read-only file system", "Read-only file system"]
    # the container's /dev/shm is the daemon's tmpfs, and the daemon kept its limits
    assert seen["shm"] == {"mark": "from-the-container\n"}
    [row] = seen["status"]
    assert row["uuid"] == uuid and row["running"] and row["daemon_active_thread_percentage"] == 50.0
    assert len(row["servers"]) == 1                     # the client's server, started for it
