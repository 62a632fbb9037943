"""Time-slicing (sharing.timeSlicing of NVIDIA's config v1): a resource's devices offered several times.

As NVIDIA's plugin builds them: for each configured resource the host has, the chosen devices (all,
the first N in index order, or those listed by GPU index, MIG index `<gpu>:<mig>` or UUID) become
`replicas` devices each, known to the kubelet as `<UUID>::0` .. `<UUID>::<replicas-1>`, under the
resource's rename (renameByDefault: `<name>.shared`) or its own name; the devices not chosen stay
whole under the original name. A configured resource the host does not have is skipped (NVIDIA's
does too), so one config fits nodes with and without MIG. Every replica is the real device for
Allocate (device_plugin.allocate) and health (a GPU's XID marks all its replicas). sharing.mps makes
its replicas the same way (NVIDIA's plugin too); each is then a share of the GPU's MPS control daemon
(device_plugin.mps_shares).
"""
from __future__ import annotations

from dataclasses import replace

from device_plugin.config import ReplicatedResource, TimeSlicing
from device_plugin.resources import PluginDevice, Resource, ResourceError


def _chosen(resource: Resource, wanted: ReplicatedResource, section: str) -> list[PluginDevice]:
    devices = list(resource.devices)
    where = f"sharing.{section} {wanted.name}"
    if wanted.devices == "all":
        return devices
    if isinstance(wanted.devices, int):
        if wanted.devices > len(devices):
            raise ResourceError(f"requested {wanted.devices} devices to be replicated, but only {len(devices)} "
                                "devices available", where)
        return devices[:wanted.devices]
    chosen: list[PluginDevice] = []
    for ref in wanted.devices:
        device = next((d for d in devices if ref in (d.uuid, d.index)), None)
        if device is None:
            raise ResourceError(f"no device {ref!r} of {resource.name} on this host (an index, a MIG index "
                                f"<gpu>:<mig> or a UUID of: {', '.join(d.index for d in devices)})", where)
        if device not in chosen:
            chosen.append(device)
    return chosen


def replicate(resources: list[Resource], time_slicing: TimeSlicing | None) -> list[Resource]:
    """The resources with time-slicing (or MPS: the same replicas, time_slicing.strategy "mps") applied,
    in their order, renamed ones after their original; a resource left without devices is dropped. MPS
    shares of a MIG device are refused as NVIDIA's plugin refuses them."""
    if time_slicing is None:
        return resources
    section = "mps" if time_slicing.strategy == "mps" else "timeSlicing"
    wanted = {r.name: r for r in time_slicing.resources}
    result: dict[str, list[PluginDevice]] = {}
    for resource in resources:
        config = wanted.get(resource.name)
        if config is None:
            result.setdefault(resource.name, []).extend(resource.devices)
            continue
        chosen = _chosen(resource, config, section)
        if section == "mps" and any(d.mig is not None for d in chosen):
            raise ResourceError("sharing using MPS is not supported for MIG devices", f"sharing.mps {config.name}")
        result.setdefault(resource.name, []).extend(d for d in resource.devices if d not in chosen)
        result.setdefault(config.shared_name, []).extend(
            replace(device, replica=n) for device in chosen for n in range(config.replicas))
    return [Resource(name, tuple(devices)) for name, devices in result.items() if devices]
