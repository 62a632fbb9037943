"""nvidia-device-plugin against a real kubelet and containerd (tests/support/kube), on a simulated host
(2 GPUs, GPU 1 in MIG mode with two 1g.5gb MIG devices): the kubelet offers what the plugin registers, a
static pod asking for a GPU or a MIG device gets exactly the one the kubelet allocated (the container's
nvidia-smi and /dev say so, and the kubelet's pod-resources API agrees), through containerd 1.7's own CDI
(cdi-cri, the spec the plugin wrote under --cdi-root) and through our runtime shim on containerd 1.6
(cdi-annotations, envvar, volume-mounts); under mig-strategy none a GPU in MIG mode is one whole
nvidia.com/gpu; a restarted kubelet gets the plugin back, a restarted containerd changes nothing; with a control plane the scheduler sees the plugin's counts, and an XID (`nvidia-ctk simulate
xid`) takes a GPU out of the node's allocatable until `simulate reset` brings it back."""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from tests.e2e.shim_host import SHIM
from tests.support.kube import images
from tests.support.kube.containerd import ContainerdSettings
from tests.support.kube.node import pod_manifest
from tests.support.simulated_host import create_in_process, inventory_from_marker

pytestmark = pytest.mark.e2e

PLUGIN = Path(sys.executable).parent / "nvidia-device-plugin"
PROBE = ("nvidia-smi -L | sed 's/^/smi /'; ls /dev/nvidia0 /dev/nvidia1 /dev/nvidia-caps/ 2>/dev/null | sed 's/^/dev /'; "
         "echo \"env NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES\"; echo probe-done; exec sleep 3600")


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    root = tmp_path_factory.mktemp("dp-e2e") / "host"
    create_in_process(root, gpus=2, mig_options=("1=1g.5gb,1g.5gb",))
    return root, inventory_from_marker(root)


class Plugin:
    """nvidia-device-plugin started inside the node's namespace, stopped with SIGTERM (its log kept)."""

    def __init__(self, node, args: list[str], log: Path, prefix: tuple[str, ...] = ()):
        self.log = log
        self.out = open(log, "w")
        self.process = node.popen([*prefix, str(PLUGIN), *args], stdout=self.out, stderr=self.out)

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)
        self.out.close()
        return self.log.read_text()


def _gpu_pod(name: str, resource: str, image: str = images.BUSYBOX_GLIBC_IMAGE) -> dict:
    return pod_manifest(name, ["sh", "-c", PROBE], image=image, limits={resource: 1})


def _probe(node, name: str) -> list[str]:
    from tests.support.kube.control_plane import wait_until

    return wait_until(lambda: "probe-done" in node.container_log(name, "main") and
                      node.container_log(name, "main").splitlines(), f"{name}'s probe output", 60, node.daemons())


def _given(node, name: str, resource: str, static: bool = True) -> list[str]:
    """The device ids the kubelet's pod-resources API says the pod's container got (a static pod's name
    is <name>-<node>)."""
    with node.pod_resources() as api:
        return api.devices_of("default", f"{name}-{node.name}" if static else name)["main"][resource]


