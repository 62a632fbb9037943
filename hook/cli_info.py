"""`nvidia-container-cli info` and `list`: what the driver reports, and the host files a container gets.

info, as the real tool prints it (label left-aligned in 15 columns, a space, the value):

    NVRM version:   550.54.15
    CUDA version:   12.4

    Device Index:   0
    Device Minor:   0
    ...
    Architecture:   8.0

`Architecture` is the CUDA compute capability, as libnvidia-container reports it (scripts compare
it with NVIDIA_REQUIRE_ARCH). `--csv` prints the same facts as two CSV tables separated by a blank
line, fields unquoted like the real tool's.

list prints one host path per line, in this order: control devices, GPU nodes, MIG access files and
capability nodes, IMEX channels, binaries, libraries, 32-bit libraries (only with --compat32), IPC
sockets (and the MPS pipe directory), firmware. `-d/-l/-b/-i/-f/--mig-*/--imex-channel` pick sections;
with none of them every section is listed, for every GPU and MIG device. The files come from the same
discovery that `configure` injects from (cdi.driver_files), so the list is what a container would get.
"""
from __future__ import annotations

import os
import re

from cdi.driver_files import (BINARY, FIRMWARE, IPC_SOCKET, LIBRARY, LIBRARY32, MPS_DIR,
                              locate_driver_files)
from cdi.driver_root import DriverRoot
from cdi.errors import CdiError
from cdi.inventory import Gpu, Inventory, MigDevice
from cdi.request import DeviceRequest, parse_device_ids, parse_imex_channels
from cdi.selection import select_devices

INFO_LABEL_WIDTH = 15
CSV_DRIVER_HEADER = "NVRM version,CUDA version"
CSV_DEVICE_HEADER = "Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture"
# Control nodes in the order the real tool lists them; missing ones (uvm and modeset are created
# on demand on real hosts) are skipped.
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
IMEX_CHANNEL_DIR = "nvidia-caps-imex-channels"
MIG_CAPABILITIES_DIR = "driver/nvidia/capabilities"
# What list's discovery asks for: every capability (compat32 only on request).
LIST_CAPABILITIES = ("compute", "display", "graphics", "ngx", "utility", "video")


class ListError(CdiError):
    """A device, channel or node that list (or configure) was asked for does not exist."""


# -- info ------------------------------------------------------------------------------------------

def format_info(inventory: Inventory) -> str:
    lines = [_field("NVRM version:", inventory.driver_version), _field("CUDA version:", inventory.cuda_version)]
    for gpu in inventory.gpus:
        lines += ["",
                  _field("Device Index:", gpu.index),
                  _field("Device Minor:", gpu.minor),
                  _field("Model:", gpu.name),
                  _field("Brand:", gpu.brand),
                  _field("GPU UUID:", gpu.uuid),
                  _field("Bus Location:", gpu.pci_bus_id),
                  _field("Architecture:", gpu.compute_capability)]
    return "\n".join(lines) + "\n"


def format_info_csv(inventory: Inventory) -> str:
    lines = [CSV_DRIVER_HEADER, f"{inventory.driver_version},{inventory.cuda_version}", "", CSV_DEVICE_HEADER]
    for gpu in inventory.gpus:
        lines.append(",".join(str(v) for v in (gpu.index, gpu.minor, gpu.name, gpu.brand, gpu.uuid,
                                                gpu.pci_bus_id, gpu.compute_capability)))
    return "\n".join(lines) + "\n"


def _field(label: str, value) -> str:
    return f"{label:<{INFO_LABEL_WIDTH}} {value}"


# -- list ------------------------------------------------------------------------------------------

class ListRequest:
    """What `list` was asked for (a plain class: this module is on the hook's import path)."""

    def __init__(self, devices=(), libraries=False, binaries=False, ipcs=False, firmwares=False,
                 compat32=False, mig_config=(), mig_monitor=(), imex_channels=(), ldcache=None):
        self.devices = list(devices)            # raw --device values (comma lists)
        self.libraries, self.binaries, self.ipcs, self.firmwares = libraries, binaries, ipcs, firmwares
        self.compat32 = compat32
        self.mig_config, self.mig_monitor = list(mig_config), list(mig_monitor)
        self.imex_channels = list(imex_channels)
        self.ldcache = ldcache

    @property
    def everything(self) -> bool:
        return not (self.devices or self.libraries or self.binaries or self.ipcs or self.firmwares
                    or self.mig_config or self.mig_monitor or self.imex_channels)


def resolve_ids(values: list[str], inventory: Inventory, option: str) -> tuple[list[Gpu], list[MigDevice]]:
    """GPUs and MIG devices named by repeated comma lists of ids (index, UUID, PCI bus id,
    GPU:MIG, all), through the shared resolver. An unknown id is a ListError naming it."""
    ids = []
    for value in values:
        ids += [i for i in parse_device_ids(value, option) if i not in ids]
    if not ids or ids == ["none"]:
        return [], []
    selection = select_devices(DeviceRequest(source="cli", where=option, devices=tuple(ids),
                                             is_gpu_container=True), inventory)
    return list(selection.gpus), list(selection.mig_devices)


