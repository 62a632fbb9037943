"""GPU containers for the reliability tests, on the e2e helpers: bundles (tests/e2e/bundle.py) on copies
of one glibc rootfs (tests/e2e/rootfs.py), runs through the shim (tests/e2e/shim_host.py), and what each
request must show inside the container."""
from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.bundle import make_bundle
from tests.e2e.rootfs import make_rootfs
from tests.e2e.shim_host import GPU_REPORT, GpuHost, ShimLifecycle, shim_env, write_shim_config
from tests.support import leftovers

MODEL = "NVIDIA A100-SXM4-40GB"
# what the containers ask for, in turn (GPU 1 is in MIG mode: not a device of its own in the CDI spec)
REQUESTS = ("0", "1:0", "1:1")
MODES = ("legacy", "cdi", "jit-cdi")
COMMON_NODES = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"]
# legacy and jit-cdi give what the capabilities need (nvidia-modeset only with display, as
# libnvidia-container does); the generated spec's devices carry every node
BY_CAPABILITY_NODES = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]


def template_rootfs(directory: Path) -> Path:
    return make_rootfs(directory / "template-rootfs", glibc=True)


REPORT_SCRIPT = "/gpu-report.sh"


def gpu_bundle(directory: Path, template: Path, request: str, args: list[str] | None = None) -> Path:
    """A bundle asking for `request` (NVIDIA_VISIBLE_DEVICES) on a copy of the template rootfs; without
    args the container runs GPU_REPORT from a script in its rootfs, so that config.json holds no
    backslash (GPU_REPORT has escapes): the launcher leaves such a config.json to Python, and the
    create cache would never be used."""
    directory.mkdir(parents=True)
    subprocess.run(["cp", "-a", str(template), str(directory / "rootfs")], check=True)
    if args is None:
        (directory / "rootfs" / REPORT_SCRIPT.lstrip("/")).write_text(GPU_REPORT)
        args = ["sh", REPORT_SCRIPT]
    return make_bundle(directory, args, env=[f"NVIDIA_VISIBLE_DEVICES={request}"], rootfs=directory / "rootfs")


def lifecycle(host: GpuHost, directory: Path, mode: str) -> ShimLifecycle:
    directory.mkdir(parents=True, exist_ok=True)
    config = write_shim_config(directory / "config.toml", host, runtime="runc", mode=mode)
    return ShimLifecycle(shim_env(config, directory / "cache"), directory / "state")


def expected(host: GpuHost, request: str, mode: str) -> dict:
    """The device nodes and `nvidia-smi -L` lines a container asking for request must see."""
    common = COMMON_NODES if mode == "cdi" else BY_CAPABILITY_NODES
    if ":" not in request:
        index = int(request)
        return {"dev": sorted([f"nvidia{index}", *common]),
                "smi": [f"GPU 0: {MODEL} (UUID: {host.gpu_uuids[index]})"]}
    gpu = int(request.split(":")[0])
    gi, ci = host.mig_caps[request]
    return {"dev": sorted([f"nvidia{gpu}", *common, "nvidia-caps", f"nvidia-caps/nvidia-cap{gi}",
                           f"nvidia-caps/nvidia-cap{ci}"]),
            "smi": [f"GPU 0: {MODEL} (UUID: {host.gpu_uuids[gpu]})",
                    f"  MIG 1g.5gb      Device  0: (UUID: {host.mig_uuids[request]})"]}


def container_ids(*lifecycles: ShimLifecycle) -> list[str]:
    """Every container id the lifecycles used (the last argument of their create calls)."""
    return [call[-1] for one in lifecycles for call in one.calls if "create" in call]


def leftovers_of(before: leftovers.Snapshot, markers: list[str]) -> dict[str, list[str]]:
    """What appeared on the machine since before and names one of markers (our temp dirs, container ids)."""
    import os

    return leftovers.certainly_ours(leftovers.new_since(before, leftovers.take(), os.getpid()), markers)