def test_pods_get_exactly_their_gpu_and_mig_device_through_containerd_cdi(kube_node, host, tmp_path):
    root, inventory = host
    node = kube_node(containerd=ContainerdSettings(version="1.7", cdi_spec_dirs=("/var/run/cdi",)), glibc_image=True)
    plugin = Plugin(node, ["--nvidia-driver-root", str(root), "--mig-strategy", "mixed", "--device-list-strategy",
                           "cdi-cri", "--cdi-root", "/var/run/cdi"], tmp_path / "plugin.log")
    try:
        gpus = node.wait_allocatable("nvidia.com/gpu", 1)
        migs = node.wait_allocatable("nvidia.com/mig-1g.5gb", 2)
        assert gpus == [inventory.gpus[0].uuid]
        assert sorted(migs) == sorted(m.uuid for m in inventory.gpus[1].mig_devices)
        assert node.path("/var/run/cdi/nvidia.yaml").exists()

        node.add_static_pod(_gpu_pod("gpu", "nvidia.com/gpu"))
        node.add_static_pod(_gpu_pod("mig", "nvidia.com/mig-1g.5gb"))
        node.wait_static_pod_running("gpu")
        node.wait_static_pod_running("mig")
        gpu_lines, mig_lines = _probe(node, "gpu"), _probe(node, "mig")

        assert _given(node, "gpu", "nvidia.com/gpu") == [inventory.gpus[0].uuid]
        assert [l for l in gpu_lines if l.startswith("smi GPU")] == [
            f"smi GPU 0: {inventory.gpus[0].name} (UUID: {inventory.gpus[0].uuid})"]
        assert "dev /dev/nvidia0" in gpu_lines and "dev /dev/nvidia1" not in gpu_lines

        [mig_uuid] = _given(node, "mig", "nvidia.com/mig-1g.5gb")
        assert mig_uuid in migs
        smi = [l for l in mig_lines if l.startswith("smi ")]
        assert any(mig_uuid in l for l in smi), mig_lines
        assert not any(inventory.gpus[0].uuid in l for l in smi), mig_lines
        other = next(m.uuid for m in inventory.gpus[1].mig_devices if m.uuid != mig_uuid)
        assert not any(other in l for l in smi), mig_lines
        assert "dev /dev/nvidia1" in mig_lines and "dev /dev/nvidia0" not in mig_lines

        # a restarted kubelet forgets its plugins: the plugin registers again and the devices come back
        node.restart_kubelet()
        assert node.wait_allocatable("nvidia.com/mig-1g.5gb", 2, timeout=60)
        # a restarted containerd changes nothing for the plugin: the GPU freed by a deleted pod goes to a new one
        node.restart_containerd()
        node.remove_static_pod("gpu")
        node.add_static_pod(_gpu_pod("gpu-again", "nvidia.com/gpu"))
        node.wait_static_pod_running("gpu-again")
        assert any(inventory.gpus[0].uuid in line for line in _probe(node, "gpu-again"))
        assert _given(node, "gpu-again", "nvidia.com/gpu") == [inventory.gpus[0].uuid]
    finally:
        log = plugin.stop()
    assert "Traceback" not in log and "kubelet.sock re-created" in log, log


def test_the_daemonsets_way_a_spec_of_the_nodes_paths_reaches_the_pod(kube_node, host, tmp_path):
    """As in packaging/kubernetes/: the plugin reads the node's driver root through a mount of it elsewhere
    (--container-driver-root, here a bind mount in the node's namespace standing for the container's
    /driver-root; the plugin runs in a mount namespace of its own where the node's path of the root is
    covered, as a container has no such path) and writes the spec into the node's /var/run/cdi naming the
    node's own paths (--nvidia-driver-root): containerd 1.7 applies it and the pod gets its GPU. The spec
    names no path of the mount, which containerd could not open."""
    root, inventory = host
    mount = tmp_path / "driver-root"
    mount.mkdir()
    node = kube_node(containerd=ContainerdSettings(version="1.7", cdi_spec_dirs=("/var/run/cdi",)), glibc_image=True)
    node.run(["mount", "--bind", str(root), str(mount)], check=True)
    hook = Path(sys.executable).parent / "nvidia-cdi-hook"
    plugin = Plugin(node, ["--nvidia-driver-root", str(root), "--container-driver-root", str(mount),
                           "--nvidia-ctk-path", str(hook), "--mig-strategy", "mixed",
                           "--device-list-strategy", "cdi-cri", "--cdi-root", "/var/run/cdi"], tmp_path / "plugin.log",
                    prefix=("unshare", "--mount", "--propagation", "private", "sh", "-c",
                            'mount -t tmpfs none "$0" && exec "$@"', str(root)))
    try:
        assert node.wait_allocatable("nvidia.com/gpu", 1) == [inventory.gpus[0].uuid]
        spec = node.path("/var/run/cdi/nvidia.yaml").read_text()
        assert str(mount) not in spec and f"hostPath: {root}/dev/nvidia0" in spec, spec[:2000]
        node.add_static_pod(_gpu_pod("node-paths", "nvidia.com/gpu"))
        node.wait_static_pod_running("node-paths")
        lines = _probe(node, "node-paths")
        assert [line for line in lines if line.startswith("smi GPU")] == [
            f"smi GPU 0: {inventory.gpus[0].name} (UUID: {inventory.gpus[0].uuid})"], lines
        assert "dev /dev/nvidia0" in lines and "dev /dev/nvidia1" not in lines, lines
    finally:
        log = plugin.stop()
    assert "Traceback" not in log, log


