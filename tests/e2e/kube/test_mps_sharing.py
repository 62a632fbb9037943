"""sharing.mps against a real kubelet and containerd 1.7 (cdi-cri, tests/support/kube), on a simulated 1-GPU
host: with 2 replicas the kubelet offers 2 nvidia.com/gpu (`<UUID>::0`, `<UUID>::1`) and the plugin runs
one MPS control daemon for the GPU (under a private --mps-root). Two pods, one share each, run at once;
in each the simulated CUDA client (gct-cuda-mps-client, mounted from the simulated host) reaches the
daemon through the share's CDI edits and reads 50% of the threads and half the memory; a pod whose spec
sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 still gets 50 (as does the variable set for one run), 20
gives 20; both pods' /dev/shm is the daemon's tmpfs. The daemon killed: ListAndWatch
says the two shares are Unhealthy, then Healthy once the plugin has started it again, and a pod that was
running all along reaches the new daemon (its next client gets a new server, at 50%; the old daemon's
server was ended). SIGTERM to the plugin stops the daemon. With envvar on containerd 1.6 and our shim (no
CDI), the Allocate response's own mounts bring a pod the daemon."""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from tests.support.kube import images
from tests.support.kube.containerd import ContainerdSettings
from tests.support.kube.node import pod_manifest
from tests.support.simulated_host import create_in_process, inventory_from_marker
from tests.unit.device_plugin.conftest import channel_to

pytestmark = pytest.mark.e2e

PLUGIN = Path(sys.executable).parent / "nvidia-device-plugin"
CLIENT = "/usr/local/bin/gct-cuda-mps-client"
# the limits three ways, then (until the pod ends) the server the client gets, every half second
PROBE = (f"echo pod_env=${{CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-none}}; touch /dev/shm/mark-$MARK; {CLIENT}; "
         "echo ---; "
         f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 {CLIENT}; echo ---; CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20 {CLIENT}; "
         "echo probe-done; "
         f"while sleep 0.5; do {CLIENT} 2>&1 | grep -e server_pid -e active_thread_percentage= "
         "| tr '\\n' ' '; echo; done")


def _mps_pod(name: str, host_root: Path, env: dict | None = None) -> dict:
    """A pod asking for one nvidia.com/gpu, with the simulated host's MPS client mounted (it is no driver
    file, so CDI never injects it), and env in its container's spec."""
    pod = pod_manifest(name, ["sh", "-c", PROBE], image=images.BUSYBOX_GLIBC_IMAGE, limits={"nvidia.com/gpu": 1})
    pod["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in {**(env or {}), "MARK": name}.items()]
    pod["spec"]["volumes"] = [{"name": "client", "hostPath": {
        "path": str(host_root / "usr/bin/gct-cuda-mps-client"), "type": "File"}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "client", "mountPath": CLIENT, "readOnly": True}]
    return pod


def _report(text: str) -> dict:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("device="))


