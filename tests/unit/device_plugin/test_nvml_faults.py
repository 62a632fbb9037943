"""A driver whose NVML library hangs or crashes never hangs nor silently kills the device plugin: at start
(the inventory is read by gct-nvml-inventory in a child with a deadline) the plugin ends with one error
line (failOnInitError true) or waits and retries (false), and SIGTERM still ends it; the topology and
the node-label facts and the topology are read by one child per start (device_plugin.nvml_child), whose
hang or crash is one line, and so is it for `nvidia-device-plugin labels`; a health thread whose driver call never returns is reported in one line while the plugins
serve on. The libraries are tests.support.hostile's (nvmlInit that never returns, a constructor that
never ends, nvmlInit that crashes with SIGSEGV; one call past the inventory's that hangs or crashes), on
copies of a simulated host."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cdi.nvml import NvmlError
from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.config import resolve
from device_plugin.manager import PluginManager, Sources
from device_plugin.nvml_child import read_in_child
from device_plugin.topology import Topology
from tests.support.hostile import HOSTILE_NVML_SOURCES, hostile_nvml_call_host, hostile_nvml_host
from tests.support.simulated_host import simulate_create
from tests.unit.device_plugin.test_plugin_grpc import _first_list

PROGRAM = Path(sys.executable).parent / "nvidia-device-plugin"
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not (Path(sys.executable).parent.parent / "libexec/gct-nvml-inventory").exists(),
                                reason="needs root (device nodes of the simulated host) and gct-nvml-inventory")
EXPECTED = {"hang": "NVML did not answer in 1 s in nvmlInit_v2",
            "load-hang": "NVML did not answer in 1 s while loading the library",
            "init-crash": "the NVML library crashed (SIGSEGV) in nvmlInit_v2"}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    return simulate_create(tmp_path_factory.mktemp("dp-nvml-faults") / "host", gpus=2, mig=None)


def _env(**extra) -> dict:
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "NVIDIA_CTK_NVML_TIMEOUT": "1", **extra}


@pytest.mark.parametrize("how", list(HOSTILE_NVML_SOURCES))
def test_a_hostile_library_at_start_is_one_line(healthy, tmp_path, plugin_dir, how):
    root = hostile_nvml_host(healthy, tmp_path / "host", how)
    started = time.monotonic()
    done = subprocess.run([str(PROGRAM), "--nvidia-driver-root", str(root), "--device-plugin-dir", str(plugin_dir)],
                          capture_output=True, text=True, env=_env(), timeout=60)
    assert done.returncode == 1 and time.monotonic() - started < 20, (done.returncode, done.stderr)
    [line] = [line for line in done.stderr.splitlines() if "error" in line]
    assert line.startswith("nvidia-device-plugin: error: ") and EXPECTED[how] in line, done.stderr
    assert "Traceback" not in done.stderr and "failOnInitError is true" in line


@pytest.mark.parametrize("how", ["hang", "init-crash"])
def test_a_hostile_library_without_fail_on_init_error_waits_and_sigterm_ends_it(healthy, tmp_path, plugin_dir, how):
    root = hostile_nvml_host(healthy, tmp_path / "host", how)
    log = tmp_path / "plugin.log"
    with open(log, "w") as out:
        process = subprocess.Popen([str(PROGRAM), "--nvidia-driver-root", str(root), "--device-plugin-dir",
                                    str(plugin_dir), "--fail-on-init-error=false"], stdout=out, stderr=out, env=_env())
        try:
            deadline = time.monotonic() + 30
            while "retrying in 5 s" not in log.read_text() and time.monotonic() < deadline:
                assert process.poll() is None, log.read_text()
                time.sleep(0.2)
            assert process.poll() is None and EXPECTED[how] in log.read_text(), log.read_text()
        finally:
            process.send_signal(signal.SIGTERM)
            status = process.wait(timeout=30)
    assert status == 0 and "Traceback" not in log.read_text(), log.read_text()
    assert not list(plugin_dir.glob("nvidia-*.sock"))   # nothing served, nothing left


def test_sigterm_ends_the_plugin_while_a_hanging_driver_is_being_read(healthy, tmp_path, plugin_dir):
    """With the limit at 30 s, a SIGTERM 2 s into the read of a driver that hangs ends the program with status 0
    at once, not at the deadline."""
    root = hostile_nvml_host(healthy, tmp_path / "host", "hang")
    log = tmp_path / "plugin.log"
    with open(log, "w") as out:
        process = subprocess.Popen([str(PROGRAM), "--nvidia-driver-root", str(root), "--device-plugin-dir",
                                    str(plugin_dir), "--fail-on-init-error=false"], stdout=out, stderr=out,
                                   env=_env(NVIDIA_CTK_NVML_TIMEOUT="30"))
        time.sleep(2)
        assert process.poll() is None, log.read_text()
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        status = process.wait(timeout=60)
    assert status == 0 and time.monotonic() - started < 5, (status, time.monotonic() - started, log.read_text())
    assert "stopping while the GPUs were being read" in log.read_text() and "Traceback" not in log.read_text()


@pytest.mark.parametrize("how, message", [
    ("hang", "NVML did not answer in 2 s while reading the GPU topology"),
    ("load-hang", "NVML did not answer in 2 s while reading the GPU topology"),
    ("init-crash", "the NVML library crashed (SIGSEGV) while reading the GPU topology")])
def test_the_topology_child_bounds_a_hang_and_survives_a_crash(healthy, tmp_path, how, message):
    root = hostile_nvml_host(healthy, tmp_path / "host", how)
    started = time.monotonic()
    with pytest.raises(NvmlError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        read_in_child("topology", str(root), [0, 1], timeout=2)
    assert time.monotonic() - started < 15 and "\n" not in str(info.value)
    # the healthy host's answer comes back whole
    links = read_in_child("topology", str(healthy), [0, 1], timeout=30)
    assert set(links) == {(0, 1), (1, 0)}


@pytest.fixture(scope="module")
def mig_host(tmp_path_factory) -> Path:
    """GPU 1 in MIG mode: its MIG devices' attributes are node-label facts (nvmlDeviceGetAttributes_v2)."""
    return simulate_create(tmp_path_factory.mktemp("dp-nvml-faults-mig") / "host", gpus=2, mig="1=3g.20gb,1g.5gb")