@pytest.mark.parametrize("strategy", ["cdi-annotations", "envvar", "volume-mounts"])
def test_a_pod_gets_its_gpu_through_our_shim_on_containerd_1_6(kube_node, host, tmp_path, strategy):
    root, inventory = host
    config = tmp_path / "config.toml"
    config.write_text('accept-nvidia-visible-devices-as-volume-mounts = true\n'
                      f'[nvidia-container-cli]\nroot = "{root}"\n'
                      '[nvidia-container-runtime]\nmode = "cdi"\n'
                      '[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["/var/run/cdi"]\n')
    node = kube_node(containerd=ContainerdSettings(version="1.6", runtime_binary=str(SHIM),
                                                   env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config),
                                                        "NVIDIA_CTK_CACHE_DIR": str(tmp_path / "shim-cache")}),
                     glibc_image=True)
    plugin = Plugin(node, ["--nvidia-driver-root", str(root), "--device-list-strategy", strategy,
                           "--device-id-strategy", "index", "--cdi-root", "/var/run/cdi"], tmp_path / "plugin.log")
    try:
        assert sorted(node.wait_allocatable("nvidia.com/gpu", 2)) == sorted(g.uuid for g in inventory.gpus)
        node.add_static_pod(_gpu_pod("gpu", "nvidia.com/gpu"))
        node.wait_static_pod_running("gpu")
        lines = _probe(node, "gpu")
        [given] = _given(node, "gpu", "nvidia.com/gpu")
        index = next(g.index for g in inventory.gpus if g.uuid == given)
        gpu = inventory.gpus[index]
        smi = [l for l in lines if l.startswith("smi ")]
        assert smi and all(gpu.uuid in l or "MIG" in l for l in smi), lines
        assert f"dev /dev/nvidia{index}" in lines and f"dev /dev/nvidia{1 - index}" not in lines, lines
    finally:
        log = plugin.stop()
    assert "Traceback" not in log, log


def test_the_scheduler_sees_the_plugins_devices(kube_node, host, tmp_path):
    """With a control plane: the node's allocatable counts are the plugin's, a pod asking for more GPUs than
    the node has stays Pending (Insufficient), one asking for a MIG device is scheduled and gets it."""
    from tests.support.kube.control_plane import wait_until

    root, inventory = host
    node = kube_node(containerd=ContainerdSettings(version="1.7", cdi_spec_dirs=("/var/run/cdi",)), glibc_image=True,
                     control_plane=True)
    plugin = Plugin(node, ["--nvidia-driver-root", str(root), "--mig-strategy", "mixed", "--device-list-strategy",
                           "cdi-cri", "--cdi-root", "/var/run/cdi"], tmp_path / "plugin.log")
    try:
        def allocatable():
            found = node.api.node(node.name)["status"].get("allocatable", {})
            return found if found.get("nvidia.com/mig-1g.5gb") == "2" else None
        counts = wait_until(allocatable, "the plugin's devices in the node's allocatable", 60, node.daemons())
        assert (counts.get("nvidia.com/gpu"), counts.get("nvidia.com/mig-1g.5gb")) == ("1", "2")

        too_many = pod_manifest("too-many", ["sh", "-c", PROBE], image=images.BUSYBOX_GLIBC_IMAGE,
                                limits={"nvidia.com/gpu": 2})
        node.api.create_pod(too_many)
        node.api.create_pod(_gpu_pod("mig", "nvidia.com/mig-1g.5gb"))
        pod = node.wait_pod_phase("mig")
        assert pod["spec"]["nodeName"] == node.name
        lines = wait_until(lambda: "probe-done" in node.api.pod_log("mig") and node.api.pod_log("mig").splitlines(),
                           "the MIG pod's probe output", 60, node.daemons())
        [given] = _given(node, "mig", "nvidia.com/mig-1g.5gb", static=False)
        assert sum(given in l for l in lines if l.startswith("smi ")) == 1, lines

        pending = node.api.pod("too-many")
        assert pending["status"]["phase"] == "Pending" and not pending["spec"].get("nodeName")
        reasons = [c.get("message", "") for c in pending["status"].get("conditions", [])
                   if c["type"] == "PodScheduled" and c["status"] == "False"]
        assert reasons and "Insufficient nvidia.com/gpu" in reasons[0], pending["status"]
    finally:
        log = plugin.stop()
    assert "Traceback" not in log, log


