"""The container's view of /proc/driver/nvidia: only the GPUs it was given.

The driver's procfs directory lists every GPU of the host (gpus/<bus id>/information, one per GPU,
with its UUID), the MIG capability files of every GPU instance, and `params`, whose
`ModifyDeviceFiles: 1` tells the CUDA library it may create missing device nodes itself. The
injector covers the directory with a read-only tmpfs holding copies of: version, registry, params
(with ModifyDeviceFiles set to 0, as NVIDIA's tool does), each injected GPU's information file, the
access files of the injected MIG devices, and the MIG config/monitor files when those were granted.

Only where the directory exists in the container: without a driver (and on a simulated host) procfs
has no /proc/driver/nvidia and refuses mkdir, so every operation here is "if the directory exists",
decided in the container's mount namespace by the batch child.

The contents are read here, on the host side, from the driver root's proc (the simulated host's own
proc/ tree, else the real /proc): small text files, each read with a size limit.
"""
from __future__ import annotations

import errno
import os

from cdi.errors import what_where

PROC_DIR = "/proc/driver/nvidia"
TOP_FILES = ("version", "registry", "params")
MAX_FILE = 64 * 1024
MODIFY_DEVICE_FILES = "ModifyDeviceFiles"


class ProcViewError(Exception):
    def __init__(self, what: str, where: str):
        super().__init__(what_where(what, where))
        self.what, self.where = what, where


class ProcView:
    """What goes into the tmpfs: relative paths (under PROC_DIR) and their bytes, in write order,
    with every directory listed before the files in it."""

    def __init__(self):
        self.dirs: list[str] = []
        self.files: list[tuple[str, bytes]] = []

    def add_file(self, relpath: str, data: bytes) -> None:
        parts = relpath.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            directory = "/".join(parts[:i])
            if directory not in self.dirs:
                self.dirs.append(directory)
        self.files.append((relpath, data))

    def __bool__(self) -> bool:
        return bool(self.files)


def _read(path: str) -> bytes | None:
    """The file's bytes (at most MAX_FILE), None when it does not exist. Never follows a final link:
    the driver's proc files are plain files."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise ProcViewError(f"cannot read: {e.strerror}", path) from None
    try:
        data = os.read(fd, MAX_FILE + 1)
    except OSError as e:
        raise ProcViewError(f"cannot read: {e.strerror}", path) from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE:
        raise ProcViewError(f"larger than {MAX_FILE} bytes", path)
    return data


def without_device_file_modification(params: bytes) -> bytes:
    """params with `ModifyDeviceFiles: 0`: the container must not create device nodes itself."""
    lines = params.split(b"\n")
    key = MODIFY_DEVICE_FILES.encode() + b":"
    return b"\n".join(key + b" 0" if line.startswith(key) else line for line in lines)


def build_proc_view(proc_dir: str, gpus, mig_devices, gpu_minor_of, *, mig_config: bool = False,
                    mig_monitor: bool = False) -> ProcView:
    """The view for the injected devices. `proc_dir` is the driver's /proc/driver/nvidia on the host
    (DriverRoot.proc_path("driver/nvidia")); `gpus` the whole GPUs and MIG parents (Gpu objects);
    `mig_devices` the MigDevice objects; `gpu_minor_of(parent_index)` a parent's minor. A file the
    driver does not have is left out."""
    view = ProcView()
    for name in TOP_FILES:
        data = _read(os.path.join(proc_dir, name))
        if data is not None:
            view.add_file(name, without_device_file_modification(data) if name == "params" else data)
    for gpu in gpus:
        bus = _bus_dir_name(gpu.pci_bus_id)
        relpath = f"gpus/{bus}/information"
        data = _read(os.path.join(proc_dir, relpath))
        if data is None and bus != gpu.pci_bus_id:   # some drivers keep the 8-digit domain
            relpath = f"gpus/{gpu.pci_bus_id.lower()}/information"
            data = _read(os.path.join(proc_dir, relpath))
        if data is not None:
            view.add_file(relpath, data)
    for mig in mig_devices:
        base = f"capabilities/gpu{gpu_minor_of(mig.parent_index)}/mig/gi{mig.gi}"
        for relpath in (f"{base}/access", f"{base}/ci{mig.ci}/access"):
            data = _read(os.path.join(proc_dir, relpath))
            if data is not None:
                view.add_file(relpath, data)
    for wanted, name in ((mig_config, "config"), (mig_monitor, "monitor")):
        if wanted:
            relpath = f"capabilities/mig/{name}"
            data = _read(os.path.join(proc_dir, relpath))
            if data is not None:
                view.add_file(relpath, data)
    return view


def _bus_dir_name(bus_id: str) -> str:
    """The driver names the directories with a 4-digit domain: 00000000:07:00.0 -> 0000:07:00.0."""
    domain, sep, rest = bus_id.lower().partition(":")
    if sep and len(domain) == 8 and domain.startswith("0000"):
        return f"{domain[4:]}:{rest}"
    return bus_id.lower()


def add_to_batch(batch, view: ProcView) -> None:
    """tmpfs over PROC_DIR, its directories and files, then read-only: each step only where the
    directory already exists in the container (see the module docstring)."""
    if not view:
        return
    batch.tmpfs(PROC_DIR, options="mode=0755", if_exists=True)
    for directory in view.dirs:
        batch.mkdirs(f"{PROC_DIR}/{directory}", mode=0o755, if_exists=True)
    for relpath, data in view.files:
        batch.write_file(f"{PROC_DIR}/{relpath}", data, mode=0o444, if_exists=True)
    batch.remount(PROC_DIR, readonly=True, if_exists=True)
