"""Node labels as gpu-feature-discovery writes them (device_plugin/labels.py): the exact label sets of
`nvidia-device-plugin labels` per MIG strategy on simulated hosts (NVML of the host's driver root, read
by the installed program: one process per host, as NVML loads once per process), the plugin writing
them with --gfd-output-file and removing them at its end, the feature file written atomically, and
GFD's rules (families, product names, several models) on described facts."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from device_plugin.labels import GpuFacts, LabelError, MigFacts, NodeFacts, arch_family, node_labels, \
    product_name, render, write_labels
from tests.support.simulated_host import simulate_create

PROGRAM = Path(sys.executable).parent / "nvidia-device-plugin"
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("GFD_") and k not in (
    "MIG_STRATEGY", "CONFIG_FILE", "FAIL_ON_INIT_ERROR", "NVIDIA_DRIVER_ROOT")}

COMMON = {
    "nvidia.com/cuda.driver-version.full": "550.54.15", "nvidia.com/cuda.driver-version.major": "550",
    "nvidia.com/cuda.driver-version.minor": "54", "nvidia.com/cuda.driver-version.revision": "15",
    "nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.driver.minor": "54", "nvidia.com/cuda.driver.rev": "15",
    "nvidia.com/cuda.runtime-version.full": "12.4", "nvidia.com/cuda.runtime-version.major": "12",
    "nvidia.com/cuda.runtime-version.minor": "4", "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "4", "nvidia.com/gpu.machine": "DGX-A100-test-box",
    "nvidia.com/mig.capable": "true", "nvidia.com/mps.capable": "false",
}
A100_GPUS = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "2", "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.memory": "40960", "nvidia.com/gpu.family": "ampere",
    "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0",
}
# what the simulated A100's driver answers for a 1g.5gb MIG device (nvmlDeviceGetAttributes_v2)
MIG_1G5GB = {"memory": "4864", "multiprocessors": "14", "slices.gi": "1", "slices.ci": "1", "engines.copy": "1",
             "engines.decoder": "0", "engines.encoder": "0", "engines.jpeg": "0", "engines.ofa": "0"}


def mig_labels(resource: str, count: int) -> dict[str, str]:
    return {f"{resource}.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", f"{resource}.count": str(count),
            f"{resource}.replicas": "1", f"{resource}.sharing-strategy": "none",
            **{f"{resource}.{k}": v for k, v in MIG_1G5GB.items()}}


def read_labels(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    assert lines == sorted(lines) and all(line.count("=") >= 1 for line in lines)
    return dict(line.split("=", 1) for line in lines)


def labels_of(root: Path, out: Path, strategy: str, *extra: str) -> dict[str, str]:
    machine = out.parent / "product_name"
    machine.write_text("DGX A100 test box\n")
    done = subprocess.run([str(PROGRAM), "labels", "--oneshot", "--no-timestamp", "--output", str(out),
                           "--nvidia-driver-root", str(root), "--mig-strategy", strategy,
                           "--machine-type-file", str(machine), *extra],
                          capture_output=True, text=True, timeout=120, env=CLEAN_ENV)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return read_labels(out)


@pytest.mark.parametrize("strategy, expected", [
    ("none", {**COMMON, **A100_GPUS}),
    # GPUs in and out of MIG mode: single cannot serve them, GFD's INVALID labels
    ("single", {**COMMON, **A100_GPUS, "nvidia.com/mig.strategy": "single",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-INVALID", "nvidia.com/gpu.count": "0",
                "nvidia.com/gpu.replicas": "0", "nvidia.com/gpu.memory": "0"}),
    ("mixed", {**COMMON, **A100_GPUS, "nvidia.com/mig.strategy": "mixed",
               **mig_labels("nvidia.com/mig-1g.5gb", 2)}),
])
def test_a_host_with_one_gpu_in_mig_mode(sim_hosts, tmp_path, strategy, expected):
    root, _ = sim_hosts["mig-one"]
    assert labels_of(root, tmp_path / "gfd", strategy) == expected


def test_single_on_a_host_whose_every_gpu_has_one_profile(sim_hosts, tmp_path):
    root, _ = sim_hosts["mig-all-same"]
    gpu = {**A100_GPUS, "nvidia.com/gpu.replicas": "0"}   # every A100 in MIG mode: GFD's labeler without sharing
    assert labels_of(root, tmp_path / "gfd", "none") == {**COMMON, **gpu}
    assert labels_of(root, tmp_path / "gfd", "single") == {
        **COMMON, **gpu, "nvidia.com/mig.strategy": "single", **mig_labels("nvidia.com/gpu", 3)}


def test_mixed_with_several_profiles_and_no_whole_gpu(sim_hosts, tmp_path):
    root, _ = sim_hosts["mig-all-mixed"]
    labels = labels_of(root, tmp_path / "gfd", "mixed")
    assert {k.split(".")[1].removeprefix("com/mig-") for k in labels if k.startswith("nvidia.com/mig-")} == {"3g", "2g", "1g"}
    assert {k: labels[k] for k in ("nvidia.com/mig-3g.20gb.count", "nvidia.com/mig-2g.10gb.count",
                                   "nvidia.com/mig-1g.5gb.count", "nvidia.com/mig-3g.20gb.slices.gi",
                                   "nvidia.com/mig-3g.20gb.product", "nvidia.com/gpu.count",
                                   "nvidia.com/gpu.replicas")} == {
        "nvidia.com/mig-3g.20gb.count": "1", "nvidia.com/mig-2g.10gb.count": "1", "nvidia.com/mig-1g.5gb.count": "1",
        "nvidia.com/mig-3g.20gb.slices.gi": "3", "nvidia.com/mig-3g.20gb.product": "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
        "nvidia.com/gpu.count": "2", "nvidia.com/gpu.replicas": "0"}
    single = labels_of(root, tmp_path / "gfd", "single")   # two profiles: INVALID
    assert single["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"


def test_a_hopper_host_without_mig_and_the_timestamp(tmp_path):
    root = tmp_path / "h100"
    subprocess.run([str(PROGRAM.parent / "nvidia-ctk"), "simulate", "create", str(root), "--gpus", "1",
                    "--model", "NVIDIA H100 80GB HBM3", "--driver-version", "560.35"], check=True,
                   capture_output=True)
    out = tmp_path / "features.d" / "gfd"   # its folder is made
    done = subprocess.run([str(PROGRAM), "labels", "--output", str(out), "--nvidia-driver-root", str(root),
                           "--machine-type-file", "", "--sleep-interval", "1h"],
                          capture_output=True, text=True, timeout=120, env={**CLEAN_ENV, "GFD_ONESHOT": "true"})
    assert (done.returncode, done.stderr) == (0, "")
    labels = read_labels(out)
    assert int(labels.pop("nvidia.com/gfd.timestamp")) > 1_700_000_000
    assert {k: labels[k] for k in ("nvidia.com/gpu.product", "nvidia.com/gpu.family", "nvidia.com/gpu.compute.major",
                                   "nvidia.com/gpu.machine", "nvidia.com/cuda.driver-version.revision",
                                   "nvidia.com/cuda.driver.rev", "nvidia.com/gpu.count")} == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.machine": "unknown",
        "nvidia.com/cuda.driver-version.revision": "", "nvidia.com/cuda.driver.rev": "", "nvidia.com/gpu.count": "1"}
    assert stat.S_IMODE(out.stat().st_mode) == 0o644 and os.listdir(out.parent) == ["gfd"]


def test_settings_from_the_config_file_and_bad_input_is_one_line(sim_hosts, tmp_path):
    root, _ = sim_hosts["mig-one"]
    out = tmp_path / "gfd"
    config = tmp_path / "config.yaml"
    config.write_text(f"version: v1\nflags:\n  migStrategy: mixed\n  gfd:\n    outputFile: {out}\n"
                      "    noTimestamp: true\n")
    done = subprocess.run([str(PROGRAM), "labels", "--oneshot", "--config-file", str(config),
                           "--nvidia-driver-root", str(root)], capture_output=True, text=True, timeout=120,
                          env=CLEAN_ENV)
    assert done.returncode == 0, done.stderr
    assert read_labels(out)["nvidia.com/mig-1g.5gb.count"] == "2"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args, text in ((["--sleep-interval", "soon"], "invalid duration 'soon'"),
                       (["--nope"], "unrecognized arguments: --nope"),
                       (["--oneshot", "--output", str(fifo)], "not a regular file"),
                       (["--oneshot", "--nvidia-driver-root", str(tmp_path / "none")], "cannot use driver root")):
        done = subprocess.run([str(PROGRAM), "labels", "--nvidia-driver-root", str(root), *args],
                              capture_output=True, text=True, timeout=120, env=CLEAN_ENV)
        lines = done.stderr.splitlines()
        assert done.returncode == 1 and len(lines) == 1, done.stderr
        assert lines[0].startswith("nvidia-device-plugin: error: ") and text in lines[0], lines


def test_time_slicing_labels_say_the_replicas_and_the_strategy(sim_hosts, tmp_path):
    root, _ = sim_hosts["mig-one"]
    out = tmp_path / "gfd"
    config = tmp_path / "config.yaml"
    config.write_text(f"version: v1\nflags:\n  migStrategy: mixed\n  gfd:\n    outputFile: {out}\n"
                      "    noTimestamp: true\nsharing:\n  timeSlicing:\n    resources:\n"
                      "    - {name: nvidia.com/gpu, replicas: 4}\n"
                      "    - {name: nvidia.com/mig-1g.5gb, replicas: 2, rename: nvidia.com/small}\n")
    done = subprocess.run([str(PROGRAM), "labels", "--oneshot", "--config-file", str(config),
                           "--nvidia-driver-root", str(root)], capture_output=True, text=True, timeout=120,
                          env=CLEAN_ENV)
    assert done.returncode == 0, done.stderr
    labels = read_labels(out)
    # GPU 0 is whole: time-sliced 4 ways, not renamed (-SHARED); the MIG devices renamed (no -SHARED)
    assert {k: v for k, v in labels.items() if k.startswith(("nvidia.com/gpu.", "nvidia.com/mig-"))
            and k.rsplit(".", 1)[-1] in ("product", "count", "replicas", "sharing-strategy")} == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED", "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/mig-1g.5gb.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/mig-1g.5gb.count": "2",
        "nvidia.com/mig-1g.5gb.replicas": "2", "nvidia.com/mig-1g.5gb.sharing-strategy": "time-slicing"}


def test_mps_labels_say_the_replicas_the_strategy_and_mps_capable(sim_hosts, tmp_path):
    """sharing.mps as GFD labels it: replicas, sharing-strategy mps, -SHARED, mps.capable true; the labels
    command takes the file without the plugin's CDI flags (it serves nothing)."""
    root, _ = sim_hosts["plain"]
    out = tmp_path / "gfd"
    config = tmp_path / "config.yaml"
    config.write_text(f"version: v1\nflags:\n  gfd:\n    outputFile: {out}\n    noTimestamp: true\n"
                      "sharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n")
    done = subprocess.run([str(PROGRAM), "labels", "--oneshot", "--config-file", str(config),
                           "--nvidia-driver-root", str(root)], capture_output=True, text=True, timeout=120,
                          env=CLEAN_ENV)
    assert done.returncode == 0, done.stderr
    labels = read_labels(out)
    assert {k: labels[k] for k in ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.replicas",
                                   "nvidia.com/gpu.sharing-strategy", "nvidia.com/mps.capable")} == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED", "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/mps.capable": "true"}