def test_single_offers_mig_devices_as_gpus(kube_node, tmp_path_factory, tmp_path):
    """mig-strategy single on a host whose GPUs are all in MIG mode with one profile: every MIG device is an
    nvidia.com/gpu; a pod asking for 2 gets exactly the 2 MIG devices the kubelet names."""
    root = tmp_path_factory.mktemp("dp-e2e-single") / "host"
    create_in_process(root, gpus=2, mig_options=("0=1g.5gb,1g.5gb", "1=1g.5gb"))
    inventory = inventory_from_marker(root)
    migs = sorted(m.uuid for g in inventory.gpus for m in g.mig_devices)
    node = kube_node(containerd=ContainerdSettings(version="1.7", cdi_spec_dirs=("/var/run/cdi",)), glibc_image=True)
    plugin = Plugin(node, ["--nvidia-driver-root", str(root), "--mig-strategy", "single", "--device-list-strategy",
                           "cdi-cri", "--cdi-root", "/var/run/cdi"], tmp_path / "plugin.log")
    try:
        assert sorted(node.wait_allocatable("nvidia.com/gpu", 3)) == migs
        pod = pod_manifest("two", ["sh", "-c", PROBE], image=images.BUSYBOX_GLIBC_IMAGE, limits={"nvidia.com/gpu": 2})
        node.add_static_pod(pod)
        node.wait_static_pod_running("two")
        smi = [line for line in _probe(node, "two") if line.startswith("smi ") and "MIG-" in line]
        given = _given(node, "two", "nvidia.com/gpu")
        assert len(given) == 2 and sorted(u for u in migs if any(u in line for line in smi)) == sorted(given), smi
    finally:
        log = plugin.stop()
    assert "Traceback" not in log, log


def test_none_offers_a_gpu_in_mig_mode_whole(kube_node, tmp_path_factory, tmp_path):
    """mig-strategy none (the default) on a host whose one GPU is in MIG mode with two 1g.5gb MIG devices: as
    NVIDIA's plugin, the GPU is one whole nvidia.com/gpu and no MIG device is a resource; a pod asking for it
    gets the GPU (its device node, the UUID the kubelet names) through containerd's CDI, and no MIG device:
    the spec's device for a whole GPU holds no MIG capability nodes, so the MIG devices are not reachable."""
    root = tmp_path_factory.mktemp("dp-e2e-none") / "host"
    create_in_process(root, gpus=1, mig_options=("0=1g.5gb,1g.5gb",))
    [gpu] = inventory_from_marker(root).gpus
    assert gpu.mig_enabled and len(gpu.mig_devices) == 2
    node = kube_node(containerd=ContainerdSettings(version="1.7", cdi_spec_dirs=("/var/run/cdi",)), glibc_image=True)
    plugin = Plugin(node, ["--nvidia-driver-root", str(root), "--mig-strategy", "none", "--device-list-strategy",
                           "cdi-cri", "--cdi-root", "/var/run/cdi"], tmp_path / "plugin.log")
    try:
        assert node.wait_allocatable("nvidia.com/gpu", 1) == [gpu.uuid]
        assert {r for r in node.allocatable_devices() if r.startswith("nvidia.com/")} == {"nvidia.com/gpu"}
        node.add_static_pod(_gpu_pod("whole", "nvidia.com/gpu"))
        node.wait_static_pod_running("whole")
        lines = _probe(node, "whole")
        assert _given(node, "whole", "nvidia.com/gpu") == [gpu.uuid]
        smi = [line for line in lines if line.startswith("smi ")]
        # the GPU alone: nvidia-smi lists no MIG device of it (the container cannot reach their capabilities)
        assert smi == [f"smi GPU 0: {gpu.name} (UUID: {gpu.uuid})"], lines
        assert "dev /dev/nvidia0" in lines and not [line for line in lines if "nvidia-cap" in line], lines
    finally:
        log = plugin.stop()
    assert "Traceback" not in log, log


