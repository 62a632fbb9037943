"""What happens to a simulated host's GPUs after it is built: XID errors and resets
(`nvidia-ctk simulate xid|reset`) and compute modes (`nvidia-smi -c`, nvmlDeviceSetComputeMode), kept where every process loading the host's libnvidia-ml.so.1 sees them.

The state directory, <root>/run/nvidia-simulated-host (csrc/nvml_internal.h names the same paths):
- `events`: the event log, one line per event, appended with one write() each:
  `<eventType> <eventData> <GPU UUID> <gpuInstanceId> <computeInstanceId>`. The library's event sets
  read it from where it was when they registered a GPU, woken by inotify (csrc/nvml_events.c).
- `lost/<GPU UUID>`: the GPU has fallen off the bus (XID 79): every NVML call on it and its MIG devices
  answers NVML_ERROR_GPU_IS_LOST until `simulate reset` removes the file.
- `compute_mode/<GPU UUID>`: the GPU's compute mode when not DEFAULT, its number (2 PROHIBITED,
  3 EXCLUSIVE_PROCESS, as nvml.h numbers them); written and removed by the library itself (csrc/nvml_compute_mode.c).
"""
from __future__ import annotations

import os
from pathlib import Path

from simulator.host_spec import MARKER_NAME, SimulatorError

STATE_DIR = "run/nvidia-simulated-host"
EVENTS_FILE = "events"
LOST_DIR = "lost"
COMPUTE_MODE_DIR = "compute_mode"
EVENT_TYPE_XID_CRITICAL_ERROR = 0x8   # nvmlEventTypeXidCriticalError
WHOLE_GPU = 0xFFFFFFFF                # gpuInstanceId/computeInstanceId of an event about the whole GPU
LOST_XIDS = frozenset({79})           # GPU has fallen off the bus


def make_state_dir(root: Path) -> None:
    """The empty state of a new host (host_builder)."""
    state = root / STATE_DIR
    (state / LOST_DIR).mkdir(parents=True)
    (state / COMPUTE_MODE_DIR).mkdir()
    (state / EVENTS_FILE).touch()


def _gpu(root: Path, gpu: int, where: str) -> dict:
    import json

    try:
        gpus = json.loads((root / MARKER_NAME).read_text())["inventory"]["gpus"]
    except (OSError, ValueError, KeyError):
        raise SimulatorError("not a simulated host (nvidia-ctk simulate create makes one)", str(root)) from None
    if not 0 <= gpu < len(gpus):
        raise SimulatorError(f"GPU {gpu} does not exist on a host with {len(gpus)} GPUs", where)
    if not (root / STATE_DIR / LOST_DIR).is_dir():
        raise SimulatorError("the simulated host has no event state (rebuild it with --force)", str(root / STATE_DIR))
    return gpus[gpu]


def raise_xid(root: str | os.PathLike, gpu: int, xid: int, mig: int | None = None) -> str:
    """Raises XID on GPU (an index), or on its MIG device `mig` (an index): an XidCriticalError event
    every registered event set receives; an XID in LOST_XIDS also loses the GPU. Returns the GPU UUID."""
    root = Path(root)
    info = _gpu(root, gpu, "--gpu")
    if not 0 <= xid < 2**32:
        raise SimulatorError(f"XID {xid} is out of range", "--xid")
    gi = ci = WHOLE_GPU
    if mig is not None:
        migs = info.get("mig_devices", [])
        if not 0 <= mig < len(migs):
            raise SimulatorError(f"GPU {gpu} has {len(migs)} MIG devices, there is no MIG device {mig}", "--mig")
        gi, ci = migs[mig]["gi"], migs[mig]["ci"]
    state = root / STATE_DIR
    if xid in LOST_XIDS:   # lost before the event is seen, as a real GPU is by the time its XID is read
        (state / LOST_DIR / info["uuid"]).touch()
    line = f"{EVENT_TYPE_XID_CRITICAL_ERROR} {xid} {info['uuid']} {gi} {ci}\n".encode()
    fd = os.open(state / EVENTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, line)   # one short write: readers never see half a line from two writers
    finally:
        os.close(fd)
    return info["uuid"]


def reset_gpu(root: str | os.PathLike, gpu: int) -> str:
    """Resets GPU (an index): NVML answers for it again. Returns its UUID."""
    root = Path(root)
    info = _gpu(root, gpu, "--gpu")
    (root / STATE_DIR / LOST_DIR / info["uuid"]).unlink(missing_ok=True)
    return info["uuid"]
