"""MPS shares of a GPU: where a device's MPS control daemon keeps its files, the limits it gives each
share, and the container edits a share needs. Plain data: starting and stopping daemons is
cdi.mps_daemon's job.

Layout under the MPS root (`--mps-root`, default /run/nvidia/mps), one folder per shared device,
named by its UUID (a GPU's `GPU-...` or a MIG device's `MIG-...`):

    <root>/<uuid>/pipe        the daemon's CUDA_MPS_PIPE_DIRECTORY (its control socket)
    <root>/<uuid>/log         its CUDA_MPS_LOG_DIRECTORY (control.log, server.log)
    <root>/<uuid>/shm         a tmpfs: the daemon's /dev/shm, and each share's
    <root>/<uuid>/share.json  what the daemon was started for (device, replicas, limits)

A container of a share gets the pipe folder at /tmp/nvidia-mps (CUDA_MPS_PIPE_DIRECTORY says so) and
the shm tmpfs at /dev/shm: MPS clients and their server exchange memory through /dev/shm, so a
share's /dev/shm must be its daemon's.
"""
from __future__ import annotations

import json
import os

from cdi.errors import CdiError
from cdi.inventory import Gpu, Inventory, MigDevice
from cdi.spec import ContainerEdits, Mount

DEFAULT_MPS_ROOT = "/run/nvidia/mps"
CONTAINER_PIPE_DIRECTORY = "/tmp/nvidia-mps"
SHARE_FILE = "share.json"
MAX_REPLICAS = 100      # every share gets at least 1% of the threads
_MIB = 1 << 20
# The pipe folder read-only: a client connects to the control socket all the same (connect() needs no
# writable mount), but a container cannot replace the socket other shares connect to, nor the pid file.
PIPE_BIND = ("ro", "nosuid", "nodev", "noexec", "bind")
SHM_BIND = ("nosuid", "nodev", "noexec", "bind")


class MpsError(CdiError):
    pass


class DeviceLayout:
    """The folders of one device's daemon under an MPS root."""

    def __init__(self, mps_root: str, uuid: str):
        if not os.path.isabs(mps_root):
            raise MpsError("the MPS root must be an absolute path", mps_root)
        if not uuid or "/" in uuid or uuid in (".", ".."):
            raise MpsError("not a device UUID", uuid)
        self.root = os.path.normpath(mps_root)
        self.uuid = uuid
        self.dir = os.path.join(self.root, uuid)
        self.pipe = os.path.join(self.dir, "pipe")
        self.log = os.path.join(self.dir, "log")
        self.shm = os.path.join(self.dir, "shm")
        self.share_file = os.path.join(self.dir, SHARE_FILE)


class ShareLimits:
    """What every share of a device gets: 100 / replicas percent of its threads and memory / replicas
    of pinned device memory (in whole MiB, as the daemon's command takes it)."""

    def __init__(self, replicas: int, memory_total: int):
        if not 1 <= replicas <= MAX_REPLICAS:
            raise MpsError(f"replicas must be 1 to {MAX_REPLICAS}, not {replicas}", "--replicas")
        if memory_total <= 0:
            raise MpsError("the device reports no memory", "NVML")
        self.replicas = replicas
        self.active_thread_percentage = 100 // replicas
        self.pinned_mem_limit_mib = memory_total // replicas // _MIB

    @property
    def pinned_mem_limit(self) -> str:
        """As set_default_device_pinned_mem_limit takes it: `20480M`."""
        return f"{self.pinned_mem_limit_mib}M"


def find_device(device_id: str, inventory: Inventory) -> Gpu | MigDevice:
    """The one GPU or MIG device `device_id` names (index, `g:m`, UUID, PCI bus id). A GPU in MIG mode
    runs no CUDA work of its own: its MIG devices are shared instead."""
    from cdi.selection import lookup_devices

    found = [] if device_id == "all" else lookup_devices(device_id, inventory)
    if len(found) != 1:
        raise MpsError("no such device (an index, a GPU:MIG index pair or a UUID)", device_id)
    device = found[0]
    if isinstance(device, Gpu) and device.mig_enabled:
        raise MpsError("the GPU is in MIG mode: share its MIG devices instead", device_id)
    return device


def read_share(layout: DeviceLayout) -> dict | None:
    """The share.json of a started daemon, None when there is none."""
    try:
        with open(layout.share_file, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise MpsError(f"cannot read: {e}", layout.share_file) from None
    return data if isinstance(data, dict) else None


def share_edits(mps_root: str, uuid: str) -> ContainerEdits:
    """The edits a container of a share of device `uuid` needs: its daemon's pipe folder (to connect
    as a client), its daemon's /dev/shm, and CUDA_MPS_PIPE_DIRECTORY naming the folder. The daemon
    must be running (share.json and the control socket present), so that a container never gets an
    empty folder in place of a daemon."""
    layout = DeviceLayout(mps_root, uuid)
    if read_share(layout) is None or not os.path.exists(os.path.join(layout.pipe, "control")):
        raise MpsError("no MPS control daemon runs for the device (nvidia-ctk mps start)", layout.dir)
    return ContainerEdits(
        env=[f"CUDA_MPS_PIPE_DIRECTORY={CONTAINER_PIPE_DIRECTORY}"],
        mounts=[Mount(host_path=layout.pipe, container_path=CONTAINER_PIPE_DIRECTORY, options=list(PIPE_BIND)),
                Mount(host_path=layout.shm, container_path="/dev/shm", options=list(SHM_BIND))])
