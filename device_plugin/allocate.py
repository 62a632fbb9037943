"""Allocate: what the kubelet hands the runtime for a container's devices, per device list strategy.

As NVIDIA's plugin (v0.17), several strategies can be on at once:
- cdi-annotations: `<prefix>nvidia-device-plugin_<random id>: nvidia.com/gpu=<id>,...` (our runtime shim
  reads them on containerd 1.6 and CRI-O);
- cdi-cri: the same names in the response's cdi_devices (containerd >= 1.7 applies them itself);
- envvar: NVIDIA_VISIBLE_DEVICES=<id>,... ;
- volume-mounts: /dev/null mounted at /var/run/nvidia-container-devices/<id> for each device, and
  NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices (the runtime reads the folder);
when only CDI strategies are on, nothing else is added (passDeviceSpecs and GDS/MOFED included).
<id> is the device's UUID or index (--device-id-strategy). The CDI names are those of the spec
`nvidia-ctk cdi generate` writes for the host (kind nvidia.com/gpu, devices named by index and UUID),
so every path goes through the injection code the toolkit already has.

Time-sliced replicas (`<UUID>::<n>`, device_plugin.replicas) are their real device: a container given
two replicas of one GPU gets that GPU once. With sharing.timeSlicing.failRequestsGreaterThanOne a
request for more than one replica is refused, as NVIDIA's plugin refuses it ("maximum request size for
shared resources is 1; found 2"); the kubelet then fails the pod (UnexpectedAdmissionError).

An MPS share (sharing.mps, device_plugin.mps_shares) is named twice to CDI: the GPU's own CDI name (its
nodes and driver files) and the share's, `nvidia.com/gpu=<id>::<n>` (the daemon's pipe folder and
/dev/shm). A container given two shares of one GPU (failRequestsGreaterThanOne false) gets the first
one's edits: every share of a GPU has the same, and MPS limits each client process, not a container.
With envvar or volume-mounts (no CDI), the response itself carries the share's edits, as NVIDIA's plugin
does for every strategy: CUDA_MPS_PIPE_DIRECTORY and mounts of the daemon's pipe folder (read-only) and
/dev/shm, those of the first GPU's share (a container has one pipe folder and one /dev/shm).
"""
from __future__ import annotations

import os
import uuid as uuid_module
from dataclasses import replace

from cdi.annotations import annotation_key, annotation_value
from cdi.errors import CdiError
from cdi.mps import MpsError, share_edits
from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.config import Config
from device_plugin.resources import PluginDevice, Resource

CDI_KIND = "nvidia.com/gpu"
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
VOLUME_MOUNTS_ROOT = "/var/run/nvidia-container-devices"
VOLUME_MOUNTS_HOST_PATH = "/dev/null"
ANNOTATION_PLUGIN_NAME = "nvidia-device-plugin"
# Control nodes passDeviceSpecs adds when the host has them (NVIDIA's list: optional ones).
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
MAX_IDS_PER_CONTAINER = 1024


class AllocateError(CdiError):
    """An Allocate request the plugin refuses (an ID it never offered, too many IDs, more than one shared
    replica with failRequestsGreaterThanOne)."""


def cdi_name(device_id: str) -> str:
    return f"{CDI_KIND}={device_id}"


def requested_devices(resource: Resource, ids, where: str) -> list[PluginDevice]:
    """The devices ids name, in order; AllocateError naming the first id this resource never offered."""
    ids = list(ids)
    if len(ids) > MAX_IDS_PER_CONTAINER:
        raise AllocateError(f"too many device IDs ({len(ids)}, at most {MAX_IDS_PER_CONTAINER})", where)
    devices = []
    for device_id in ids:
        device = resource.device(device_id)
        if device is None:
            raise AllocateError(f"unknown device {device_id!r}: not a device of {resource.name}", where)
        devices.append(device)
    return devices


def check_shared_request(config: Config, devices: list[PluginDevice], where: str) -> None:
    """AllocateError for a request of more than one replica when failRequestsGreaterThanOne is set."""
    fail = config.sharing is not None and config.sharing.fail_requests_greater_than_one
    if fail and len(devices) > 1 and any(d.replica is not None for d in devices):
        raise AllocateError(f"maximum request size for shared resources is 1; found {len(devices)}", where)