def test_the_long_running_labeller_removes_its_file_at_sigterm(sim_hosts, tmp_path):
    root, _ = sim_hosts["plain"]
    out = tmp_path / "gfd"
    process = subprocess.Popen([str(PROGRAM), "labels", "--output", str(out), "--nvidia-driver-root", str(root),
                                "--sleep-interval", "0.2"], stderr=subprocess.PIPE, text=True, env=CLEAN_ENV)
    try:
        first = None
        while first is None or out.stat().st_ino == first:   # rewritten at every interval
            if out.exists() and first is None:
                first = out.stat().st_ino
            assert process.poll() is None
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        log = process.communicate(timeout=60)[1]
    assert (process.returncode, log) == (0, "")
    assert not out.exists() and os.listdir(tmp_path) == []


def test_the_plugin_writes_the_labels_and_removes_them_at_its_end(sim_hosts, tmp_path, plugin_dir, kubelet):
    root, _ = sim_hosts["mig-one"]
    out = tmp_path / "labels" / "gfd"
    process = subprocess.Popen([str(PROGRAM), "--nvidia-driver-root", str(root), "--device-plugin-dir",
                                str(plugin_dir), "--mig-strategy", "mixed", "--gfd-output-file", str(out),
                                "--gfd-no-timestamp"], stderr=subprocess.PIPE, text=True, env=CLEAN_ENV)
    try:
        kubelet.wait_for(2)   # the labels are written before the plugins are served
        labels = read_labels(out)
        assert labels["nvidia.com/mig-1g.5gb.count"] == "2" and labels["nvidia.com/mig.strategy"] == "mixed"
        assert "nvidia.com/gfd.timestamp" not in labels
    finally:
        process.send_signal(signal.SIGTERM)
        log = process.communicate(timeout=60)[1]
    assert process.returncode == 0 and "Traceback" not in log, log
    assert not out.exists()