class _ReadChildren:
    """Counts the device_plugin.nvml_child `read` children started in this process (subprocess.Popen)."""

    def __init__(self, monkeypatch):
        self.started: list[subprocess.Popen] = []
        real = subprocess.Popen

        def counting(argv, *args, **kwargs):
            process = real(argv, *args, **kwargs)
            if any("device_plugin.nvml_child" in str(a) for a in argv) and "read" in argv:
                self.started.append(process)
            return process
        monkeypatch.setattr(subprocess, "Popen", counting)


def _started_plugin(root: Path, plugin_dir: Path, labels: Path, monkeypatch) -> PluginManager:
    """The plugin's own sources (device_plugin.main.plugin_sources) on root, started once (not run)."""
    from device_plugin.main import plugin_sources

    machine = labels.parent / "product_name"
    machine.write_text("test box\n")
    given = {"nvidia_driver_root": str(root), "device_plugin_dir": str(plugin_dir), "mig_strategy": "mixed",
             "gfd_output_file": str(labels), "gfd_no_timestamp": True, "gfd_machine_type_file": str(machine)}
    sources = plugin_sources(given)
    sources.events = lambda config: None   # no health child here: only the start's reads are counted
    manager = PluginManager(sources, sources.config())
    assert manager.start_plugins()
    return manager


def test_one_child_reads_the_label_facts_and_the_topology(mig_host, tmp_path, plugin_dir, kubelet, monkeypatch):
    """A start with --gfd-output-file on 2 GPUs pays one NVML child, not two, and its answers are those
    each reader gives in a child of its own."""
    from cdi.nvml import load_inventory
    from device_plugin.labels import node_labels, sharing_of
    from device_plugin.topology import Topology
    from tests.unit.device_plugin.test_labels import read_labels

    children = _ReadChildren(monkeypatch)
    labels = tmp_path / "gfd"
    manager = _started_plugin(mig_host, plugin_dir, labels, monkeypatch)
    try:
        assert len(children.started) == 1, children.started
        inventory = load_inventory(str(mig_host))
        facts = read_in_child("label-facts", str(mig_host), str(tmp_path / "product_name"), inventory)
        assert read_labels(labels) == node_labels(facts, "mixed", None, sharing_of(manager.config.sharing))
        assert read_labels(labels)["nvidia.com/mig-1g.5gb.count"] == "1"
        links = read_in_child("topology", str(mig_host), [0, 1])
        assert set(links) == {(0, 1), (1, 0)}
        expected = Topology(links)
        for server in manager.servers:
            assert server.service.pair_score(0, 1) == expected.pair_score(0, 1) > 0   # known: not the 0 of unknown
        assert len(children.started) == 3   # the two reads just made here, one child each
    finally:
        manager.stop_plugins()