def gpu_nodes(root: DriverRoot, inventory: Inventory, gpus, migs) -> list[str]:
    """/dev/nvidia<minor> of each GPU and each MIG device's parent, request order, no repeats."""
    parents = [inventory.gpu_by_index(m.parent_index) for m in migs]
    minors = list(dict.fromkeys(g.minor for g in [*gpus, *parents] if g is not None))
    return [_existing_node(root, f"nvidia{minor}", f"GPU node of minor {minor}") for minor in minors]


def mig_paths(root: DriverRoot, inventory: Inventory, migs) -> list[str]:
    """Per MIG device: the GPU instance's access file and capability node, then the compute
    instance's, as the driver publishes them (/proc/driver/nvidia/capabilities/gpu<minor>/mig/...)."""
    out = []
    for mig in migs:
        parent = inventory.gpu_by_index(mig.parent_index)
        gi_dir = f"{MIG_CAPABILITIES_DIR}/gpu{parent.minor}/mig/gi{mig.gi}"
        what = f"MIG device {mig.parent_index}:{mig.index}"
        out += [root.proc_path(f"{gi_dir}/access"),
                _existing_node(root, f"nvidia-caps/nvidia-cap{mig.gi_cap_minor}", what),
                root.proc_path(f"{gi_dir}/ci{mig.ci}/access"),
                _existing_node(root, f"nvidia-caps/nvidia-cap{mig.ci_cap_minor}", what)]
    return list(dict.fromkeys(out))


def mig_global_paths(root: DriverRoot, which: str) -> list[str]:
    """The access file and capability node of MIG `config` or `monitor` (whole-driver rights)."""
    minor = _global_cap_minors(root)[which]
    return [root.proc_path(f"{MIG_CAPABILITIES_DIR}/mig/{which}"),
            _existing_node(root, f"nvidia-caps/nvidia-cap{minor}", f"MIG {which} capability")]


def imex_channel_nodes(root: DriverRoot, values: list[str], everything: bool) -> list[str]:
    """Nodes of the requested IMEX channels (each must exist); with `everything`, those present."""
    directory = root.dev_path(IMEX_CHANNEL_DIR)
    present = sorted((int(n[7:]) for n in _listdir(directory) if re.fullmatch(r"channel[0-9]{1,7}", n)))
    if everything:
        return [os.path.join(directory, f"channel{n}") for n in present]
    wanted: list[int] = []
    for value in values:
        channels, all_channels = parse_imex_channels(value)
        wanted += present if all_channels else channels
    out = []
    for channel in dict.fromkeys(wanted):
        out.append(_existing_node(root, f"{IMEX_CHANNEL_DIR}/channel{channel}", f"IMEX channel {channel}"))
    return out


def list_host_paths(root: DriverRoot, inventory: Inventory, request: ListRequest) -> list[str]:
    everything = request.everything
    if everything:
        gpus, migs = list(inventory.gpus), inventory.mig_devices()
    else:
        gpus, migs = resolve_ids(request.devices, inventory, "--device")
    # the ids are checked, but like configure, MIG config/monitor rights bring no GPU node of their own
    resolve_ids(request.mig_config, inventory, "--mig-config")
    resolve_ids(request.mig_monitor, inventory, "--mig-monitor")
    out: list[str] = []
    if everything or request.devices or request.mig_config or request.mig_monitor or request.imex_channels:
        out += [root.dev_path(n) for n in CONTROL_NODES if _is_char_device(root.dev_path(n))]
        out += gpu_nodes(root, inventory, gpus, migs)
        out += mig_paths(root, inventory, migs)
        if request.mig_config:
            out += mig_global_paths(root, "config")
        if request.mig_monitor:
            out += mig_global_paths(root, "monitor")
        out += imex_channel_nodes(root, request.imex_channels, everything)
    sections = {BINARY: everything or request.binaries, LIBRARY: everything or request.libraries,
                LIBRARY32: (everything or request.libraries) and request.compat32,
                IPC_SOCKET: everything or request.ipcs, FIRMWARE: everything or request.firmwares}
    if any(sections.values()):
        caps = LIST_CAPABILITIES + (("compat32",) if request.compat32 else ())
        files = locate_driver_files(root.path, inventory.driver_version, caps, ld_cache=request.ldcache)
        for kind in (BINARY, LIBRARY, LIBRARY32, IPC_SOCKET, FIRMWARE):
            if sections[kind]:
                kinds = (IPC_SOCKET, MPS_DIR) if kind == IPC_SOCKET else (kind,)
                out += [f.host_path for f in files.of_kind(*kinds)]
    return list(dict.fromkeys(out))


# -- helpers ---------------------------------------------------------------------------------------

def _existing_node(root: DriverRoot, name: str, what: str) -> str:
    path = root.dev_path(name)
    if not _is_char_device(path):
        raise ListError(f"device node of {what} is missing", path)
    return path


def _is_char_device(path: str) -> bool:
    import stat

    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _global_cap_minors(root: DriverRoot) -> dict[str, int]:
    """`config N` and `monitor N` from the driver's mig-minors (absent: the fixed minors 1 and 2)."""
    from cdi.nvml import DEFAULT_MIG_CONTROL_MINORS, MIG_MINORS, NvmlError, read_mig_control_minors

    try:
        return read_mig_control_minors(root.proc_path(MIG_MINORS))
    except NvmlError:  # an unreadable file: list the real drivers' fixed minors
        return dict(DEFAULT_MIG_CONTROL_MINORS)
