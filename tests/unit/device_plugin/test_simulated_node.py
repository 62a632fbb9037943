"""nvidia-device-plugin as installed, on a simulated 8-GPU node with two 4-GPU NVLink islands (GPU 7 in
MIG mode), through real grpcio clients and the stand-in kubelet: GetPreferredAllocation picks GPUs
linked by NVLink from what the simulated NVML reports, and ListAndWatch shows the health the
simulated NVML's events give: Unhealthy after `nvidia-ctk simulate xid` (an application XID changes
nothing; an XID on a MIG device marks that device), Healthy again after `simulate reset` of a lost GPU."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from tests.support.simulated_host import NVIDIA_CTK, inventory_from_marker
from tests.unit.device_plugin.conftest import channel_to

PROGRAM = Path(sys.executable).parent / "nvidia-device-plugin"
ENV = {k: v for k, v in os.environ.items() if k not in (
    "MIG_STRATEGY", "DEVICE_LIST_STRATEGY", "DEVICE_ID_STRATEGY", "CONFIG_FILE", "FAIL_ON_INIT_ERROR",
    "DP_DISABLE_HEALTHCHECKS")}


@pytest.fixture(scope="module")
def dgx(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("gcc") is None:
        pytest.skip("a simulated host needs root (mknod) and gcc")
    from simulator.host_builder import create_simulated_host

    root = tmp_path_factory.mktemp("dgx-node") / "host"
    create_simulated_host(str(root), gpus=8, model="NVIDIA A100-SXM4-40GB", driver_version="550.54.15",
                          cuda_version="12.4", mig_options=["7=1g.5gb,1g.5gb"],
                          pcie_options=["switch=0-1", "switch=2-3", "switch=4-5", "switch=6-7", "cpu=0-3", "cpu=4-7"],
                          nvlink_options=["0-3:4", "4-7:4"])
    return root, inventory_from_marker(root)


class Plugin:
    def __init__(self, root, plugin_dir, tmp_path, *args: str):
        self.plugin_dir = plugin_dir
        self.process = subprocess.Popen(
            [str(PROGRAM), "--nvidia-driver-root", str(root), "--device-plugin-dir", str(plugin_dir),
             "--cdi-root", str(tmp_path / "cdi"), "--mig-strategy", "mixed", *args],
            stderr=subprocess.PIPE, text=True, env=ENV)

    def stub(self, endpoint: str):
        channel = channel_to(self.plugin_dir / endpoint)
        return pb_grpc.DevicePluginStub(channel), channel

    def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        log = self.process.communicate(timeout=60)[1]
        assert self.process.returncode == 0, log
        assert "Traceback" not in log, log
        return log


@pytest.fixture
def plugin(dgx, plugin_dir, kubelet, tmp_path, request):
    running = Plugin(dgx[0], plugin_dir, tmp_path, *getattr(request, "param", ()))
    try:
        assert {r.resource_name for r in kubelet.wait_for(2)} == {"nvidia.com/gpu", "nvidia.com/mig-1g.5gb"}
        yield running
    finally:
        if running.process.poll() is None:
            running.log = running.stop()


def preferred(stub, available, size, must_include=()):
    request = pb.PreferredAllocationRequest(container_requests=[pb.ContainerPreferredAllocationRequest(
        available_deviceIDs=available, must_include_deviceIDs=list(must_include), allocation_size=size)])
    return list(stub.GetPreferredAllocation(request, timeout=30).container_responses[0].deviceIDs)


def test_preferred_allocation_picks_nvlink_peers(dgx, plugin):
    _, inventory = dgx
    uuid = [g.uuid for g in inventory.gpus]
    index = {u: i for i, u in enumerate(uuid)}
    stub, channel = plugin.stub("nvidia-gpu.sock")
    with channel:
        # GPUs 0, 4, 5 free: 4 and 5 share 4 NVLinks and a switch; 0 has neither with them
        assert sorted(index[d] for d in preferred(stub, [uuid[0], uuid[4], uuid[5]], 2)) == [4, 5]
        # GPU 1 must be in: its partner is in its island (NVLink), and on its switch: GPU 0
        assert sorted(index[d] for d in preferred(stub, uuid[:7], 2, [uuid[1]])) == [0, 1]
        # four of the seven whole GPUs: the full island 0-3
        assert sorted(index[d] for d in preferred(stub, uuid[:7], 4)) == [0, 1, 2, 3]
        # GPU 3 must be in, of 2-6: its NVLink and switch partner 2 (4, 5, 6 are across CPUs from it)
        chosen = sorted(index[d] for d in preferred(stub, [uuid[i] for i in (2, 3, 4, 5, 6)], 2, [uuid[3]]))
        assert chosen == [2, 3]


def simulate(*args: str) -> None:
    done = subprocess.run([str(NVIDIA_CTK), "simulate", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def health(message) -> dict[str, str]:
    return {d.ID: d.health for d in message.devices}


def next_where(stream, wanted, limit: int = 5) -> dict[str, str]:
    """The first list of the stream where wanted(list) holds: every health change of every resource sends
    each stream a list, so a stream may see lists of other resources' changes first."""
    for _ in range(limit):
        got = health(next(stream))
        if wanted(got):
            return got
    raise AssertionError(f"no list as wanted in {limit}: last {got}")


