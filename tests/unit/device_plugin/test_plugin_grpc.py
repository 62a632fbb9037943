"""The plugin's servers driven through real grpcio clients on unix sockets in temp dirs, on simulated
hosts: what it registers, what ListAndWatch lists, what Allocate answers per strategy (and that its
CDI names are devices of the spec `nvidia-ctk cdi generate` writes for the host), and its errors."""
from __future__ import annotations

import os
import random
import threading

import grpc
import pytest

from cdi.generate import generate_spec
from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from device_plugin.config import resolve
from device_plugin.manager import PluginManager, Sources
from device_plugin.topology import Topology
from tests.unit.device_plugin.conftest import channel_to


class RunningPlugin:
    """A PluginManager serving a simulated host's inventory in a thread."""

    def __init__(self, plugin_dir, inventory, events=None, **settings):
        self.config = resolve({"device_plugin_dir": str(plugin_dir), **settings}, {})
        sources = Sources(config=lambda: self.config, inventory=lambda c: inventory,
                          topology=lambda c, i, r: Topology(), events=lambda c: events)
        self.manager = PluginManager(sources, self.config)
        self.thread = threading.Thread(target=self.manager.run)
        self.plugin_dir = plugin_dir

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.manager.request_stop()
        self.thread.join()

    def stub(self, endpoint):
        channel = channel_to(os.path.join(self.plugin_dir, endpoint))
        return pb_grpc.DevicePluginStub(channel), channel


def _first_list(stub):
    stream = stub.ListAndWatch(pb.Empty(), timeout=30)
    first = next(stream)
    stream.cancel()
    return first


def test_registration_messages(plugin_dir, kubelet, sim_hosts):
    with RunningPlugin(plugin_dir, sim_hosts["mig-one"][1], mig_strategy="mixed"):
        requests = kubelet.wait_for(2)
    assert {(r.version, r.endpoint, r.resource_name) for r in requests} == {
        ("v1beta1", "nvidia-gpu.sock", "nvidia.com/gpu"),
        ("v1beta1", "nvidia-mig-1g.5gb.sock", "nvidia.com/mig-1g.5gb")}
    for r in requests:
        assert r.options.get_preferred_allocation_available and not r.options.pre_start_required
    assert sorted(os.listdir(plugin_dir)) == ["kubelet.sock"]   # the plugins' sockets are gone after the stop


@pytest.mark.parametrize("id_strategy", ["uuid", "index"])
def test_list_and_watch_lists_uuids_per_mig_strategy(plugin_dir, kubelet, sim_hosts, id_strategy):
    inventory = sim_hosts["mig-one"][1]
    with RunningPlugin(plugin_dir, inventory, mig_strategy="mixed", device_id_strategy=id_strategy) as plugin:
        kubelet.wait_for(2)
        gpu_stub, gpu_channel = plugin.stub("nvidia-gpu.sock")
        mig_stub, mig_channel = plugin.stub("nvidia-mig-1g.5gb.sock")
        with gpu_channel, mig_channel:
            gpus, migs = _first_list(gpu_stub), _first_list(mig_stub)
            options = gpu_stub.GetDevicePluginOptions(pb.Empty(), timeout=30)
    # the kubelet knows devices by UUID whatever the id strategy (it names them to the runtime only)
    assert [(d.ID, d.health) for d in gpus.devices] == [(inventory.gpus[0].uuid, "Healthy")]
    assert [d.ID for d in migs.devices] == [m.uuid for m in inventory.gpus[1].mig_devices]
    assert options.get_preferred_allocation_available


def test_a_health_change_is_sent_at_once(plugin_dir, kubelet, sim_hosts):
    inventory = sim_hosts["plain"][1]
    with RunningPlugin(plugin_dir, inventory) as plugin:
        kubelet.wait_for(1)
        stub, channel = plugin.stub("nvidia-gpu.sock")
        with channel:
            stream = stub.ListAndWatch(pb.Empty(), timeout=60)
            assert [d.health for d in next(stream).devices] == ["Healthy", "Healthy"]
            plugin.manager.health.set_healthy([inventory.gpus[1].uuid], False)
            assert [d.health for d in next(stream).devices] == ["Healthy", "Unhealthy"]
            plugin.manager.health.set_healthy([inventory.gpus[1].uuid], True)
            assert [d.health for d in next(stream).devices] == ["Healthy", "Healthy"]
            stream.cancel()