def test_two_pods_share_a_gpu_through_mps_and_a_dead_daemon_comes_back(kube_node, tmp_path_factory, tmp_path):
    from tests.support.kube.control_plane import wait_until

    host = tmp_path_factory.mktemp("dp-e2e-mps") / "host"
    create_in_process(host, gpus=1, mig_options=())
    [gpu] = inventory_from_marker(host).gpus
    mps_root = tmp_path / "mps"
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nsharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n")
    node = kube_node(containerd=ContainerdSettings(version="1.7", cdi_spec_dirs=("/var/run/cdi",)), glibc_image=True)
    out = open(tmp_path / "plugin.log", "w")
    plugin = node.popen([str(PLUGIN), "--nvidia-driver-root", str(host), "--device-list-strategy", "cdi-cri",
                         "--cdi-root", "/var/run/cdi", "--mps-root", str(mps_root), "--config-file", str(config)],
                        stdout=out, stderr=out)
    share_file = node.path(mps_root / gpu.uuid / "share.json")
    try:
        shares = [f"{gpu.uuid}::0", f"{gpu.uuid}::1"]
        assert sorted(node.wait_allocatable("nvidia.com/gpu", 2)) == shares
        first_daemon = json.loads(share_file.read_text())["pid"]

        node.add_static_pod(_mps_pod("a", host))
        # b asks for all the threads in its pod spec: MPS's rule (the client's own value only lowers the
        # daemon's) keeps it at 50
        node.add_static_pod(_mps_pod("b", host, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}))
        reports = {}
        for name in ("a", "b"):
            node.wait_static_pod_running(name)
            log = wait_until(lambda: "probe-done" in node.container_log(name, "main") and
                             node.container_log(name, "main"), f"{name}'s probe output", 60, node.daemons())
            reports[name] = log.split("probe-done")[0].split("---\n")
        with node.pod_resources() as api:
            given = sorted(api.devices_of("default", f"{n}-{node.name}")["main"]["nvidia.com/gpu"][0] for n in "ab")
        assert given == shares                                     # two pods, one share each, at once
        half = 20 << 30                                            # an A100 40GB in 2 shares
        for name, (plain, raised, lowered) in reports.items():
            for report, percentage in ((plain, "50.0"), (raised, "50.0"), (lowered, "20.0")):
                values = _report(report)
                assert values.get("pipe_directory") == "/tmp/nvidia-mps", reports
                assert values["daemon_active_thread_percentage"] == "50.0", report
                assert values["active_thread_percentage"] == percentage, report
                assert f"device=0 name={gpu.uuid} pinned_mem_limit={half} daemon_pinned_mem_limit={half}" in report
        assert (_report(reports["a"][0])["pod_env"], _report(reports["b"][0])["pod_env"]) == ("none", "100")
        # both pods' /dev/shm is the daemon's tmpfs (the node's <mps-root>/<uuid>/shm), not their own
        assert sorted(os.listdir(node.path(mps_root / gpu.uuid / "shm"))) == ["mark-a", "mark-b"]
        first_server = _report(reports["a"][0])["server_pid"]

        # the daemon killed: the shares Unhealthy on ListAndWatch, then Healthy with a new daemon
        channel = channel_to(node.path("/var/lib/kubelet/device-plugins/nvidia-gpu.sock"))
        with channel:
            stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty(), timeout=90)
            seen = [{d.ID: d.health for d in next(stream).devices}]
            os.kill(first_daemon, signal.SIGKILL)
            for listed in stream:
                seen.append({d.ID: d.health for d in listed.devices})
                if len(seen) == 3:
                    break
            stream.cancel()
        assert seen == [dict.fromkeys(shares, "Healthy"), dict.fromkeys(shares, "Unhealthy"),
                        dict.fromkeys(shares, "Healthy")]
        revived = json.loads(share_file.read_text())
        assert revived["pid"] != first_daemon and revived["active_thread_percentage"] == 50
        assert sorted(node.wait_allocatable("nvidia.com/gpu", 2)) == shares

        # pod a, running all along, reaches the new daemon: its client gets a new server, still at 50%
        def new_server():
            lines = node.container_log("a", "main").split("probe-done")[1].splitlines()
            return [l for l in lines if "server_pid=" in l and f"server_pid={first_server} " not in l]
        [after, *_] = wait_until(new_server, "pod a's client on the revived daemon", 60, node.daemons())
        assert "active_thread_percentage=50.0" in after, after
        assert _state(int(first_server)) in (None, "Z")            # the dead daemon's server was ended
    finally:
        if plugin.poll() is None:
            plugin.send_signal(signal.SIGTERM)
            plugin.wait(timeout=60)
        out.close()
    log = (tmp_path / "plugin.log").read_text()
    assert plugin.returncode == 0 and "Traceback" not in log, log
    assert f"the MPS control daemon of {gpu.uuid} (pid {first_daemon}) ended" in log, log
    # SIGTERM stopped the daemon: nothing is left of it but its logs
    assert not share_file.exists(), log
    assert _state(revived["pid"]) in (None, "Z"), _state(revived["pid"])   # gone, or ended and not yet reaped


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_with_envvar_a_pod_reaches_the_daemon_through_the_allocate_response(kube_node, tmp_path_factory, tmp_path):
    """The envvar strategy (NVIDIA's default, which NVIDIA's plugin takes with MPS) on containerd 1.6 and our
    runtime shim: the shim gives the pod its GPU from NVIDIA_VISIBLE_DEVICES, and the Allocate response's
    own mounts and CUDA_MPS_PIPE_DIRECTORY (no CDI name) bring it the daemon: its client gets 50% of the
    threads, and its /dev/shm is the daemon's tmpfs."""
    from tests.e2e.shim_host import SHIM
    from tests.support.kube.control_plane import wait_until

    host = tmp_path_factory.mktemp("dp-e2e-mps-envvar") / "host"
    create_in_process(host, gpus=1, mig_options=())
    [gpu] = inventory_from_marker(host).gpus
    mps_root = tmp_path / "mps"
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nsharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n")
    toolkit = tmp_path / "config.toml"
    toolkit.write_text(f'[nvidia-container-cli]\nroot = "{host}"\n[nvidia-container-runtime]\nmode = "cdi"\n'
                       '[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["/var/run/cdi"]\n')
    node = kube_node(containerd=ContainerdSettings(version="1.6", runtime_binary=str(SHIM),
                                                   env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(toolkit),
                                                        "NVIDIA_CTK_CACHE_DIR": str(tmp_path / "shim-cache")}),
                     glibc_image=True)
    out = open(tmp_path / "plugin.log", "w")
    plugin = node.popen([str(PLUGIN), "--nvidia-driver-root", str(host), "--device-list-strategy", "envvar",
                         "--cdi-root", "/var/run/cdi", "--mps-root", str(mps_root), "--config-file", str(config)],
                        stdout=out, stderr=out)
    try:
        assert len(node.wait_allocatable("nvidia.com/gpu", 2)) == 2
        node.add_static_pod(_mps_pod("a", host))
        node.wait_static_pod_running("a")
        log = wait_until(lambda: "probe-done" in node.container_log("a", "main") and node.container_log("a", "main"),
                         "a's probe output", 60, node.daemons())
        values = _report(log.split("probe-done")[0].split("---\n")[0])
        assert values.get("pipe_directory") == "/tmp/nvidia-mps", log
        assert values["active_thread_percentage"] == "50.0", log
        assert f"device=0 name={gpu.uuid}" in log, log
        assert os.listdir(node.path(mps_root / gpu.uuid / "shm")) == ["mark-a"]
    finally:
        if plugin.poll() is None:
            plugin.send_signal(signal.SIGTERM)
            plugin.wait(timeout=60)
        out.close()
    log = (tmp_path / "plugin.log").read_text()
    assert plugin.returncode == 0 and "Traceback" not in log, log
