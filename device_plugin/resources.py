"""Which Kubernetes resources a host's GPUs make, per MIG strategy, as NVIDIA's plugin names and counts them.

- none: every GPU is one `nvidia.com/gpu`, a GPU in MIG mode too (as a whole: NVIDIA's `none` makes no
  distinction); no MIG device is offered.
- single: every MIG device is one `nvidia.com/gpu`. All GPUs must be in MIG mode with MIG devices of one
  profile; a host with GPUs in and out of MIG mode, or with two profiles, is refused. A host without any
  GPU in MIG mode falls back to `none`.
- mixed: GPUs not in MIG mode are `nvidia.com/gpu`, each MIG device is one `nvidia.com/mig-<profile>`
  (e.g. `nvidia.com/mig-1g.5gb`); a GPU in MIG mode is never also a whole `nvidia.com/gpu`. A profile with
  extra attributes has its `+` made a `.` (`1g.10gb+me` is `nvidia.com/mig-1g.10gb.me`), as NVIDIA's plugin
  names it: `+` is not allowed in a Kubernetes resource name (docs/device-plugin.md, "MIG profiles with
  attributes").
Under single and mixed a GPU in MIG mode without any MIG device is refused, as NVIDIA's plugin does.

Each device is known to the kubelet by its UUID (the device plugin API's ID; a time-sliced replica
by `<UUID>::<n>`, device_plugin.replicas); `--device-id-strategy`
only changes how it is named to the runtime (device_id): its UUID, or its index (`0`, `1:0`), which
are also its names in the CDI spec `nvidia-ctk cdi generate` writes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from cdi.errors import CdiError
from cdi.inventory import Gpu, Inventory, MigDevice

VENDOR = "nvidia.com"
GPU_RESOURCE = f"{VENDOR}/gpu"
REPLICA_SEPARATOR = "::"
# What the kubelet and API server accept as an extended resource: the name after the vendor is a DNS-1123
# subdomain, and NVIDIA's plugin caps the whole name at 63 characters (its NewResourceName).
MAX_RESOURCE_NAME = 63
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")


class ResourceError(CdiError):
    """The host's GPUs cannot be offered under the MIG strategy asked for."""


@dataclass(frozen=True)
class PluginDevice:
    uuid: str                      # the GPU's or MIG device's UUID
    index: str                     # "0", or "<gpu>:<mig>" for a MIG device
    gpu_index: int                 # the GPU it is, or whose MIG device it is
    minor: int                     # /dev/nvidia<minor> of that GPU
    pci_bus_id: str                # of that GPU
    mig: MigDevice | None = None
    replica: int | None = None     # time-slicing: which of the device's replicas (device_plugin.replicas)

    @property
    def id(self) -> str:
        """The kubelet's device ID: the UUID, `<UUID>::<replica>` for a replica (NVIDIA's form)."""
        return self.uuid if self.replica is None else f"{self.uuid}{REPLICA_SEPARATOR}{self.replica}"

    def device_id(self, strategy: str) -> str:
        """The name the runtime is given (NVIDIA_VISIBLE_DEVICES, CDI device name): uuid or index."""
        return self.index if strategy == "index" else self.uuid

    def device_nodes(self) -> list[str]:
        """The device's own nodes, as NVIDIA's plugin lists them for passDeviceSpecs."""
        nodes = [f"/dev/nvidia{self.minor}"]
        if self.mig is not None:
            nodes += [f"/dev/nvidia-caps/nvidia-cap{self.mig.gi_cap_minor}",
                      f"/dev/nvidia-caps/nvidia-cap{self.mig.ci_cap_minor}"]
        return nodes


@dataclass(frozen=True)
class Resource:
    name: str                           # e.g. nvidia.com/gpu, nvidia.com/mig-1g.5gb
    devices: tuple[PluginDevice, ...]

    @property
    def short_name(self) -> str:
        """The part after the vendor: gpu, mig-1g.5gb (the socket is nvidia-<short_name>.sock)."""
        return self.name.split("/", 1)[1]

    def device(self, device_id: str) -> PluginDevice | None:
        """The device the kubelet knows as device_id (a UUID, or a replica's `<UUID>::<n>`)."""
        return self._by_id.get(device_id)

    @cached_property
    def _by_id(self) -> dict[str, PluginDevice]:
        # Allocate looks up every ID it is given: a search of the list made a request for all 56 MIG
        # devices of a host 56 x 56 comparisons (bench device-plugin)
        return {d.id: d for d in self.devices}