def _allocate(plugin, endpoint, ids):
    stub, channel = plugin.stub(endpoint)
    with channel:
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
        return stub.Allocate(request, timeout=30).container_responses[0]


def _spec_names(root, inventory):
    spec = generate_spec(str(root), inventory)
    return {f"{spec.kind}={d.name}" for d in spec.devices}


@pytest.mark.parametrize("id_strategy", ["uuid", "index"])
def test_allocate_per_list_strategy(plugin_dir, kubelet, sim_hosts, id_strategy):
    root, inventory = sim_hosts["mig-one"]
    mig = inventory.gpus[1].mig_devices[1]
    want = mig.uuid if id_strategy == "uuid" else "1:1"
    strategies = ["envvar", "volume-mounts", "cdi-annotations", "cdi-cri"]
    answers = {}
    for strategy in strategies + ["envvar,cdi-cri"]:
        with RunningPlugin(plugin_dir, inventory, mig_strategy="mixed", device_id_strategy=id_strategy,
                           device_list_strategy=strategy.split(",")) as plugin:
            kubelet.wait_for(2 * (len(answers) + 1))
            answers[strategy] = _allocate(plugin, "nvidia-mig-1g.5gb.sock", [mig.uuid])
    assert dict(answers["envvar"].envs) == {"NVIDIA_VISIBLE_DEVICES": want}
    assert not answers["envvar"].annotations and not answers["envvar"].cdi_devices
    volume = answers["volume-mounts"]
    assert dict(volume.envs) == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(m.host_path, m.container_path) for m in volume.mounts] == [
        ("/dev/null", f"/var/run/nvidia-container-devices/{want}")]
    [(key, value)] = answers["cdi-annotations"].annotations.items()
    assert key.startswith("cdi.k8s.io/nvidia-device-plugin_") and value == f"nvidia.com/gpu={want}"
    assert not answers["cdi-annotations"].envs
    assert [d.name for d in answers["cdi-cri"].cdi_devices] == [f"nvidia.com/gpu={want}"]
    both = answers["envvar,cdi-cri"]
    assert dict(both.envs) == {"NVIDIA_VISIBLE_DEVICES": want} and len(both.cdi_devices) == 1
    assert f"nvidia.com/gpu={want}" in _spec_names(root, inventory)   # the name resolves in our spec


def test_pass_device_specs(plugin_dir, kubelet, sim_hosts):
    root, inventory = sim_hosts["mig-one"]
    mig = inventory.gpus[1].mig_devices[0]
    with RunningPlugin(plugin_dir, inventory, mig_strategy="mixed", pass_device_specs=True,
                       nvidia_driver_root=str(root)) as plugin:
        kubelet.wait_for(2)
        answer = _allocate(plugin, "nvidia-mig-1g.5gb.sock", [mig.uuid])
    paths = [d.container_path for d in answer.devices]
    assert paths[:3] == [f"/dev/nvidia{inventory.gpus[1].minor}", f"/dev/nvidia-caps/nvidia-cap{mig.gi_cap_minor}",
                         f"/dev/nvidia-caps/nvidia-cap{mig.ci_cap_minor}"]
    assert "/dev/nvidiactl" in paths
    assert all(d.host_path == f"{root}{d.container_path}" and d.permissions == "rw" for d in answer.devices)


def test_bad_requests_are_refused_in_one_line_and_the_plugin_keeps_serving(plugin_dir, kubelet, sim_hosts):
    inventory = sim_hosts["mig-one"][1]
    mig_uuid = inventory.gpus[1].mig_devices[0].uuid
    rng = random.Random(23)
    with RunningPlugin(plugin_dir, inventory, mig_strategy="mixed") as plugin:
        kubelet.wait_for(2)
        stub, channel = plugin.stub("nvidia-gpu.sock")
        with channel:
            with pytest.raises(grpc.RpcError) as info:   # a MIG device is not an nvidia.com/gpu
                stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
                    devices_ids=[mig_uuid])]), timeout=30)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert info.value.details() == (f"unknown device {mig_uuid!r}: not a device of nvidia.com/gpu "
                                            "(nvidia.com/gpu container 0)")
            for _ in range(1000):
                ids = ["".join(rng.choice("GPU-\n\x1b0123456789abcdef:") for _ in range(rng.randrange(0, 50)))
                       for _ in range(rng.randrange(0, 4))]
                try:
                    stub.Allocate(pb.AllocateRequest(container_requests=[
                        pb.ContainerAllocateRequest(devices_ids=ids)]), timeout=30)
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "\n" not in e.details()
            with pytest.raises(grpc.RpcError, match="unknown device 'GPU-nope'"):
                stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
                    pb.ContainerPreferredAllocationRequest(available_deviceIDs=["GPU-nope"], allocation_size=1)]),
                    timeout=30)
            good = stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
                devices_ids=[inventory.gpus[0].uuid])]), timeout=30)
    assert good.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == inventory.gpus[0].uuid