def test_list_and_watch_follows_xids_and_resets(dgx, plugin):
    root, inventory = dgx
    gpus = [g.uuid for g in inventory.gpus[:7]]
    migs = [m.uuid for m in inventory.gpus[7].mig_devices]
    gpu_stub, gpu_channel = plugin.stub("nvidia-gpu.sock")
    mig_stub, mig_channel = plugin.stub("nvidia-mig-1g.5gb.sock")
    with gpu_channel, mig_channel:
        gpu_stream = gpu_stub.ListAndWatch(pb.Empty(), timeout=120)
        mig_stream = mig_stub.ListAndWatch(pb.Empty(), timeout=120)
        assert set(health(next(gpu_stream)).values()) == {"Healthy"}
        assert set(health(next(mig_stream)).values()) == {"Healthy"}
        # an application XID first: it changes nothing, so the next list is the lost GPU's
        simulate("xid", str(root), "--gpu", "0", "--xid", "13")
        simulate("xid", str(root), "--gpu", "1", "--xid", "79")
        after_loss = health(next(gpu_stream))
        assert after_loss == {**{u: "Healthy" for u in gpus}, gpus[1]: "Unhealthy"}
        simulate("reset", str(root), "--gpu", "1")
        assert set(health(next(gpu_stream)).values()) == {"Healthy"}
        # an XID on MIG device 1 of GPU 7: that device only
        simulate("xid", str(root), "--gpu", "7", "--xid", "94", "--mig", "1")
        assert next_where(mig_stream, lambda h: h[migs[1]] == "Unhealthy") == {migs[0]: "Healthy",
                                                                                migs[1]: "Unhealthy"}
        gpu_stream.cancel()
        mig_stream.cancel()
    log = plugin.stop()
    assert "health checks off" not in log


@pytest.mark.parametrize("plugin", [("--fail-on-init-error=false",)], indirect=True)
def test_a_gpu_lost_across_a_restart_of_the_plugins_comes_back(dgx, plugin, kubelet):
    """SIGHUP while GPU 2 is lost, with --fail-on-init-error=false: the GPUs cannot be read (the plugins wait
    and retry); after the reset the plugins start again and GPU 2, Unhealthy since its XID, is Healthy
    again. (With failOnInitError true, as NVIDIA's default, the program ends there and a new one starts
    with every device Healthy.)"""
    root, inventory = dgx
    lost = inventory.gpus[2].uuid
    stub, channel = plugin.stub("nvidia-gpu.sock")
    with channel:
        stream = stub.ListAndWatch(pb.Empty(), timeout=120)
        next(stream)
        simulate("xid", str(root), "--gpu", "2", "--xid", "79")
        assert next_where(stream, lambda h: h[lost] == "Unhealthy")[lost] == "Unhealthy"
        stream.cancel()
    plugin.process.send_signal(signal.SIGHUP)
    line = ""
    while "retrying in" not in line:   # the GPUs cannot be read while GPU 2 is lost
        line = plugin.process.stderr.readline()
        assert line, "the plugin ended"
    assert "GPU is lost" in line, line
    simulate("reset", str(root), "--gpu", "2")
    kubelet.wait_for(4)   # registered again
    stub, channel = plugin.stub("nvidia-gpu.sock")
    with channel:
        stream = stub.ListAndWatch(pb.Empty(), timeout=120, wait_for_ready=True)
        assert next_where(stream, lambda h: h[lost] == "Healthy")[lost] == "Healthy"
        stream.cancel()