def test_an_xid_takes_a_gpu_out_of_allocatable_and_a_reset_brings_it_back(kube_node, tmp_path_factory, tmp_path):
    """With a control plane: `nvidia-ctk simulate xid` 79 (the GPU falls off the bus) on GPU 1 makes the
    plugin report it Unhealthy, so the node's allocatable nvidia.com/gpu drops from 2 to 1 while its
    capacity stays 2; `simulate reset` makes NVML answer for it again and allocatable is back to 2."""
    import subprocess

    from tests.support.kube.control_plane import wait_until
    from tests.support.simulated_host import NVIDIA_CTK

    root = tmp_path_factory.mktemp("dp-e2e-xid") / "host"
    create_in_process(root, gpus=2, mig_options=())
    node = kube_node(containerd=ContainerdSettings(version="1.7", cdi_spec_dirs=("/var/run/cdi",)),
                     control_plane=True)
    plugin = Plugin(node, ["--nvidia-driver-root", str(root), "--device-list-strategy", "cdi-cri",
                           "--cdi-root", "/var/run/cdi"], tmp_path / "plugin.log")

    def gpus(allocatable: str):
        def read():
            status = node.api.node(node.name)["status"]
            counts = (status.get("capacity", {}).get("nvidia.com/gpu"),
                      status.get("allocatable", {}).get("nvidia.com/gpu"))
            return counts if counts == ("2", allocatable) else None
        return wait_until(read, f"nvidia.com/gpu capacity 2, allocatable {allocatable}", 90, node.daemons())

    def simulate(command: str, *options: str) -> None:
        done = subprocess.run([str(NVIDIA_CTK), "simulate", command, str(root), *options], capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr

    try:
        gpus("2")
        simulate("xid", "--gpu", "1", "--xid", "79")
        gpus("1")
        simulate("reset", "--gpu", "1")
        gpus("2")
    finally:
        log = plugin.stop()
    assert "Traceback" not in log and "health checks off" not in log, log


def test_the_kubelet_gets_an_nvlink_pair_on_an_island_host(kube_node, tmp_path_factory, tmp_path):
    """On an 8-GPU host with two 4-GPU NVLink islands, two GPUs per PCIe switch (`simulate create --pcie
    --nvlink`), once a pod holds one GPU, a static pod asking for 2 GPUs gets a pair linked by NVLink and
    one switch, not the next two free GPUs: the kubelet asked the plugin's GetPreferredAllocation, which
    scored the links the simulated NVML reports. (On a host without links the pair was the next two.)"""
    from simulator.host_builder import create_simulated_host

    root = tmp_path_factory.mktemp("dp-e2e-islands") / "host"
    create_simulated_host(str(root), gpus=8, model="NVIDIA A100-SXM4-40GB", driver_version="550.54.15",
                          cuda_version="12.4",
                          pcie_options=["switch=0-1", "switch=2-3", "switch=4-5", "switch=6-7", "cpu=0-3", "cpu=4-7"],
                          nvlink_options=["0-3:4", "4-7:4"])
    inventory = inventory_from_marker(root)
    index = {g.uuid: g.index for g in inventory.gpus}
    node = kube_node(containerd=ContainerdSettings(version="1.7", cdi_spec_dirs=("/var/run/cdi",)), glibc_image=True)
    plugin = Plugin(node, ["--nvidia-driver-root", str(root), "--device-list-strategy", "cdi-cri",
                           "--cdi-root", "/var/run/cdi"], tmp_path / "plugin.log")
    try:
        assert len(node.wait_allocatable("nvidia.com/gpu", 8)) == 8
        node.add_static_pod(_gpu_pod("one", "nvidia.com/gpu"))
        node.wait_static_pod_running("one")
        [taken] = [index[u] for u in _given(node, "one", "nvidia.com/gpu")]
        node.add_static_pod(pod_manifest("pair", ["sh", "-c", PROBE], image=images.BUSYBOX_GLIBC_IMAGE,
                                         limits={"nvidia.com/gpu": 2}))
        node.wait_static_pod_running("pair")
        given = sorted(index[u] for u in _given(node, "pair", "nvidia.com/gpu"))
        # the best pair: 4 NVLinks and one PCIe switch (0-1, 2-3, 4-5 or 6-7), leaving the taken GPU's partner
        assert given[0] % 2 == 0 and given[1] == given[0] + 1 and taken not in given, (taken, given)
        smi = [line for line in _probe(node, "pair") if line.startswith("smi GPU")]
        assert len(smi) == 2 and all(any(inventory.gpus[i].uuid in line for line in smi) for i in given), smi
    finally:
        log = plugin.stop()
    assert "Traceback" not in log, log


def test_four_time_sliced_replicas_of_one_gpu_run_four_pods(kube_node, tmp_path_factory, tmp_path):
    """sharing.timeSlicing with 4 replicas and failRequestsGreaterThanOne on a 1-GPU host: the kubelet
    offers 4 nvidia.com/gpu (`<UUID>::0..3`); a static pod asking for 2 is refused at admission (the
    plugin's Allocate error, as NVIDIA's), then 4 pods asking for 1 run at once, each seeing that GPU."""
    root = tmp_path_factory.mktemp("dp-e2e-shared") / "host"
    create_in_process(root, gpus=1, mig_options=())
    [gpu] = inventory_from_marker(root).gpus
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nsharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n"
                      "    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n")
    node = kube_node(containerd=ContainerdSettings(version="1.7", cdi_spec_dirs=("/var/run/cdi",)), glibc_image=True)
    plugin = Plugin(node, ["--nvidia-driver-root", str(root), "--device-list-strategy", "cdi-cri",
                           "--cdi-root", "/var/run/cdi", "--config-file", str(config)], tmp_path / "plugin.log")
    try:
        assert sorted(node.wait_allocatable("nvidia.com/gpu", 4)) == [f"{gpu.uuid}::{n}" for n in range(4)]
        node.add_static_pod(pod_manifest("two", ["sh", "-c", PROBE], image=images.BUSYBOX_GLIBC_IMAGE,
                                         limits={"nvidia.com/gpu": 2}))
        refused = node.wait_static_pod_phase("two", ("Failed",))["status"]
        assert refused.get("reason") == "UnexpectedAdmissionError", refused
        assert "maximum request size for shared resources is 1; found 2" in refused.get("message", ""), refused
        node.remove_static_pod("two")

        names = [f"shared{n}" for n in range(4)]
        for name in names:
            node.add_static_pod(_gpu_pod(name, "nvidia.com/gpu"))
        given = []
        for name in names:
            node.wait_static_pod_running(name)
            smi = [line for line in _probe(node, name) if line.startswith("smi GPU")]
            assert smi == [f"smi GPU 0: {gpu.name} (UUID: {gpu.uuid})"], smi
            given += _given(node, name, "nvidia.com/gpu")
        assert sorted(given) == [f"{gpu.uuid}::{n}" for n in range(4)]   # 4 pods at once, one replica each
    finally:
        log = plugin.stop()
    assert "Traceback" not in log, log


