"""Time-slicing (sharing.timeSlicing) through real grpcio clients on simulated hosts: the replica IDs
ListAndWatch lists, renames, Allocate mapping replicas back to their GPU (and refusing two with
failRequestsGreaterThanOne), the preferred allocation spreading over the least-shared GPUs, MIG devices
shared under mig-strategy mixed, and health applying to every replica of a GPU."""
from __future__ import annotations

import grpc
import pytest

from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.health import XidEvent
from tests.unit.device_plugin.test_plugin_grpc import RunningPlugin, _allocate, _first_list


def _sharing_config(tmp_path, resources: str, **options) -> str:
    lines = ["version: v1", "sharing:", "  timeSlicing:"]
    lines += [f"    {key}: {str(value).lower()}" for key, value in options.items()]
    lines += ["    resources:", *(f"    - {r}" for r in resources.split(";"))]
    path = tmp_path / "config.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _ids(plugin, endpoint):
    stub, channel = plugin.stub(endpoint)
    with channel:
        return [(d.ID, d.health) for d in _first_list(stub).devices]


def test_list_and_watch_lists_each_gpu_replicas_times(tmp_path, plugin_dir, kubelet, sim_hosts):
    inventory = sim_hosts["plain"][1]
    config = _sharing_config(tmp_path, "{name: nvidia.com/gpu, replicas: 4}")
    with RunningPlugin(plugin_dir, inventory, config_file=config) as plugin:
        [registered] = kubelet.wait_for(1)
        listed = _ids(plugin, "nvidia-gpu.sock")
    assert registered.resource_name == "nvidia.com/gpu"
    assert listed == [(f"{g.uuid}::{n}", "Healthy") for g in inventory.gpus for n in range(4)]


@pytest.mark.parametrize("option, resource", [({}, "nvidia.com/gpu-4"), ({"renameByDefault": True}, None)])
def test_rename_and_rename_by_default(tmp_path, plugin_dir, kubelet, sim_hosts, option, resource):
    inventory = sim_hosts["plain"][1]
    rename = f", rename: {resource}" if resource else ""
    config = _sharing_config(tmp_path, f"{{name: gpu, replicas: 2, devices: [1]{rename}}}", **option)
    shared = resource or "nvidia.com/gpu.shared"
    with RunningPlugin(plugin_dir, inventory, config_file=config) as plugin:
        requests = kubelet.wait_for(2)
        whole = _ids(plugin, "nvidia-gpu.sock")
        replicas = _ids(plugin, f"nvidia-{shared.split('/')[1]}.sock")
    assert [(r.resource_name, r.endpoint) for r in requests] == [
        ("nvidia.com/gpu", "nvidia-gpu.sock"), (shared, f"nvidia-{shared.split('/')[1]}.sock")]
    assert whole == [(inventory.gpus[0].uuid, "Healthy")]   # the GPU not listed stays whole
    assert [i for i, _ in replicas] == [f"{inventory.gpus[1].uuid}::0", f"{inventory.gpus[1].uuid}::1"]


@pytest.mark.parametrize("fail", [False, True])
def test_allocate_maps_replicas_to_their_gpu(tmp_path, plugin_dir, kubelet, sim_hosts, fail):
    inventory = sim_hosts["plain"][1]
    gpu = inventory.gpus[0].uuid
    config = _sharing_config(tmp_path, "{name: nvidia.com/gpu, replicas: 4}", failRequestsGreaterThanOne=fail)
    with RunningPlugin(plugin_dir, inventory, config_file=config,
                       device_list_strategy=["envvar", "cdi-cri"]) as plugin:
        kubelet.wait_for(1)
        one = _allocate(plugin, "nvidia-gpu.sock", [f"{gpu}::3"])
        if fail:
            with pytest.raises(grpc.RpcError) as info:
                _allocate(plugin, "nvidia-gpu.sock", [f"{gpu}::0", f"{gpu}::1"])
        else:
            two = _allocate(plugin, "nvidia-gpu.sock", [f"{gpu}::0", f"{gpu}::1"])
    assert dict(one.envs) == {"NVIDIA_VISIBLE_DEVICES": gpu}
    assert [d.name for d in one.cdi_devices] == [f"nvidia.com/gpu={gpu}"]
    if fail:
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == ("maximum request size for shared resources is 1; found 2 "
                                        "(nvidia.com/gpu container 0)")
    else:   # two replicas of one GPU are that GPU, once
        assert dict(two.envs) == {"NVIDIA_VISIBLE_DEVICES": gpu}
        assert [d.name for d in two.cdi_devices] == [f"nvidia.com/gpu={gpu}"]


def _preferred(plugin, endpoint, available, size, required=()):
    stub, channel = plugin.stub(endpoint)
    with channel:
        answer = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=available, must_include_deviceIDs=required,
                                                   allocation_size=size)]), timeout=30)
    return list(answer.container_responses[0].deviceIDs)


