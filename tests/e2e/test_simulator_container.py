"""The simulated host inside a real runc container: the container is given one GPU's device nodes (and
one MIG device's capability nodes) the way an OCI spec does it, and the static nvidia-smi in it sees
exactly that GPU, as index 0, because the library's visibility rule looks at the container's /dev."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid

import pytest

from tests.support.simulated_host import create_in_process

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if os.geteuid() != 0 or not shutil.which("gcc") or not shutil.which("runc"):
        pytest.skip("needs root, gcc and runc")
    root = tmp_path_factory.mktemp("ctr") / "host"
    data = create_in_process(root, mig_options=("1=3g.20gb,1g.5gb",))
    return root, data["inventory"], data["majors"]


def run_in_runc(bundle, root, args: list[str], devices: list[tuple[str, int, int]]) -> subprocess.CompletedProcess:
    """A rootfs holding only nvidia-smi; `devices` (path, major, minor) go into linux.devices with
    matching cgroup allow rules, which is how CDI and the legacy hook hand a container its GPU."""
    rootfs = bundle / "rootfs"
    (rootfs / "usr/bin").mkdir(parents=True)
    shutil.copy2(root / "usr/bin/nvidia-smi", rootfs / "usr/bin/nvidia-smi")
    subprocess.run(["runc", "spec"], cwd=bundle, check=True)
    config = json.loads((bundle / "config.json").read_text())
    config["process"].update(terminal=False, args=args)
    config["linux"]["devices"] = [{"path": p, "type": "c", "major": ma, "minor": mi, "fileMode": 0o666}
                                  for p, ma, mi in devices]
    config["linux"]["resources"]["devices"] += [{"allow": True, "type": "c", "major": ma, "minor": mi,
                                                  "access": "rw"} for _, ma, mi in devices]
    (bundle / "config.json").write_text(json.dumps(config))
    state = bundle / "state"
    container = f"nvsim-{uuid.uuid4().hex[:12]}"
    try:
        return subprocess.run(["runc", "--root", str(state), "run", "--bundle", str(bundle), container],
                              capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["runc", "--root", str(state), "delete", "--force", container], capture_output=True)


def test_a_container_with_gpu1_and_one_mig_device_sees_just_those(host, tmp_path):
    root, inv, majors = host
    gpu1 = inv["gpus"][1]
    mig = gpu1["mig_devices"][1]
    devices = [("/dev/nvidiactl", majors["nvidia"], 255), ("/dev/nvidia1", majors["nvidia"], 1),
               (f"/dev/nvidia-caps/nvidia-cap{mig['gi_cap_minor']}", majors["nvidia-caps"], mig["gi_cap_minor"]),
               (f"/dev/nvidia-caps/nvidia-cap{mig['ci_cap_minor']}", majors["nvidia-caps"], mig["ci_cap_minor"])]
    done = run_in_runc(tmp_path, root, ["/usr/bin/nvidia-smi", "-L"], devices)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {gpu1['uuid']})\n"
                           f"  MIG 1g.5gb      Device  0: (UUID: {mig['uuid']})\n")


def test_a_container_without_nvidiactl_has_no_driver(host, tmp_path):
    root, _, majors = host
    done = run_in_runc(tmp_path, root, ["/usr/bin/nvidia-smi"], [("/dev/nvidia0", majors["nvidia"], 0)])
    assert done.returncode == 9 and "couldn't communicate with the NVIDIA driver" in done.stderr
