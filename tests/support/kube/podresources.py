"""A client of the kubelet's pod-resources API v1: which device ids each container got, and which devices
the kubelet can hand out (GetAllocatableResources). The tests ask the kubelet instead of parsing what a
container prints.

The message and service modules are generated from podresources_v1.proto by grpcio-tools when this module
is imported (grpc.protos_and_services: nothing generated is committed, so nothing can go stale).
"""
from __future__ import annotations

from pathlib import Path

import grpc

PROTO = "tests/support/kube/podresources_v1.proto"  # found on sys.path, as the repo root is when testing
messages, services = grpc.protos_and_services(PROTO)

# where the kubelet serves it, below its root dir (the default root: /var/lib/kubelet)
SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


class PodResources:
    """A channel to one kubelet's pod-resources socket (a path this process can connect to)."""

    def __init__(self, socket: str | Path, timeout: float = 10.0):
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.stub = services.PodResourcesListerStub(self.channel)
        self.timeout = timeout

    def list(self):
        return self.stub.List(messages.ListPodResourcesRequest(), timeout=self.timeout)

    def allocatable(self):
        return self.stub.GetAllocatableResources(messages.AllocatableResourcesRequest(), timeout=self.timeout)

    def devices_of(self, namespace: str, pod: str) -> dict[str, dict[str, list[str]]]:
        """container name -> resource name -> device ids given to it, for one pod ({} if the kubelet
        does not list the pod)."""
        for entry in self.list().pod_resources:
            if entry.namespace == namespace and entry.name == pod:
                found: dict[str, dict[str, list[str]]] = {}
                for container in entry.containers:
                    # the kubelet may list a resource's devices in several entries (one per device)
                    resources = found.setdefault(container.name, {})
                    for d in container.devices:
                        resources.setdefault(d.resource_name, []).extend(d.device_ids)
                return {c: {r: sorted(ids) for r, ids in rs.items()} for c, rs in found.items()}
        return {}

    def allocatable_devices(self) -> dict[str, list[str]]:
        """resource name -> every device id the kubelet can allocate."""
        found: dict[str, list[str]] = {}
        for devices in self.allocatable().devices:
            found.setdefault(devices.resource_name, []).extend(devices.device_ids)
        return {name: sorted(ids) for name, ids in found.items()}

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "PodResources":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