@pytest.mark.parametrize("how, labelled, logged", [
    ("topology-hang", True, ["WARNING GPU topology unknown, preferring no GPUs over others: NVML did not answer in 2 s "
                             "while reading the GPU topology"]),
    ("attributes-hang", False, ["ERROR node labels not written: NVML did not answer in 2 s while reading the node-label facts",
                                "WARNING GPU topology unknown, preferring no GPUs over others: NVML did not answer in 2 s "
                                "while reading the node-label facts"]),
    ("attributes-crash", False, ["ERROR node labels not written: the NVML library crashed (SIGSEGV) while reading "
                                 "the node-label facts",
                                 "WARNING GPU topology unknown, preferring no GPUs over others: the NVML library crashed "
                                 "(SIGSEGV) while reading the node-label facts"])])
def test_a_fault_in_the_start_child_is_one_line_each_and_the_plugin_serves(mig_host, tmp_path, plugin_dir, kubelet,
                                                                         monkeypatch, caplog, how, labelled, logged):
    """The one child reads the label facts, then the topology, handing each over as soon as it is read: a
    topology that hangs still gives the labels; a fault in the facts is one line for each, and the child
    is not waited for twice (one deadline)."""
    monkeypatch.setenv("NVIDIA_CTK_NVML_TIMEOUT", "2")
    root = hostile_nvml_call_host(mig_host, tmp_path / "host", how)
    children = _ReadChildren(monkeypatch)
    caplog.set_level(logging.INFO, logger="nvidia-device-plugin")
    labels = tmp_path / "gfd"
    started = time.monotonic()
    manager = _started_plugin(root, plugin_dir, labels, monkeypatch)
    try:
        assert time.monotonic() - started < 15 and len(children.started) == 1
        assert labels.exists() == labelled
        lines = [f"{r.levelname} {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == len(logged) and all(want in line for want, line in zip(logged, lines)), lines
        assert {s.resource.name for s in manager.servers} == {"nvidia.com/gpu", "nvidia.com/mig-3g.20gb",
                                                              "nvidia.com/mig-1g.5gb"}
    finally:
        manager.stop_plugins()
    assert children.started[0].returncode is not None   # the child is gone (killed at the deadline) and reaped


@pytest.mark.parametrize("how, message", [
    ("attributes-hang", "NVML did not answer in 1 s while reading the node-label facts (the driver hangs; "
                        "NVIDIA_CTK_NVML_TIMEOUT sets the limit)"),
    ("attributes-crash", "the NVML library crashed (SIGSEGV) while reading the node-label facts")])
def test_the_labels_command_reads_nvml_in_the_child_one_line_and_status_1(mig_host, tmp_path, how, message):
    """`nvidia-device-plugin labels` reads its facts through the plugin's child: a hang is bounded and a
    crash is a line, not a SIGSEGV of the command; the long-running one says it retries and goes on."""
    root = hostile_nvml_call_host(mig_host, tmp_path / "host", how)
    out = tmp_path / "gfd"
    started = time.monotonic()
    done = subprocess.run([str(PROGRAM), "labels", "--oneshot", "--output", str(out), "--nvidia-driver-root",
                           str(root)], capture_output=True, text=True, env=_env(), timeout=60)
    assert done.returncode == 1 and time.monotonic() - started < 20, (done.returncode, done.stderr)
    assert done.stderr == f"nvidia-device-plugin: error: {message} (driver root {root})\n"
    assert not out.exists()
    log = tmp_path / "labels.log"
    with open(log, "w") as err:
        process = subprocess.Popen([str(PROGRAM), "labels", "--output", str(out), "--nvidia-driver-root", str(root),
                                    "--fail-on-init-error=false", "--sleep-interval", "0.5"], stderr=err, env=_env())
        try:
            deadline = time.monotonic() + 30
            while log.read_text().count("retrying in 0.5 s") < 2:   # a second try: the first one did not end it
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        finally:
            process.send_signal(signal.SIGTERM)
            status = process.wait(timeout=30)
    assert status == 0 and "Traceback" not in log.read_text() and message in log.read_text()


class _StuckSource:
    """An event source whose driver never answers a wait."""

    def __init__(self):
        self.release = threading.Event()

    def wait(self, timeout):
        self.release.wait()
        return []


@pytest.mark.parametrize("stuck_in", ["wait", "events"])
def test_a_health_thread_stuck_in_the_driver_is_reported_and_serving_goes_on(plugin_dir, kubelet, sim_hosts,
                                                                            monkeypatch, caplog, stuck_in):
    monkeypatch.setenv("NVIDIA_CTK_NVML_TIMEOUT", "1")
    source, release = _StuckSource(), threading.Event()

    def events(config):
        if stuck_in == "events":   # the event set itself never made (nvmlEventSetCreate hangs)
            release.wait()
        return source
    config = resolve({"device_plugin_dir": str(plugin_dir)}, {})
    manager = PluginManager(Sources(config=lambda: config, inventory=lambda c: sim_hosts["plain"][1],
                                    topology=lambda c, i, r: Topology(), events=events), config)
    thread = threading.Thread(target=manager.run)
    caplog.set_level(logging.INFO, logger="nvidia-device-plugin")
    thread.start()
    try:
        kubelet.wait_for(1)
        deadline = time.monotonic() + 20
        while not any("health checks stalled" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
            time.sleep(0.1)
        from tests.unit.device_plugin.conftest import channel_to
        from device_plugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc

        with channel_to(os.path.join(plugin_dir, "nvidia-gpu.sock")) as channel:
            listed = _first_list(pb_grpc.DevicePluginStub(channel))
            assert [d.health for d in listed.devices] == ["Healthy", "Healthy"]
            answer = pb_grpc.DevicePluginStub(channel).Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[listed.devices[0].ID])]), timeout=30)
            assert answer.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == listed.devices[0].ID
        time.sleep(1.5)
        stalled = [r for r in caplog.records if "health checks stalled" in r.getMessage()]
        assert len(stalled) == 1 and stalled[0].levelno == logging.ERROR   # one line, not one per poll
    finally:
        manager.request_stop()
        thread.join(timeout=30)
        source.release.set()
        release.set()
    assert not thread.is_alive()


