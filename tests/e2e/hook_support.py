"""Shared set-up of the prestart hook's e2e and security tests: a simulated GPU host, a config.toml
naming it, runs through the runtime shim in legacy mode, and what a container reports about itself.

Nothing is written outside temp dirs: the config is passed as NVIDIA_CTK_CONFIG_FILE_PATH.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.simulated_host import DEFAULT_MIG, marker_inventory, simulate_create

BIN = Path(sys.executable).parent
HOOK = BIN / "nvidia-container-runtime-hook"
SHIM_LEGACY = BIN / "nvidia-container-runtime.legacy"
NVIDIA_CTK = BIN / "nvidia-ctk"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
HOOK_PATH_ENV = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"

# What a container prints about its GPUs: one tagged line per fact.
PROBE = (
    "for n in /dev/nvidia* /dev/nvidia-caps/* /dev/nvidia-caps-imex-channels/*; do "
    "[ -c \"$n\" ] && echo \"node $n\"; done; "
    f"for l in {LIBDIR}/libcuda.so.1 {LIBDIR}/libcuda.so {LIBDIR}/libnvidia-ml.so.1; do "
    "echo \"link $l -> $(readlink $l)\"; done; "
    "ldconfig -p | grep -q 'libcuda.so.1 .*=> " + LIBDIR + "/libcuda.so.1' && echo ldcache-ok; "
    "grep -q ' /dev/nvidia[0-9]* .*nodev' /proc/self/mountinfo && echo NODEV-ON-NODE; "
    "nvidia-smi -L | sed 's/^/smi /'; "
    # a node of each GPU, made here: the device cgroup decides open() (EPERM denied, ENXIO allowed)
    "for m in 0 1; do mknod /tmp/probe$m c 195 $m && "
    "{ (exec 3<>/tmp/probe$m) 2>&1 | sed \"s/^/open$m /\"; rm -f /tmp/probe$m; }; done; true"
)


def require_root_and(*programs: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    if not HOOK.exists():
        pytest.skip("nvidia-container-runtime-hook launcher not installed (run `make venv`)")


def make_simulated_host(path: Path, gpus: int = 2, mig: str | None = DEFAULT_MIG,
                        imex_channels: int = 0) -> dict:
    """A simulated host at path; returns its inventory (from the marker file)."""
    return marker_inventory(simulate_create(path, gpus=gpus, mig=mig, imex_channels=imex_channels))


def write_config(path: Path, driver_root: Path | str, runtime: str = "runc", extra: str = "") -> Path:
    path.write_text(f'{extra}\n[nvidia-container-cli]\nroot = "{driver_root}"\n\n'
                    f'[nvidia-container-runtime]\nruntimes = ["{runtime}"]\n')
    return path


def with_mknod(bundle: Path) -> Path:
    """Give the container CAP_MKNOD (as docker does), so it can make nodes the cgroup then judges."""
    config = json.loads((bundle / "config.json").read_text())
    for kind in ("bounding", "effective", "permitted"):
        config["process"]["capabilities"][kind].append("CAP_MKNOD")
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


def run_through_shim(bundle: Path, config: Path, state_root: Path, timeout: float = 60,
                     extra_env: dict | None = None) -> subprocess.CompletedProcess:
    """`nvidia-container-runtime.legacy run` of the bundle (the shim adds our prestart hook and execs
    the runtime named in the config); the container is deleted afterwards. The shim's cache goes next
    to the state root (else it would be /run/nvidia-container-toolkit, and stay there). extra_env: more
    of the shim's environment (as an engine's)."""
    cid = f"gct-hook-{uuid.uuid4().hex[:10]}"
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
           "NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "NVIDIA_CTK_CACHE_DIR": str(state_root.parent / "shim-cache"),
           **(extra_env or {})}
    try:
        return subprocess.run([str(SHIM_LEGACY), "--root", str(state_root), "run", "--bundle", str(bundle), cid],
                              capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    finally:
        subprocess.run([str(SHIM_LEGACY), "--root", str(state_root), "delete", "--force", cid],
                       capture_output=True, env=env)


def nodes(lines: list[str]) -> set[str]:
    return {line.split(" ", 1)[1] for line in lines if line.startswith("node ")}


def smi(lines: list[str]) -> list[str]:
    return [line[4:] for line in lines if line.startswith("smi ")]


def opened(lines: list[str], minor: int) -> str:
    """The error text of opening a node 195:minor made in the container ("" when it opened)."""
    return " ".join(line.split(" ", 1)[1] for line in lines if line.startswith(f"open{minor} "))


def mount_table(*markers: str) -> set[str]:
    """The host's mount table without mount ids (they change), limited to entries that could come from
    an injection: anything naming nvidia, a driver file, or one of `markers` (e.g. the test's temp dirs).
    Other engineers' daemons mount and unmount their own things meanwhile; those are not compared."""
    keys = ("nvidia", "libcuda", "/proc/driver", "ld.so.cache", *markers)
    with open("/proc/self/mountinfo") as f:
        return {" ".join(line.split()[2:]) for line in f if any(k in line for k in keys)}


def add_hook_entry(bundle: Path, config: Path) -> Path:
    """Our prestart hook in config.json exactly as docker adds it (absolute path, argv[0] the program
    name, a non-empty env), for runs without the shim."""
    spec = json.loads((bundle / "config.json").read_text())
    spec.setdefault("hooks", {}).setdefault("prestart", []).append({
        "path": str(HOOK), "args": ["nvidia-container-runtime-hook", "prestart"],
        "env": [HOOK_PATH_ENV, f"NVIDIA_CTK_CONFIG_FILE_PATH={config}"]})
    (bundle / "config.json").write_text(json.dumps(spec))
    return bundle


def run_with_runtime(runtime: str, bundle: Path, state_root: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    """`<runtime> run` of the bundle as it is (hooks included); the container is deleted afterwards."""
    cid = f"gct-hook-{uuid.uuid4().hex[:10]}"
    try:
        return subprocess.run([runtime, "--root", str(state_root), "run", "--bundle", str(bundle), cid],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    finally:
        subprocess.run([runtime, "--root", str(state_root), "delete", "--force", cid], capture_output=True)