def test_preferred_allocation_spreads_over_the_least_shared_gpus(tmp_path, plugin_dir, kubelet, sim_hosts):
    inventory = sim_hosts["plain"][1]
    a, b = (g.uuid for g in inventory.gpus)
    config = _sharing_config(tmp_path, "{name: nvidia.com/gpu, replicas: 4}")
    with RunningPlugin(plugin_dir, inventory, config_file=config) as plugin:
        kubelet.wait_for(1)
        every = [f"{u}::{n}" for u in (a, b) for n in range(4)]
        # nothing in use: two replicas go to two GPUs, not both to the first
        fresh = _preferred(plugin, "nvidia-gpu.sock", every, 2)
        # GPU a has 2 replicas in use, b one: b's replicas come first
        busy = _preferred(plugin, "nvidia-gpu.sock", [f"{a}::2", f"{a}::3", f"{b}::1", f"{b}::2", f"{b}::3"], 1)
        # must_include stays and counts as in use
        required = _preferred(plugin, "nvidia-gpu.sock", every, 2, required=[f"{a}::0"])
    assert fresh == [f"{a}::0", f"{b}::0"]
    assert busy == [f"{b}::1"]
    assert required == [f"{a}::0", f"{b}::0"]


def test_mig_devices_shared_under_mixed(tmp_path, plugin_dir, kubelet, sim_hosts):
    inventory = sim_hosts["mig-one"][1]
    whole, migs = inventory.gpus[0], inventory.gpus[1].mig_devices
    config = _sharing_config(tmp_path, "{name: nvidia.com/mig-1g.5gb, replicas: 2, devices: ['1:1']}",
                             renameByDefault=True, failRequestsGreaterThanOne=True)
    with RunningPlugin(plugin_dir, inventory, config_file=config, mig_strategy="mixed",
                       device_id_strategy="index") as plugin:
        requests = kubelet.wait_for(3)
        gpus = _ids(plugin, "nvidia-gpu.sock")
        unshared = _ids(plugin, "nvidia-mig-1g.5gb.sock")
        shared = _ids(plugin, "nvidia-mig-1g.5gb.shared.sock")
        answer = _allocate(plugin, "nvidia-mig-1g.5gb.shared.sock", [f"{migs[1].uuid}::1"])
    assert sorted(r.resource_name for r in requests) == [
        "nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-1g.5gb.shared"]
    assert gpus == [(whole.uuid, "Healthy")]
    assert unshared == [(migs[0].uuid, "Healthy")]
    assert [i for i, _ in shared] == [f"{migs[1].uuid}::0", f"{migs[1].uuid}::1"]
    assert dict(answer.envs) == {"NVIDIA_VISIBLE_DEVICES": "1:1"}


class _OneEvent:
    def __init__(self, event):
        self.events = [event]

    def wait(self, timeout):
        return [self.events.pop()] if self.events else []


def test_an_xid_marks_every_replica_of_the_gpu(tmp_path, plugin_dir, kubelet, sim_hosts):
    inventory = sim_hosts["plain"][1]
    a, b = (g.uuid for g in inventory.gpus)
    config = _sharing_config(tmp_path, "{name: nvidia.com/gpu, replicas: 2}")
    with RunningPlugin(plugin_dir, inventory, events=_OneEvent(XidEvent(b, 79)), config_file=config) as plugin:
        kubelet.wait_for(1)
        stub, channel = plugin.stub("nvidia-gpu.sock")
        with channel:
            stream = stub.ListAndWatch(pb.Empty(), timeout=30)
            for listed in stream:
                health = {d.ID: d.health for d in listed.devices}
                if "Unhealthy" in health.values():
                    break
            stream.cancel()
    assert health == {f"{a}::0": "Healthy", f"{a}::1": "Healthy", f"{b}::0": "Unhealthy", f"{b}::1": "Unhealthy"}


def test_a_device_the_host_lacks_is_one_clear_error(tmp_path, plugin_dir, sim_hosts):
    from device_plugin.config import resolve
    from device_plugin.replicas import replicate
    from device_plugin.resources import ResourceError, build_resources

    inventory = sim_hosts["plain"][1]
    for devices, message in (("[7]", r"no device '7' of nvidia.com/gpu on this host \(an index, a MIG index "
                                     r"<gpu>:<mig> or a UUID of: 0, 1\)"),
                             ("3", r"requested 3 devices to be replicated, but only 2 devices available")):
        config = resolve({"config_file": _sharing_config(tmp_path, f"{{name: gpu, replicas: 2, devices: {devices}}}")},
                         {})
        with pytest.raises(ResourceError, match=message):
            replicate(build_resources(inventory, "none"), config.time_slicing)
    # a configured resource this host does not have is skipped, as NVIDIA's plugin skips it
    config = resolve({"config_file": _sharing_config(tmp_path, "{name: mig-1g.5gb, replicas: 2}")}, {})
    assert replicate(build_resources(inventory, "none"), config.time_slicing) == build_resources(inventory, "none")