# -- GFD's rules on described facts

def a100(mig_enabled=False, migs=(), name="NVIDIA A100-SXM4-40GB"):
    return GpuFacts(name=name, memory_mb=40960, compute=(8, 0), mig_capable=True, mig_enabled=mig_enabled,
                    migs=tuple(migs))


def test_families_and_product_names():
    assert [arch_family(*cc) for cc in ((3, 7), (6, 0), (7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0))] == [
        "kepler", "pascal", "volta", "turing", "ampere", "ampere", "ada-lovelace", "hopper", "undefined"]
    assert product_name("NVIDIA GeForce RTX 4090 (rev. a1)", "MIG", "1g.10gb.me") == \
        "NVIDIA-GeForce-RTX-4090-rev.-a1-MIG-1g.10gb.me"


def test_several_models_the_last_whole_gpu_model_wins_and_counts_are_per_model():
    t4 = GpuFacts(name="Tesla T4", memory_mb=15360, compute=(7, 5), mig_capable=False, mig_enabled=False)
    facts = NodeFacts("550.54.15", "12.4", (a100(mig_enabled=True, migs=[MigFacts("1g.5gb", {"memory": 4864})]), t4))
    labels = node_labels(facts, "mixed")
    assert {k: labels[k] for k in ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.family",
                                   "nvidia.com/gpu.replicas", "nvidia.com/mig-1g.5gb.memory")} == {
        "nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.family": "turing",
        "nvidia.com/gpu.replicas": "1", "nvidia.com/mig-1g.5gb.memory": "4864"}
    # a GPU in MIG mode without MIG devices: single is INVALID, mixed ignores it
    empty = NodeFacts("550.54.15", "12.4", (a100(mig_enabled=True), a100(mig_enabled=True, migs=[
        MigFacts("1g.5gb", {})])))
    assert node_labels(empty, "single")["nvidia.com/gpu.product"].endswith("-MIG-INVALID")
    assert node_labels(empty, "mixed")["nvidia.com/mig-1g.5gb.count"] == "1"
    assert node_labels(NodeFacts("550.54.15", "12.4"), "none", timestamp=5) == {"nvidia.com/gfd.timestamp": "5"}
    with pytest.raises(LabelError, match="does not match"):
        node_labels(NodeFacts("550", "12.4", (a100(),)), "none")


def test_the_file_is_replaced_whole_and_a_device_is_never_replaced(tmp_path):
    out = tmp_path / "gfd"
    out.write_text("old=1\n")
    write_labels(str(out), {"b": "2", "a": "1"})
    assert out.read_text() == render({"a": "1", "b": "2"}) == "a=1\nb=2\n"
    assert os.listdir(tmp_path) == ["gfd"]
    with pytest.raises(LabelError, match="not a regular file"):
        write_labels("/dev/null", {"a": "1"})
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
