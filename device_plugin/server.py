"""One resource's device plugin: the DevicePlugin gRPC service on its own unix socket in the kubelet's
device-plugin folder (`nvidia-<gpu|mig-1g.5gb>.sock`, as NVIDIA's plugin names them).

Every call answers or fails with one line (gRPC status INVALID_ARGUMENT for a request naming devices
the resource does not have, INTERNAL for anything else, logged as one line): a bad request never ends
the server, and no traceback reaches the log.
"""
from __future__ import annotations

import os
import stat
from concurrent import futures

import grpc

from cdi.errors import CdiError, printable
from cdi.log import get_logger
from device_plugin.allocate import allocate
from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from device_plugin.config import Config
from device_plugin.health import DeviceHealth
from device_plugin.preferred import PairScore, preferred_allocation
from device_plugin.resources import PluginDevice, Resource

LOG = get_logger("nvidia-device-plugin")
WORKERS = 8
STREAM_CHECK_SECONDS = 1.0   # how often an idle ListAndWatch stream checks that it is still wanted


class ServeError(CdiError):
    """The plugin's socket cannot be served."""


def numa_node(device: PluginDevice, sysfs: str = "/sys") -> int | None:
    """The NUMA node of the device's GPU (the kernel's numa_node), None when unknown (-1, no file)."""
    head, _, tail = device.pci_bus_id.lower().partition(":")
    try:
        with open(f"{sysfs}/bus/pci/devices/{int(head, 16):04x}:{tail}/numa_node") as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def api_device(device: PluginDevice, health: str) -> pb.Device:
    node = numa_node(device)
    topology = pb.TopologyInfo(nodes=[pb.NUMANode(ID=node)]) if node is not None else None
    return pb.Device(ID=device.id, health=health, topology=topology)


class DevicePluginService(pb_grpc.DevicePluginServicer):
    def __init__(self, resource: Resource, config: Config, health: DeviceHealth, pair_score: PairScore):
        self.resource, self.config, self.health, self.pair_score = resource, config, health, pair_score
        self.stopping = False

    def device_list(self) -> pb.ListAndWatchResponse:
        # health is the real device's (every replica of a GPU is Unhealthy with it), and a share's own (an
        # MPS share whose daemon died, device_plugin.mps_shares)
        return pb.ListAndWatchResponse(devices=[api_device(d, self.health.health(d.uuid, d.id))
                                                for d in self.resource.devices])

    def _failed(self, context, call: str, error: Exception):
        if isinstance(error, CdiError):
            code, text = grpc.StatusCode.INVALID_ARGUMENT, str(error)
        else:
            code, text = grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}"
        LOG.error("%s %s refused: %s", self.resource.name, call, printable(text))
        context.abort(code, printable(text))

    def GetDevicePluginOptions(self, request, context):
        return options()

    def ListAndWatch(self, request, context):
        seen = self.health.generation
        yield self.device_list()
        while not self.stopping and context.is_active():
            now = self.health.wait_for_change(seen, STREAM_CHECK_SECONDS)
            if now != seen and not self.stopping:
                seen = now
                yield self.device_list()

    def GetPreferredAllocation(self, request, context):
        try:
            return pb.PreferredAllocationResponse(container_responses=[
                pb.ContainerPreferredAllocationResponse(deviceIDs=preferred_allocation(
                    self.resource, r.available_deviceIDs, r.must_include_deviceIDs, r.allocation_size,
                    self.pair_score))
                for r in request.container_requests])
        except Exception as e:   # one line for the kubelet and the log, whatever it was
            self._failed(context, "GetPreferredAllocation", e)

    def Allocate(self, request, context):
        try:
            return allocate(self.config, self.resource, request)
        except Exception as e:
            self._failed(context, "Allocate", e)

    def PreStartContainer(self, request, context):
        return pb.PreStartContainerResponse()


def options() -> pb.DevicePluginOptions:
    """What the plugin offers: GetPreferredAllocation; no PreStartContainer call is needed."""
    return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


def _remove_stale_socket(path: str) -> None:
    """Removes what a previous run left at path: a socket or a symlink (never followed); anything else
    there is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not (stat.S_ISSOCK(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        raise ServeError("a file that is not a socket is in the way of the plugin's socket", path)
    os.unlink(path)


class PluginServer:
    """Serves one resource's DevicePlugin service on <device_plugin_dir>/nvidia-<resource>.sock."""

    def __init__(self, resource: Resource, config: Config, health: DeviceHealth, pair_score: PairScore):
        self.resource = resource
        self.endpoint = f"nvidia-{resource.short_name}.sock"
        self.socket_path = os.path.join(config.device_plugin_dir, self.endpoint)
        self.service = DevicePluginService(resource, config, health, pair_score)
        self.health = health
        self._server: grpc.Server | None = None
        self._identity: tuple[int, int] | None = None

    def start(self) -> None:
        _remove_stale_socket(self.socket_path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=self.endpoint))
        pb_grpc.add_DevicePluginServicer_to_server(self.service, server)
        if server.add_insecure_port(f"unix:{self.socket_path}") == 0:
            raise ServeError("cannot listen on the plugin's socket", self.socket_path)
        server.start()
        st = os.lstat(self.socket_path)
        self._server, self._identity = server, (st.st_dev, st.st_ino)
        LOG.info("serving %s (%d devices) on %s", self.resource.name, len(self.resource.devices), self.socket_path)

    def stop(self) -> None:
        """Ends the streams and the server; removes the socket if it is still the one it made."""
        if self._server is None:
            return
        self.service.stopping = True
        self.health.wake()
        self._server.stop(grace=0.5).wait()
        self._server = None
        try:
            st = os.lstat(self.socket_path)
            if (st.st_dev, st.st_ino) == self._identity:
                os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