def _events_child(plugin_pid: int, deadline: float = 20) -> int:
    """The pid of the plugin's health-events child (device_plugin.nvml_child.child_argv("events", ...))."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == plugin_pid and b"events" in argv \
                    and any(b"device_plugin.nvml_child" in a for a in argv):
                return int(pid)
        time.sleep(0.1)
    raise AssertionError("no health-events child")


@pytest.mark.parametrize("fault, message", [
    (signal.SIGSEGV, "health checks ended: the NVML library crashed (SIGSEGV) reading the health events"),
    (signal.SIGSTOP, "health checks ended: NVML did not answer in 2 s waiting for health events")])
def test_a_crash_or_hang_in_the_health_events_is_one_line_and_serving_goes_on(healthy, plugin_dir, kubelet, tmp_path,
                                                                              fault, message):
    """The health events are read by a child of the plugin: a SIGSEGV there (what a library crashing in
    nvmlEventSetWait does), or a child that stops answering (a hang), is one error line; every GPU is then
    Unhealthy (as for a failing wait: none is known to be well) and the plugin goes on serving Allocate."""
    from device_plugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
    from tests.unit.device_plugin.conftest import channel_to

    log = tmp_path / "plugin.log"
    with open(log, "w") as out:
        process = subprocess.Popen([str(PROGRAM), "--nvidia-driver-root", str(healthy), "--device-plugin-dir",
                                    str(plugin_dir)], stdout=out, stderr=out, env=_env(NVIDIA_CTK_NVML_TIMEOUT="2"))
    try:
        kubelet.wait_for(1)
        child = _events_child(process.pid)
        deadline = time.monotonic() + 30
        while "health checks on: NVML events of 2 GPUs" not in log.read_text():   # the child's event set made
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        with channel_to(plugin_dir / "nvidia-gpu.sock") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            stream = stub.ListAndWatch(pb.Empty(), timeout=60)
            assert {d.health for d in next(stream).devices} == {"Healthy"}
            os.kill(child, fault)
            assert {d.health for d in next(stream).devices} == {"Unhealthy"}
            stream.cancel()
            listed = _first_list(stub)
            answer = stub.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[listed.devices[0].ID])]), timeout=30)
            assert answer.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == listed.devices[0].ID
        assert process.poll() is None
    finally:
        process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=60)
    text = log.read_text()
    assert status == 0 and "Traceback" not in text, text
    [line] = [line for line in text.splitlines() if "health checks ended" in line]
    assert message in line and line.startswith("nvidia-device-plugin: ERROR: "), text
    assert not Path(f"/proc/{child}").exists()   # the child is gone (killed once it hung) and reaped
