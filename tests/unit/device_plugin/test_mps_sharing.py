"""sharing.mps: nvidia-device-plugin as installed, on a simulated 2-GPU host, in a private mount namespace
of the test's (the shm tmpfs it mounts is never the machine's), with the stand-in kubelet and real grpcio
clients: one MPS control daemon per GPU with the limits of 2 shares, the shares listed as `<UUID>::<n>`,
Allocate naming the GPU and the share in CDI, the shares' CDI spec; a daemon killed makes its shares
Unhealthy, the plugin starts it again in the same folders and they are Healthy again; SIGTERM stops
the daemons and removes the spec."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
import yaml

from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from tests.support.mountns import process_in_mount_ns
from tests.support.simulated_host import NVIDIA_CTK
from tests.unit.device_plugin.conftest import channel_to

PROGRAM = Path(sys.executable).parent / "nvidia-device-plugin"

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("gcc") is None,
                                reason="a simulated host and mounts need root and gcc")


class NsPlugin:
    """The installed plugin started with nsenter in a mount namespace of its own."""

    def __init__(self, ns_pid: int, root, tmp_path, plugin_dir, config: str, *args: str):
        self.ns_pid, self.plugin_dir = ns_pid, plugin_dir
        self.mps_root, self.cdi_root = tmp_path / "mps", tmp_path / "cdi"
        self.log = open(tmp_path / "plugin.log", "w+")
        env = {"PATH": os.environ["PATH"]}
        self.process = subprocess.Popen(
            ["nsenter", "-t", str(ns_pid), "-m", str(PROGRAM), "--nvidia-driver-root", str(root),
             "--device-plugin-dir", str(plugin_dir), "--cdi-root", str(self.cdi_root), "--mps-root",
             str(self.mps_root), "--device-list-strategy", "cdi-cri", "--config-file", config, *args],
            stdout=self.log, stderr=self.log, env=env)

    def stub(self, endpoint: str):
        channel = channel_to(self.plugin_dir / endpoint)
        return pb_grpc.DevicePluginStub(channel), channel

    def status(self) -> dict:
        done = subprocess.run(["nsenter", "-t", str(self.ns_pid), "-m", str(NVIDIA_CTK), "mps", "status",
                               "--mps-root", str(self.mps_root), "--format", "json"],
                              capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]})
        assert done.returncode == 0, done.stderr
        return {row["uuid"]: row for row in json.loads(done.stdout)}

    def text(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)
        text = self.text()
        self.log.close()
        return text


def _mps_config(tmp_path, replicas: int = 2, extra: str = "") -> str:
    path = tmp_path / "config.yaml"
    path.write_text(f"version: v1\nsharing:\n  mps:\n{extra}    resources:\n"
                    f"    - {{name: nvidia.com/gpu, replicas: {replicas}}}\n")
    return str(path)


def _wait(what: str, check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def ns():
    with process_in_mount_ns() as pid:
        yield pid


def _compute_modes(root) -> list[str]:
    done = subprocess.run([str(root / "usr/bin/nvidia-smi"), "--query-gpu=compute_mode", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.split()


@needs_root
def test_a_daemon_per_gpu_shares_listed_and_allocated_through_cdi(tmp_path, plugin_dir, kubelet, sim_hosts, ns):
    root, inventory = sim_hosts["plain"]
    plugin = NsPlugin(ns, root, tmp_path, plugin_dir, _mps_config(tmp_path))
    try:
        [registered] = kubelet.wait_for(1)
        stub, channel = plugin.stub("nvidia-gpu.sock")
        with channel:
            stream = stub.ListAndWatch(pb.Empty(), timeout=60)
            listed = [(d.ID, d.health) for d in next(stream).devices]
            stream.cancel()
            gpu = inventory.gpus[1]
            answer = stub.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[f"{gpu.uuid}::1"])]), timeout=30).container_responses[0]
            with pytest.raises(grpc.RpcError) as two:    # failRequestsGreaterThanOne: true unless set false
                stub.Allocate(pb.AllocateRequest(container_requests=[
                    pb.ContainerAllocateRequest(devices_ids=[f"{gpu.uuid}::0", f"{gpu.uuid}::1"])]), timeout=30)
        status = plugin.status()
        spec = yaml.safe_load((plugin.cdi_root / "nvidia-mps.yaml").read_text())
        modes_during = _compute_modes(root)
    finally:
        log = plugin.stop()
        after = plugin.status() if plugin.mps_root.exists() else {}
    assert registered.resource_name == "nvidia.com/gpu"
    # each shared GPU in EXCLUSIVE_PROCESS mode while its daemon runs, DEFAULT again after (as NVIDIA's)
    assert modes_during == ["Exclusive_Process"] * len(inventory.gpus)
    assert _compute_modes(root) == ["Default"] * len(inventory.gpus)
    assert listed == [(f"{g.uuid}::{n}", "Healthy") for g in inventory.gpus for n in range(2)]
    assert [d.name for d in answer.cdi_devices] == [f"nvidia.com/gpu={gpu.uuid}", f"nvidia.com/gpu={gpu.uuid}::1"]
    assert not answer.envs and not answer.mounts
    assert two.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "maximum request size for shared resources is 1; found 2" in two.value.details()
    # one daemon per GPU with the limits of 2 shares, the plugin's
    assert set(status) == {g.uuid for g in inventory.gpus}
    for g in inventory.gpus:
        row = status[g.uuid]
        assert row["running"] and row["owner"] == "nvidia-device-plugin" and row["replicas"] == 2
        assert row["daemon_active_thread_percentage"] == 50.0
        assert row["daemon_pinned_mem_limit"] == 20 << 30        # an A100 40GB in 2 shares
    # the shares' spec: by UUID and by index, the share's pipe folder, /dev/shm and variable
    assert spec["kind"] == "nvidia.com/gpu"
    names = [d["name"] for d in spec["devices"]]
    assert names == [n for g in inventory.gpus for r in range(2) for n in (f"{g.uuid}::{r}", f"{g.index}::{r}")]
    edits = spec["devices"][4]["containerEdits"]       # GPU 1, share 0
    assert edits["env"] == ["CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"]
    assert [(m["hostPath"], m["containerPath"]) for m in edits["mounts"]] == [
        (str(plugin.mps_root / inventory.gpus[1].uuid / "pipe"), "/tmp/nvidia-mps"),
        (str(plugin.mps_root / inventory.gpus[1].uuid / "shm"), "/dev/shm")]
    # SIGTERM: the daemons are stopped, the spec is gone
    assert "Traceback" not in log, log
    assert plugin.process.returncode == 0, log
    assert after == {} and not (plugin.cdi_root / "nvidia-mps.yaml").exists(), log


@needs_root
@pytest.mark.parametrize("how", ["killed", "socket removed"])
def test_a_dead_daemon_marks_its_shares_unhealthy_and_is_started_again(tmp_path, plugin_dir, kubelet, sim_hosts, ns,
                                                                       how):
    """A daemon SIGKILLed, or one whose control socket is gone (it runs on, unreachable: the plugin ends it)."""
    root, inventory = sim_hosts["plain"]
    plugin = NsPlugin(ns, root, tmp_path, plugin_dir, _mps_config(tmp_path))
    gpu, other = inventory.gpus[1], inventory.gpus[0]
    seen = []
    try:
        kubelet.wait_for(1)
        before = _wait("the daemons", lambda: (s := plugin.status()) and len(s) == 2 and s)
        pipe = plugin.mps_root / gpu.uuid / "pipe"
        pipe_identity = os.stat(f"/proc/{ns}/root{pipe}").st_ino
        stub, channel = plugin.stub("nvidia-gpu.sock")
        with channel:
            stream = stub.ListAndWatch(pb.Empty(), timeout=60)
            seen.append({d.ID: d.health for d in next(stream).devices})
            if how == "killed":
                os.kill(before[gpu.uuid]["pid"], signal.SIGKILL)
            else:
                os.unlink(f"/proc/{ns}/root{pipe}/control")
            for listed in stream:
                seen.append({d.ID: d.health for d in listed.devices})
                if len(seen) == 3:
                    break
            stream.cancel()
        after = plugin.status()
        pipe_now = os.stat(f"/proc/{ns}/root{pipe}").st_ino
    finally:
        log = plugin.stop()
    shares = [f"{gpu.uuid}::0", f"{gpu.uuid}::1"]
    others = {f"{other.uuid}::{n}": "Healthy" for n in range(2)}
    assert seen[0] == {**others, **{s: "Healthy" for s in shares}}
    assert seen[1] == {**others, **{s: "Unhealthy" for s in shares}}, log
    assert seen[2] == seen[0], log
    # a new daemon, with the same limits, in the same pipe folder (pods already running keep reaching it)
    revived = after[gpu.uuid]
    assert revived["running"] and revived["pid"] != before[gpu.uuid]["pid"]
    assert revived["daemon_active_thread_percentage"] == 50.0
    assert after[other.uuid]["pid"] == before[other.uuid]["pid"]
    assert pipe_now == pipe_identity
    why = "ended" if how == "killed" else "lost its control socket"
    assert f"the MPS control daemon of {gpu.uuid} (pid {before[gpu.uuid]['pid']}) {why}" in log
    if how == "socket removed":      # the unreachable daemon was ended, not left running beside the new one
        assert _state(before[gpu.uuid]["pid"]) in (None, "Z")
    assert f"MPS control daemon of {gpu.uuid} running again" in log
    assert "Traceback" not in log, log


@needs_root
@pytest.mark.parametrize("host, strategy, message", [
    ("mig-all-same", "single", "sharing using MPS is not supported for MIG devices (sharing.mps nvidia.com/gpu)"),
    # under none a GPU in MIG mode is offered whole, and runs no CUDA work of its own
    ("mig-one", "none", "the GPU is in MIG mode: share its MIG devices instead (GPU-"),
])
def test_mps_of_mig_devices_is_refused_as_nvidias_plugin_refuses_it(tmp_path, plugin_dir, sim_hosts, ns, host,
                                                                    strategy, message):
    root, _ = sim_hosts[host]
    plugin = NsPlugin(ns, root, tmp_path, plugin_dir, _mps_config(tmp_path), "--mig-strategy", strategy)
    plugin.process.wait(timeout=60)
    log = plugin.stop()
    assert plugin.process.returncode == 1
    assert log.strip().splitlines()[-1].startswith(f"nvidia-device-plugin: error: {message}"), log
    assert not list((tmp_path / "mps").glob("*/share.json")), log     # no daemon left behind


@needs_root
def test_a_restart_of_the_plugins_keeps_a_daemon_and_new_replicas_restart_it(tmp_path, plugin_dir, kubelet, sim_hosts,
                                                                              ns):
    """SIGHUP (the plugins start over) keeps each daemon that answers with the replicas asked; a config
    file now asking for 4 replicas gets daemons at 25%."""
    root, inventory = sim_hosts["plain"]
    config = _mps_config(tmp_path)
    plugin = NsPlugin(ns, root, tmp_path, plugin_dir, config)
    try:
        kubelet.wait_for(1)
        first = _wait("the daemons", lambda: (s := plugin.status()) and len(s) == 2 and s)
        plugin.process.send_signal(signal.SIGHUP)
        kubelet.wait_for(2)                                  # registered again
        kept = plugin.status()
        _mps_config(tmp_path, replicas=4)                    # the plugin reloads a changed config file
        kubelet.wait_for(3)
        def four_shares():
            rows = plugin.status()
            return len(rows) == 2 and all(r["replicas"] == 4 and r["running"] for r in rows.values()) and rows
        changed = _wait("daemons of 4 shares", four_shares)
    finally:
        log = plugin.stop()
    assert {u: r["pid"] for u, r in kept.items()} == {u: r["pid"] for u, r in first.items()}, log
    for uuid, row in changed.items():
        assert row["running"] and row["pid"] != first[uuid]["pid"] and row["daemon_active_thread_percentage"] == 25.0
    assert "Traceback" not in log, log


def test_two_shares_of_a_gpu_in_one_container_name_the_gpu_and_one_share(tmp_path, sim_hosts):
    """failRequestsGreaterThanOne false: a container may take two shares of one GPU and gets the GPU and
    the first share's edits once (every share of a GPU has the same edits)."""
    from device_plugin.allocate import allocate
    from device_plugin.config import resolve
    from device_plugin.replicas import replicate
    from device_plugin.resources import build_resources

    inventory = sim_hosts["plain"][1]
    config = resolve({"config_file": _mps_config(tmp_path, extra="    failRequestsGreaterThanOne: false\n"),
                      "device_list_strategy": ["cdi-annotations", "cdi-cri"], "cdi_root": str(tmp_path / "cdi"),
                      "device_id_strategy": "index"}, {})
    [resource] = replicate(build_resources(inventory, "none"), config.sharing)
    gpu = inventory.gpus[1].uuid
    request = pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[f"{gpu}::1", f"{gpu}::0"])])
    [answer] = allocate(config, resource, request).container_responses
    assert [d.name for d in answer.cdi_devices] == ["nvidia.com/gpu=1", "nvidia.com/gpu=1::1"]
    assert list(answer.annotations.values()) == ["nvidia.com/gpu=1,nvidia.com/gpu=1::1"]


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