def test_preferred_allocation_honours_must_include(plugin_dir, kubelet, sim_hosts):
    inventory = sim_hosts["plain"][1]
    uuids = [g.uuid for g in inventory.gpus]
    with RunningPlugin(plugin_dir, inventory) as plugin:
        kubelet.wait_for(1)
        stub, channel = plugin.stub("nvidia-gpu.sock")
        with channel:
            answer = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
                pb.ContainerPreferredAllocationRequest(available_deviceIDs=uuids, must_include_deviceIDs=[uuids[1]],
                                                       allocation_size=1)]), timeout=30)
    assert list(answer.container_responses[0].deviceIDs) == [uuids[1]]


def test_reregisters_when_the_kubelet_restarts(plugin_dir, kubelet, sim_hosts):
    with RunningPlugin(plugin_dir, sim_hosts["plain"][1]):
        kubelet.wait_for(1)
        kubelet.restart()
        requests = kubelet.wait_for(2)
    assert [r.resource_name for r in requests] == ["nvidia.com/gpu", "nvidia.com/gpu"]


@pytest.mark.parametrize("kind", ["regular file", "symlink"])
def test_a_kubelet_socket_that_is_no_socket_is_refused(plugin_dir, kind):
    from device_plugin.kubelet import KubeletError, register
    from device_plugin.server import options

    path = plugin_dir / "kubelet.sock"
    if kind == "regular file":
        path.write_text("")
    else:
        path.symlink_to(plugin_dir / "elsewhere.sock")
    with pytest.raises(KubeletError, match=f"the kubelet's socket is a {kind}") as info:
        register(str(plugin_dir), "nvidia-gpu.sock", "nvidia.com/gpu", options())
    assert str(path) in str(info.value)


def test_a_recreated_kubelet_socket_is_seen_even_on_a_reused_inode(tmp_path):
    import socket

    from device_plugin.created_watch import CreatedWatch

    path = str(tmp_path / "kubelet.sock")
    watch = CreatedWatch(str(tmp_path), "kubelet.sock")
    try:
        assert watch.available and not watch.created()
        for _ in range(5):   # file systems hand a freed inode to the next file: the same (device, inode) again
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(path)
            (tmp_path / "nvidia-gpu.sock").touch()   # another name: not the kubelet's
            assert watch.created() and not watch.created()
            os.unlink(path)
            os.unlink(tmp_path / "nvidia-gpu.sock")
    finally:
        watch.close()


class QueuedEvents:
    """An EventSource handing out the XID events a test puts in (the NVML one is not written yet)."""

    def __init__(self):
        import queue

        self.queue = queue.Queue()

    def wait(self, timeout):
        import queue

        try:
            return [self.queue.get(timeout=timeout)]
        except queue.Empty:
            return []


def test_a_critical_xid_marks_the_gpu_and_its_mig_devices_unhealthy(plugin_dir, kubelet, sim_hosts):
    from device_plugin.health import XidEvent

    inventory = sim_hosts["mig-one"][1]
    events = QueuedEvents()
    with RunningPlugin(plugin_dir, inventory, events=events, mig_strategy="mixed") as plugin:
        kubelet.wait_for(2)
        stub, channel = plugin.stub("nvidia-mig-1g.5gb.sock")
        with channel:
            stream = stub.ListAndWatch(pb.Empty(), timeout=60)
            assert [d.health for d in next(stream).devices] == ["Healthy", "Healthy"]
            events.queue.put(XidEvent(inventory.gpus[1].uuid, 13))   # an application's error: no change
            events.queue.put(XidEvent(inventory.gpus[1].uuid, 79))   # fallen off the bus
            assert [d.health for d in next(stream).devices] == ["Unhealthy", "Unhealthy"]
            stream.cancel()
        assert plugin.manager.health.generation == 1   # the application XID changed nothing
        assert plugin.manager.health.health(inventory.gpus[0].uuid) == "Healthy"
