"""From a DeviceRequest's ids to the GPUs and MIG devices of an inventory (for the prestart hook,
`nvidia-container-cli` and the CLI). An id that matches nothing is an error naming it: the container
gets exactly what it asked for or does not start.
"""
from __future__ import annotations

from cdi.errors import RequestError
from cdi.inventory import Gpu, Inventory, MigDevice
from cdi.qualified_name import parse_qualified_name
from cdi.record import Record
from cdi.request import VISIBLE_DEVICES, DeviceRequest, check_device_id, classify_id
from cdi.require import check_requirements


class Selection(Record, frozen=True):
    gpus: tuple[Gpu, ...] = ()               # whole GPUs, in request order
    mig_devices: tuple[MigDevice, ...] = ()  # MIG devices, in request order

    def parent_gpus(self, inventory: Inventory) -> tuple[Gpu, ...]:
        """The GPUs owning the selected MIG devices (their /dev/nvidia<minor> is needed too)."""
        parents = [inventory.gpu_by_index(m.parent_index) for m in self.mig_devices]
        return tuple(dict.fromkeys(p for p in parents if p is not None))

    def all_gpus(self, inventory: Inventory) -> tuple[Gpu, ...]:
        """Whole GPUs and MIG parents: what NVIDIA_REQUIRE_* is checked against."""
        return tuple(dict.fromkeys(self.gpus + self.parent_gpus(inventory)))


def normalize_pci_bus_id(bus_id: str) -> str:
    """`7:00.0`-style ids in NVML's form: 8-digit domain, lower case (`00000000:07:00.0`)."""
    parts = bus_id.lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    domain, bus, rest = parts
    return f"{int(domain, 16):08x}:{bus}:{rest}"


def lookup_devices(device_id: str, inventory: Inventory) -> list[Gpu | MigDevice]:
    """The devices one id names (index, `g:m`, UUID, PCI bus id, `all`); [] when none."""
    form = classify_id(device_id)
    if form == "all":
        return inventory.all_devices()
    if form == "index":
        gpu = inventory.gpu_by_index(int(device_id))
        return [gpu] if gpu else []
    if form == "mig-index":
        gpu_index, mig_index = (int(p) for p in device_id.split(":"))
        gpu = inventory.gpu_by_index(gpu_index)
        return [m for m in (gpu.mig_devices if gpu else ()) if m.index == mig_index]
    if form == "gpu-uuid":
        return [g for g in inventory.gpus if g.uuid.lower() == device_id.lower()]
    if form == "mig-uuid":
        return [m for m in inventory.mig_devices() if m.uuid.lower() == device_id.lower()]
    if form == "pci":
        wanted = normalize_pci_bus_id(device_id)
        return [g for g in inventory.gpus if normalize_pci_bus_id(g.pci_bus_id) == wanted]
    return []


def select_devices(request: DeviceRequest, inventory: Inventory, default_kind: str = "nvidia.com/gpu") -> Selection:
    """The devices request asks for. Qualified names of `default_kind` are looked up by their name part;
    other kinds are not ours to resolve here and are an error."""
    gpus: list[Gpu] = []
    migs: list[MigDevice] = []
    where = request.where or "request"
    for raw in request.devices:
        device_id = raw
        if classify_id(raw) == "cdi":
            name = parse_qualified_name(raw)
            if name.kind != default_kind:
                raise RequestError(f"device {raw!r} is not of kind {default_kind}", where)
            device_id = name.name
            try:
                check_device_id(device_id, where)
            except RequestError:
                device_id = "void"  # a CDI name we cannot map onto a GPU: reported below as the full name
            if device_id in ("none", "void"):
                raise RequestError(f"unknown device id {raw!r}", where)
        found = lookup_devices(device_id, inventory)
        if not found and device_id != "all":
            raise RequestError(_not_found(raw, device_id, request, inventory), where)
        for item in found:
            target = migs if isinstance(item, MigDevice) else gpus
            if item not in target:
                target.append(item)
    return Selection(tuple(gpus), tuple(migs))


def _gpu_count(inventory: Inventory) -> str:
    """`this host has 2 GPUs (0-1)`: what a GPU index can be here."""
    indexes = sorted(g.index for g in inventory.gpus)
    if not indexes:
        return "this host has no GPU"
    span = f"{indexes[0]}" if len(indexes) == 1 else f"{indexes[0]}-{indexes[-1]}"
    return f"this host has {len(indexes)} GPU{'s' if len(indexes) > 1 else ''} ({span})"


def _not_found(raw: str, device_id: str, request: DeviceRequest, inventory: Inventory) -> str:
    """Why raw matches nothing, in the user's terms. An index beyond the host's GPUs says how many there
    are; when the ids are 0..N-1, as `docker run --gpus N` writes them into NVIDIA_VISIBLE_DEVICES (a
    variable the user may never have set), the message names that command too."""
    if classify_id(device_id) != "index":
        return f"unknown device id {raw!r}: no such GPU or MIG device"
    index, wanted = int(device_id), list(request.devices)
    if request.where == VISIBLE_DEVICES and len(wanted) > 1 and wanted == [str(i) for i in range(len(wanted))]:
        return (f"{len(wanted)} GPUs asked for (docker --gpus {len(wanted)}, or NVIDIA_VISIBLE_DEVICES="
                f"{','.join(wanted)}): {_gpu_count(inventory)}; ask for fewer")
    hint = ", from docker --gpus or NVIDIA_VISIBLE_DEVICES" if request.where == VISIBLE_DEVICES else ""
    return f"unknown device id {raw!r}: GPU index {index} out of range, {_gpu_count(inventory)}{hint}"


def select_and_check(request: DeviceRequest, inventory: Inventory, default_kind: str = "nvidia.com/gpu") -> Selection:
    """select_devices, then NVIDIA_REQUIRE_* against every selected GPU unless checks are disabled."""
    selection = select_devices(request, inventory, default_kind)
    if request.is_gpu_container and not request.disable_require:
        check_requirements(request.requirements, inventory, selection.all_gpus(inventory))
    return selection
