"""nvidia-device-plugin on simulated hosts of 8 GPUs and of 8 GPUs x 7 MIG devices (56, mig-strategy
single): start to registered (the installed program, from its start until every resource's RegisterRequest
reached the recording Registration service), Allocate latency (p50, p99 over many calls through one gRPC
channel, one device and all of them), and the plugin's RSS after them; against the goals registered < 1 s,
Allocate p99 < 5 ms, RSS < 60 MB; and on the 8-GPU host the health-change latency: from an XID 79
written to the simulated host's event log (simulator.host_state.raise_xid, what `nvidia-ctk simulate xid`
does) to the ListAndWatch list showing the GPU Unhealthy, and from its reset to the list showing it Healthy
again (the plugin asks a lost GPU every 0.5 s), against the goal health seen < 1 s."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from tests.support.kubelet_registration import FakeKubelet
from tests.support.simulated_host import create_in_process, inventory_from_marker

PROGRAM = Path(sys.executable).parent / "nvidia-device-plugin"
HOSTS = (("8 GPUs", 8, (), "none"),
         ("56 MIG devices", 8, tuple(f"{g}=" + ",".join(["1g.5gb"] * 7) for g in range(8)), "single"))
ALLOCATE_CALLS = 1000
GOALS = {"registered": 1000.0, "allocate p99": 5.0, "rss": 60.0, "health": 1000.0}   # ms, ms, MB, ms
HEALTH_ROUNDS = 10


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _start(root: Path, folder: Path, strategy: str, kubelet: FakeKubelet) -> tuple[subprocess.Popen, float]:
    before = len(kubelet.requests)
    start = time.perf_counter()
    process = subprocess.Popen([str(PROGRAM), "--nvidia-driver-root", str(root), "--device-plugin-dir", str(folder),
                                "--mig-strategy", strategy], stderr=subprocess.DEVNULL)
    kubelet.wait_for(before + 1)
    return process, (time.perf_counter() - start) * 1000


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


def _allocate_ms(folder: Path, ids: list[str]) -> list[float]:
    import grpc

    request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
    with grpc.insecure_channel(f"unix:{folder / 'nvidia-gpu.sock'}") as channel:
        stub = pb_grpc.DevicePluginStub(channel)
        stub.Allocate(request, timeout=30)   # warm-up: the connection
        times = []
        for _ in range(ALLOCATE_CALLS):
            start = time.perf_counter()
            stub.Allocate(request, timeout=30)
            times.append((time.perf_counter() - start) * 1000)
    return times


def _own_work_ms(inventory, strategy: str, ids: list[str]) -> list[float]:
    """The plugin's own part of an Allocate of ids (device_plugin.allocate.allocate, envvar, in this
    process): what the p99 through gRPC holds beside the transport and the machine's scheduling."""
    from device_plugin.allocate import allocate
    from device_plugin.config import resolve
    from device_plugin.resources import build_resources

    config = resolve({"mig_strategy": strategy, "device_plugin_dir": "/nonexistent"}, {})
    [resource] = [r for r in build_resources(inventory, strategy) if r.name == "nvidia.com/gpu"]
    request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
    times = []
    for _ in range(ALLOCATE_CALLS):
        start = time.perf_counter()
        allocate(config, resource, request)
        times.append((time.perf_counter() - start) * 1000)
    return times


def _health_ms(root: Path, folder: Path, rounds: int) -> tuple[list[float], list[float]]:
    """(XID 79 to Unhealthy, reset to Healthy) in ms, one of each per round, GPUs taken in turn."""
    import grpc

    from simulator.host_state import raise_xid, reset_gpu

    lost, back = [], []
    with grpc.insecure_channel(f"unix:{folder / 'nvidia-gpu.sock'}") as channel:
        stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty(), timeout=600)
        next(stream)
        def seen(unhealthy: bool) -> None:   # until the list shows the GPU so
            while any(d.health == "Unhealthy" for d in next(stream).devices) != unhealthy:
                pass

        for round_ in range(rounds):
            gpu = round_ % 8
            start = time.perf_counter()
            raise_xid(root, gpu, 79)
            seen(True)
            lost.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            reset_gpu(root, gpu)
            seen(False)
            back.append((time.perf_counter() - start) * 1000)
        stream.cancel()
    return lost, back


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _verdict(name: str, value: float) -> str:
    return "OK" if value < GOALS[name] else "OVER"


def _host_lines(label: str, root: Path, strategy: str, runs: int, tmp: Path) -> list[str]:
    inventory = inventory_from_marker(root)
    uuids = ([m.uuid for g in inventory.gpus for m in g.mig_devices] if strategy == "single"
             else [g.uuid for g in inventory.gpus])
    folder = tmp / f"dp-{strategy}"
    folder.mkdir()
    kubelet = FakeKubelet(str(folder))
    kubelet.start()
    try:
        starts = []
        for _ in range(max(1, min(runs, 10))):
            process, ms = _start(root, folder, strategy, kubelet)
            starts.append(ms)
            _stop(process)
        process, _ = _start(root, folder, strategy, kubelet)
        try:
            one, every = _allocate_ms(folder, uuids[:1]), _allocate_ms(folder, uuids)
            rss = _rss_mb(process.pid)
            own = _own_work_ms(inventory, strategy, uuids)
            health = _health_ms(root, folder, HEALTH_ROUNDS) if strategy == "none" else None
        finally:
            _stop(process)
    finally:
        kubelet.stop()
    registered = sorted(starts)[len(starts) // 2]
    p99 = max(_percentile(one, 0.99), _percentile(every, 0.99))
    return [f"{label}: start to registered median {registered:.0f} ms over {len(starts)} starts "
            f"[{_verdict('registered', registered)}]",
            f"  Allocate 1 device: p50 {_percentile(one, 0.5):.2f} ms, p99 {_percentile(one, 0.99):.2f} ms; "
            f"{len(uuids)} devices: p50 {_percentile(every, 0.5):.2f} ms, p99 {_percentile(every, 0.99):.2f} ms "
            f"({ALLOCATE_CALLS} calls each) [{_verdict('allocate p99', p99)}]",
            f"  the plugin's own work for {len(uuids)} devices (no gRPC): p50 {_percentile(own, 0.5):.3f} ms, "
            f"p99 {_percentile(own, 0.99):.3f} ms",
            f"  RSS after them: {rss:.1f} MB [{_verdict('rss', rss)}]"] + _health_lines(health)


def _health_lines(health: tuple[list[float], list[float]] | None) -> list[str]:
    if health is None:
        return []
    lost, back = health
    worst = max(lost + back)
    return [f"  health: XID 79 to Unhealthy p50 {_percentile(lost, 0.5):.1f} ms, max {max(lost):.1f} ms; reset to "
            f"Healthy p50 {_percentile(back, 0.5):.1f} ms, max {max(back):.1f} ms ({len(lost)} rounds) "
            f"[{_verdict('health', worst)}]"]


def run(runs: int) -> str:
    tmp = Path(tempfile.mkdtemp(prefix="bench-device-plugin-"))
    try:
        lines = ["nvidia-device-plugin (goals: registered < 1 s, Allocate p99 < 5 ms, RSS < 60 MB, "
                 "health change seen < 1 s)", f"  load average before: {_load()}"]
        for label, gpus, mig, strategy in HOSTS:
            root = tmp / strategy
            create_in_process(root, gpus=gpus, mig_options=mig)
            lines += _host_lines(label, root, strategy, runs, tmp)
        return "\n".join(lines + [f"  load average after: {_load()} (p99s through gRPC follow the load of "
                                   "this machine: a call preempted once is past 5 ms)"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