def test_the_allocatable_tool_shows_a_media_extension_profile_as_its_own_resource(tmp_path_factory, tmp_path):
    """`python -m tests.support.kube.allocatable -- PLUGIN...` (the comparison with NVIDIA's plugin,
    docs/device-plugin.md) on a mixed host whose GPU 1 has 3g.20gb, 1g.5gb and 1g.5gb+me: the real kubelet
    offers nvidia.com/mig-1g.5gb.me (a `+` would be no valid resource name) beside the other profiles."""
    import json
    import os
    import subprocess

    from tests.support.kube.fixtures import skip_reason_for_node

    reason = skip_reason_for_node("1.7", False)
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("dp-e2e-media") / "host"
    create_in_process(root, gpus=2, mig_options=("1=3g.20gb,1g.5gb,1g.5gb+me",))
    inventory = inventory_from_marker(root)
    done = subprocess.run([sys.executable, "-m", "tests.support.kube.allocatable", "--log", str(tmp_path / "plugin.log"),
                           "--", str(PLUGIN), "--nvidia-driver-root", str(root), "--mig-strategy", "mixed"],
                          capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[3],
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
    assert done.returncode == 0, done.stderr + (tmp_path / "plugin.log").read_text()
    offered = json.loads(done.stdout)["resources"]
    by_profile = {m.profile: m.uuid for m in inventory.gpus[1].mig_devices}
    assert offered == {"nvidia.com/gpu": {"count": 1, "ids": [inventory.gpus[0].uuid]},
                       "nvidia.com/mig-1g.5gb": {"count": 1, "ids": [by_profile["1g.5gb"]]},
                       "nvidia.com/mig-1g.5gb.me": {"count": 1, "ids": [by_profile["1g.5gb+me"]]},
                       "nvidia.com/mig-3g.20gb": {"count": 1, "ids": [by_profile["3g.20gb"]]}}
