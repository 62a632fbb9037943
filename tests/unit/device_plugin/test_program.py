"""nvidia-device-plugin as installed (the launcher): its command line, its one-line errors, and a run
on a simulated host (NVML from the host's driver root) against the stand-in kubelet: it registers,
writes the CDI spec its names resolve in, re-registers on SIGHUP and ends cleanly on SIGTERM."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from tests.unit.device_plugin.conftest import channel_to

PROGRAM = Path(sys.executable).parent / "nvidia-device-plugin"
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in (
    "MIG_STRATEGY", "DEVICE_LIST_STRATEGY", "DEVICE_ID_STRATEGY", "CONFIG_FILE", "FAIL_ON_INIT_ERROR")}


def run(*args, **kwargs):
    return subprocess.run([str(PROGRAM), *args], capture_output=True, text=True, timeout=120, env=CLEAN_ENV,
                          **kwargs)


def test_help_and_version():
    done = run("--help")
    assert done.returncode == 0
    for flag in ("--mig-strategy", "--device-list-strategy", "--device-id-strategy", "--pass-device-specs",
                 "--fail-on-init-error", "--nvidia-driver-root", "--config-file", "--cdi-annotation-prefix",
                 "$DEVICE_LIST_STRATEGY", "--cdi-root", "--device-plugin-dir"):
        assert flag in done.stdout
    assert run("--version").stdout == "nvidia-device-plugin (gpu-container-toolkit) 0.1.0\n"


def test_keeps_its_environment_but_not_the_loaders_variables(tmp_path):
    # NVIDIA's settings come from the environment; LD_PRELOAD never reaches the interpreter (the launcher
    # drops it for every program: the dynamic loader would complain of the missing library on stderr)
    config = tmp_path / "c.yaml"
    config.write_text("version: v1\nflags:\n  migStrategy: none\n")
    done = subprocess.run([str(PROGRAM), "--version"], capture_output=True, text=True, timeout=120,
                          env={**CLEAN_ENV, "LD_PRELOAD": str(tmp_path / "missing.so")})
    assert (done.returncode, done.stderr) == (0, "")
    done = subprocess.run([str(PROGRAM), "--config-file", str(config)], capture_output=True, text=True, timeout=120,
                          env={**CLEAN_ENV, "MIG_STRATEGY": "sideways"})
    assert done.stderr == "nvidia-device-plugin: error: invalid mig-strategy 'sideways' (one of: none, single, " \
                          "mixed) (--mig-strategy)\n"


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("version: v1\nflags:\n  migStategy: mixed\n")
    for args, text in ((["--config-file", str(bad)], "unknown key 'migStategy' (flags.migStategy)"),
                       (["--nope"], "unrecognized arguments: --nope"),
                       (["--nvidia-driver-root", str(tmp_path / "none"), "--device-plugin-dir", str(tmp_path)],
                        "cannot use driver root")):
        done = run(*args)
        assert done.returncode == 1, done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("nvidia-device-plugin: error: ") and text in lines[0], lines


def test_without_a_driver_it_waits_when_told_to(tmp_path):
    process = subprocess.Popen([str(PROGRAM), "--fail-on-init-error=false", "--nvidia-driver-root",
                                str(tmp_path / "none"), "--device-plugin-dir", str(tmp_path)],
                               stderr=subprocess.PIPE, text=True, env=CLEAN_ENV)
    try:
        line = process.stderr.readline()
        assert "cannot use driver root" in line and "retrying in 5 s" in line
        assert process.poll() is None
    finally:
        process.send_signal(signal.SIGTERM)
        rest = process.communicate(timeout=60)[1]
    assert process.returncode == 0 and "Traceback" not in rest


def test_serves_a_simulated_host(tmp_path, plugin_dir, kubelet, sim_hosts):
    root, inventory = sim_hosts["mig-one"]
    cdi_root = tmp_path / "cdi"
    process = subprocess.Popen(
        [str(PROGRAM), "--nvidia-driver-root", str(root), "--device-plugin-dir", str(plugin_dir),
         "--cdi-root", str(cdi_root), "--device-id-strategy", "index"],
        stderr=subprocess.PIPE, text=True,
        env={**CLEAN_ENV, "MIG_STRATEGY": "mixed", "DEVICE_LIST_STRATEGY": "cdi-cri"})
    try:
        requests = kubelet.wait_for(2)
        assert {r.resource_name for r in requests} == {"nvidia.com/gpu", "nvidia.com/mig-1g.5gb"}
        with channel_to(plugin_dir / "nvidia-mig-1g.5gb.sock") as channel:
            answer = pb_grpc.DevicePluginStub(channel).Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[inventory.gpus[1].mig_devices[0].uuid])]), timeout=30)
        [name] = [d.name for d in answer.container_responses[0].cdi_devices]
        assert name == "nvidia.com/gpu=1:0"
        spec = yaml.safe_load((cdi_root / "nvidia.yaml").read_text())
        assert spec["kind"] == "nvidia.com/gpu" and "1:0" in {d["name"] for d in spec["devices"]}
        process.send_signal(signal.SIGHUP)
        assert len(kubelet.wait_for(4)) == 4
    finally:
        process.send_signal(signal.SIGTERM)
        log = process.communicate(timeout=60)[1]
    assert process.returncode == 0, log
    assert "Traceback" not in log and "SIGHUP: starting the plugins again" in log
    assert sorted(os.listdir(plugin_dir)) == ["kubelet.sock"]


def test_a_changed_config_file_reloads_and_a_broken_one_keeps_serving(tmp_path, plugin_dir, kubelet, sim_hosts):
    root, _ = sim_hosts["mig-one"]
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags:\n  migStrategy: none\n")
    process = subprocess.Popen(
        [str(PROGRAM), "--nvidia-driver-root", str(root), "--device-plugin-dir", str(plugin_dir),
         "--config-file", str(config)], stderr=subprocess.PIPE, text=True, env=CLEAN_ENV)
    try:
        assert [r.resource_name for r in kubelet.wait_for(1)] == ["nvidia.com/gpu"]
        config.write_text("version: v1\nflags:\n  migStrategy: mixed\n")
        assert {r.resource_name for r in kubelet.wait_for(3)[1:]} == {"nvidia.com/gpu", "nvidia.com/mig-1g.5gb"}
        config.write_text("version: v1\nflags:\n  migStrategy: [\n")
        process.send_signal(signal.SIGHUP)
        with channel_to(plugin_dir / "nvidia-mig-1g.5gb.sock") as channel:   # still served
            stub = pb_grpc.DevicePluginStub(channel)
            assert stub.GetDevicePluginOptions(pb.Empty(), timeout=30).get_preferred_allocation_available
    finally:
        process.send_signal(signal.SIGTERM)
        log = process.communicate(timeout=60)[1]
    assert process.returncode == 0, log
    assert "config file changed: starting the plugins again" in log
    broken = [line for line in log.splitlines() if "config not reloaded" in line]
    assert broken and "not valid YAML at line 4" in broken[0], log
    assert len(kubelet.requests) == 3 and "Traceback" not in log