def distinct_devices(devices: list[PluginDevice]) -> list[PluginDevice]:
    """The real devices of devices (replicas of one device collapsed), in order of first appearance."""
    seen: dict[str, PluginDevice] = {}
    for device in devices:
        if device.uuid not in seen:   # dataclasses.replace only for a replica: ~5 us each
            seen[device.uuid] = device if device.replica is None else replace(device, replica=None)
    return list(seen.values())


def device_specs(config: Config, devices: list[PluginDevice]) -> list[pb.DeviceSpec]:
    """The device nodes of devices, then the control nodes the host has, each once; host paths under
    the device root."""
    paths: list[str] = []
    for device in devices:
        paths += [p for p in device.device_nodes() if p not in paths]
    root = config.device_root.rstrip("/")
    paths += [p for p in CONTROL_NODES if os.path.exists(root + p)]
    return [pb.DeviceSpec(container_path=p, host_path=root + p, permissions="rw") for p in paths]


def mps_shares(config: Config, requested: list[PluginDevice]) -> list[PluginDevice]:
    """The MPS shares among requested: one per GPU (the first share asked for)."""
    if config.mps is None:
        return []
    first: dict[str, PluginDevice] = {}
    for device in requested:
        if device.replica is not None:
            first.setdefault(device.uuid, device)
    return list(first.values())


def add_mps_share(config: Config, share: PluginDevice, response: pb.ContainerAllocateResponse, where: str) -> None:
    """The share's edits (cdi.mps.share_edits) in the response itself, for the strategies without CDI."""
    try:
        edits = share_edits(config.mps_root, share.uuid)
    except MpsError as exc:
        raise AllocateError(str(exc), where) from None
    for entry in edits.env:
        name, _, value = entry.partition("=")
        response.envs[name] = value
    response.mounts.extend(pb.Mount(container_path=m.container_path, host_path=m.host_path,
                                    read_only="ro" in (m.options or ())) for m in edits.mounts)


def container_response(config: Config, devices: list[PluginDevice], shares: list[PluginDevice] = (),
                       where: str = "") -> pb.ContainerAllocateResponse:
    ids = [d.device_id(config.device_id_strategy) for d in devices]
    response = pb.ContainerAllocateResponse()
    if config.any_cdi():
        names = [cdi_name(i) for i in ids] + [cdi_name(f"{d.device_id(config.device_id_strategy)}::{d.replica}")
                                              for d in shares]
        if config.uses("cdi-annotations"):
            key = annotation_key(ANNOTATION_PLUGIN_NAME, str(uuid_module.uuid4()), config.cdi_annotation_prefix)
            response.annotations[key] = annotation_value(names)
        if config.uses("cdi-cri"):
            response.cdi_devices.extend(pb.CDIDevice(name=n) for n in names)
    if config.only_cdi():
        return response
    if config.uses("envvar"):
        response.envs[VISIBLE_DEVICES] = ",".join(ids)
    if config.uses("volume-mounts"):
        response.envs[VISIBLE_DEVICES] = VOLUME_MOUNTS_ROOT
        response.mounts.extend(pb.Mount(host_path=VOLUME_MOUNTS_HOST_PATH, container_path=f"{VOLUME_MOUNTS_ROOT}/{i}")
                               for i in ids)
    if shares:
        add_mps_share(config, shares[0], response, where)
    if config.pass_device_specs:
        response.devices.extend(device_specs(config, devices))
    if config.gds_enabled:
        response.envs["NVIDIA_GDS"] = "enabled"
    if config.mofed_enabled:
        response.envs["NVIDIA_MOFED"] = "enabled"
    return response


def allocate(config: Config, resource: Resource, request: pb.AllocateRequest) -> pb.AllocateResponse:
    """One response per container request; AllocateError (nothing allocated) if any names a device the
    resource does not have."""
    containers = []
    for n, container in enumerate(request.container_requests):
        where = f"{resource.name} container {n}"
        devices = requested_devices(resource, container.devices_ids, where)
        check_shared_request(config, devices, where)
        containers.append((distinct_devices(devices), mps_shares(config, devices), where))
    return pb.AllocateResponse(container_responses=[container_response(config, ds, shares, where)
                                                    for ds, shares, where in containers])