@needs_root
def test_a_daemon_of_nvidia_ctk_is_used_and_left_running(tmp_path, plugin_dir, kubelet, sim_hosts, ns):
    """A daemon `nvidia-ctk mps start` runs with the replicas asked is the plugin's daemon for that GPU (same
    pid, its limits), and is still running after the plugin ends; the plugin's own daemon is stopped."""
    root, inventory = sim_hosts["plain"]
    ctk = ["nsenter", "-t", str(ns), "-m", str(NVIDIA_CTK), "mps"]
    mps_root = str(tmp_path / "mps")
    done = subprocess.run([*ctk, "start", "--device", "1", "--replicas", "2", "--mps-root", mps_root,
                           "--driver-root", str(root)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    plugin = NsPlugin(ns, root, tmp_path, plugin_dir, _mps_config(tmp_path))
    try:
        ours = plugin.status()[inventory.gpus[1].uuid]
        kubelet.wait_for(1)
        during = plugin.status()
        log = plugin.stop()
        after = plugin.status()
    finally:
        subprocess.run([*ctk, "stop", "--all", "--mps-root", mps_root], capture_output=True, timeout=60)
    gpu0, gpu1 = (g.uuid for g in inventory.gpus)
    assert during[gpu1]["pid"] == ours["pid"] and during[gpu1]["owner"] == "nvidia-ctk"
    assert during[gpu0]["owner"] == "nvidia-device-plugin" and during[gpu0]["running"]
    assert set(after) == {gpu1} and after[gpu1]["running"] and after[gpu1]["pid"] == ours["pid"], log
    assert f"MPS control daemon of {gpu1} kept" in log


@needs_root
@pytest.mark.parametrize("strategy", ["envvar", "volume-mounts"])
def test_without_cdi_a_share_reaches_the_container_through_the_response_as_in_nvidias_plugin(
        tmp_path, sim_hosts, ns, strategy):
    """envvar or volume-mounts with sharing.mps (NVIDIA's plugin takes them: its Allocate response carries
    CUDA_MPS_PIPE_DIRECTORY and mounts of the pipe folder and /dev/shm): the response names the GPU as the
    strategy does and carries the daemon's pipe folder (read-only), its /dev/shm and the variable. With
    no daemon running for the GPU, Allocate is refused naming it."""
    from device_plugin.allocate import AllocateError, allocate
    from device_plugin.config import resolve
    from device_plugin.replicas import replicate
    from device_plugin.resources import build_resources

    root, inventory = sim_hosts["plain"]
    mps_root = str(tmp_path / "mps")
    config = resolve({"config_file": _mps_config(tmp_path), "device_list_strategy": [strategy],
                      "cdi_root": str(tmp_path / "cdi"), "mps_root": mps_root}, {})
    [resource] = replicate(build_resources(inventory, "none"), config.sharing)
    gpu = inventory.gpus[1].uuid
    request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[f"{gpu}::1"])])
    with pytest.raises(AllocateError, match="no MPS control daemon runs for the device"):
        allocate(config, resource, request)
    ctk = ["nsenter", "-t", str(ns), "-m", str(NVIDIA_CTK), "mps"]
    done = subprocess.run([*ctk, "start", "--device", "1", "--replicas", "2", "--mps-root", mps_root,
                           "--driver-root", str(root)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    try:
        [answer] = allocate(config, resource, request).container_responses
    finally:
        subprocess.run([*ctk, "stop", "--all", "--mps-root", mps_root], capture_output=True, timeout=60)
    visible = gpu if strategy == "envvar" else "/var/run/nvidia-container-devices"
    assert dict(answer.envs) == {"NVIDIA_VISIBLE_DEVICES": visible, "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps"}
    mounts = [(m.container_path, m.host_path, m.read_only) for m in answer.mounts
              if not m.container_path.startswith("/var/run/nvidia-container-devices")]
    assert mounts == [("/tmp/nvidia-mps", f"{mps_root}/{gpu}/pipe", True), ("/dev/shm", f"{mps_root}/{gpu}/shm", False)]
    assert not answer.cdi_devices and not answer.annotations
