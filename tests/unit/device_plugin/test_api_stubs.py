"""The committed gRPC stubs are what grpcio-tools makes of the .proto now, and the .proto keeps the
kubelet's wire contract (package, services, methods, field numbers)."""
import re

from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.api.generate import API_DIR, generated_stubs

# The generator stamps its own version into the stubs; a newer grpcio-tools changes only these lines.
VERSION_STAMPS = re.compile(r"^(# Protobuf Python Version: .*|GRPC_GENERATED_VERSION = .*|    \d+,)$", re.M)


def _without_stamps(text: str) -> str:
    return VERSION_STAMPS.sub("", text)


def test_committed_stubs_match_the_proto():
    for name, text in generated_stubs().items():
        committed = (API_DIR / name).read_text()
        assert _without_stamps(committed) == _without_stamps(text), \
            f"{name} is stale: run `python -m device_plugin.api.generate`"


def test_wire_names_are_the_kubelets():
    services = pb.DESCRIPTOR.services_by_name
    assert pb.DESCRIPTOR.package == "v1beta1"
    assert [m.name for m in services["Registration"].methods] == ["Register"]
    assert [m.name for m in services["DevicePlugin"].methods] == [
        "GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate", "PreStartContainer"]
    assert services["DevicePlugin"].methods_by_name["ListAndWatch"].server_streaming


def _numbers(message) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}


def test_field_numbers_are_the_kubelets():
    assert _numbers(pb.RegisterRequest) == {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}
    assert _numbers(pb.DevicePluginOptions) == {"pre_start_required": 1, "get_preferred_allocation_available": 2}
    assert _numbers(pb.Device) == {"ID": 1, "health": 2, "topology": 3}
    assert _numbers(pb.NUMANode) == {"ID": 1}
    assert _numbers(pb.ContainerPreferredAllocationRequest) == {
        "available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}
    assert _numbers(pb.ContainerPreferredAllocationResponse) == {"deviceIDs": 1}
    assert _numbers(pb.ContainerAllocateRequest) == {"devices_ids": 1}
    assert _numbers(pb.PreStartContainerRequest) == {"devices_ids": 1}
    assert _numbers(pb.ContainerAllocateResponse) == {
        "envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}
    assert _numbers(pb.Mount) == {"container_path": 1, "host_path": 2, "read_only": 3}
    assert _numbers(pb.DeviceSpec) == {"container_path": 1, "host_path": 2, "permissions": 3}
    assert _numbers(pb.CDIDevice) == {"name": 1}