def gpu_device(gpu: Gpu) -> PluginDevice:
    return PluginDevice(uuid=gpu.uuid, index=str(gpu.index), gpu_index=gpu.index, minor=gpu.minor,
                        pci_bus_id=gpu.pci_bus_id)


def mig_device(gpu: Gpu, mig: MigDevice) -> PluginDevice:
    return PluginDevice(uuid=mig.uuid, index=f"{gpu.index}:{mig.index}", gpu_index=gpu.index, minor=gpu.minor,
                        pci_bus_id=gpu.pci_bus_id, mig=mig)


def resource_name_problem(name: str) -> str | None:
    """Why name (`nvidia.com/<name>`) is no valid Kubernetes resource name, or None when it is one."""
    short = name.partition("/")[2]
    if len(name) > MAX_RESOURCE_NAME:
        return f"longer than {MAX_RESOURCE_NAME} characters"
    if len(short) > 253 or not _DNS_SUBDOMAIN.fullmatch(short):
        return ("the part after nvidia.com/ must be lower-case letters, digits, '-' and '.', "
                "starting and ending with a letter or digit")
    return None


def mig_resource_name(profile: str) -> str:
    """nvidia.com/mig-<profile>, a profile's `+` (extra attributes, e.g. `1g.10gb+me`) made a `.` as
    NVIDIA's plugin does. A profile that still makes no valid name is refused, as NVIDIA's is."""
    name = f"{VENDOR}/mig-{profile.replace('+', '.')}"
    problem = resource_name_problem(name)
    if problem:
        raise ResourceError(f"MIG profile {profile!r} makes the resource name {name!r}, which Kubernetes "
                            f"does not accept: {problem}", "--mig-strategy=mixed")
    return name


def _check_mig_gpus_have_devices(inventory: Inventory, strategy: str) -> None:
    for gpu in inventory.gpus:
        if gpu.mig_enabled and not gpu.mig_devices:
            raise ResourceError(f"GPU {gpu.index} is in MIG mode but has no MIG devices; mig-strategy={strategy} "
                                "needs every GPU in MIG mode configured (nvidia-smi mig -cgi ... -C)",
                                gpu.uuid)


def _none(inventory: Inventory) -> list[Resource]:
    return [Resource(GPU_RESOURCE, tuple(gpu_device(g) for g in inventory.gpus))]


def _single(inventory: Inventory) -> list[Resource]:
    mig_gpus = [g for g in inventory.gpus if g.mig_enabled]
    if not mig_gpus:
        return _none(inventory)
    whole = [g for g in inventory.gpus if not g.mig_enabled]
    if whole:
        raise ResourceError("for mig-strategy=single all GPUs must be in MIG mode or none; GPUs "
                            f"{', '.join(str(g.index) for g in whole)} are not (use mig-strategy=mixed)",
                            "--mig-strategy")
    _check_mig_gpus_have_devices(inventory, "single")
    profiles = sorted({m.profile for g in mig_gpus for m in g.mig_devices})
    if len(profiles) > 1:
        raise ResourceError(f"for mig-strategy=single all MIG devices must have one profile; this host has "
                            f"{', '.join(profiles)} (use mig-strategy=mixed)", "--mig-strategy")
    return [Resource(GPU_RESOURCE, tuple(mig_device(g, m) for g in mig_gpus for m in g.mig_devices))]


def _mixed(inventory: Inventory) -> list[Resource]:
    _check_mig_gpus_have_devices(inventory, "mixed")
    resources = [Resource(GPU_RESOURCE, tuple(gpu_device(g) for g in inventory.gpus if not g.mig_enabled))]
    by_profile: dict[str, list[PluginDevice]] = {}
    for gpu in inventory.gpus:
        for mig in gpu.mig_devices if gpu.mig_enabled else ():
            by_profile.setdefault(mig.profile, []).append(mig_device(gpu, mig))
    resources += [Resource(mig_resource_name(p), tuple(ds)) for p, ds in sorted(by_profile.items())]
    return resources


STRATEGIES = {"none": _none, "single": _single, "mixed": _mixed}


def build_resources(inventory: Inventory, mig_strategy: str) -> list[Resource]:
    """The resources with at least one device (a plugin is served only for those, as NVIDIA's)."""
    if mig_strategy not in STRATEGIES:
        raise ResourceError(f"unknown MIG strategy {mig_strategy!r}", "--mig-strategy")
    return [r for r in STRATEGIES[mig_strategy](inventory) if r.devices]
