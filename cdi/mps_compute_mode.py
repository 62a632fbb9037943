"""The compute mode of a GPU shared with MPS, as NVIDIA's MPS control daemon of k8s-device-plugin handles
it: EXCLUSIVE_PROCESS while the daemon runs (only the MPS server then holds a context on the GPU, every
other CUDA program goes through MPS or is refused), DEFAULT again after it stops. Read and set with the
driver's own nvidia-smi (`-i UUID --query-gpu=compute_mode`, `-i UUID -c MODE`), as NVIDIA's daemon sets
it, so that the same code works on a real host and on the simulated one.

We only put back what we changed: a GPU found in EXCLUSIVE_PROCESS mode is left so at stop. A GPU in
PROHIBITED mode runs no CUDA context, so no MPS server either: refused before anything is started."""
from __future__ import annotations

import os
import subprocess

from cdi.mps import MpsError

NVIDIA_SMI = "/usr/bin/nvidia-smi"
EXCLUSIVE_PROCESS = "EXCLUSIVE_PROCESS"
DEFAULT = "DEFAULT"
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_TIMEOUT = 30.0


def nvidia_smi_program(driver_root) -> str:
    """The host path of the driver's nvidia-smi (a cdi.driver_root.DriverRoot)."""
    found = driver_root.resolve(NVIDIA_SMI)
    path = driver_root.host_path(found) if found else None
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise MpsError("no nvidia-smi in the driver root (it sets the GPU's compute mode for MPS)",
                       driver_root.host_path(NVIDIA_SMI))
    return path


def _run(smi: str, *args: str) -> str:
    try:
        done = subprocess.run([smi, *args], capture_output=True, text=True, timeout=_TIMEOUT, cwd="/",
                              stdin=subprocess.DEVNULL, env={"PATH": _PATH})
    except subprocess.TimeoutExpired:
        raise MpsError("nvidia-smi did not answer in time", smi) from None
    except OSError as e:
        raise MpsError(f"cannot run nvidia-smi: {e.strerror}", smi) from None
    if done.returncode != 0:
        lines = (done.stdout + done.stderr).strip().splitlines()
        raise MpsError(f"nvidia-smi {' '.join(args)} failed: {lines[0] if lines else f'exit {done.returncode}'}",
                       smi)
    return done.stdout.strip()


def current(smi: str, uuid: str) -> str:
    """The GPU's compute mode as nvidia-smi names it: Default, Exclusive_Process or Prohibited."""
    return _run(smi, "-i", uuid, "--query-gpu=compute_mode", "--format=csv,noheader")


def make_exclusive(smi: str, uuid: str) -> bool:
    """Set EXCLUSIVE_PROCESS for the MPS daemon of GPU `uuid`; True when we changed the mode (so stop puts
    DEFAULT back), False when the GPU already was in it. A GPU in PROHIBITED mode is refused."""
    mode = current(smi, uuid)
    if mode.lower() == "prohibited":
        raise MpsError("the GPU is in PROHIBITED compute mode, which runs no MPS server (set DEFAULT or "
                       f"EXCLUSIVE_PROCESS first: nvidia-smi -i {uuid} -c DEFAULT)", uuid)
    if mode.lower() == EXCLUSIVE_PROCESS.lower():
        return False
    _run(smi, "-i", uuid, "-c", EXCLUSIVE_PROCESS)
    return True


def restore_default(smi: str, uuid: str) -> None:
    _run(smi, "-i", uuid, "-c", DEFAULT)
