"""The Kubernetes harness itself, end to end (tests/support/kube, docs/kubernetes-testing.md): a standalone
kubelet runs a static pod on containerd 1.7, and on 1.6 through our shim; a restarted kubelet finds its pod
again, a restarted containerd keeps it; a control plane schedules a pod onto a Ready node; nothing of a node is left on the machine once it
is stopped."""
from __future__ import annotations

import os
import uuid

import pytest

from tests.e2e.shim_host import SHIM
from tests.support import leftovers
from tests.support.kube import paths
from tests.support.kube.containerd import ContainerdSettings
from tests.support.kube.control_plane import node_ready, wait_until
from tests.support.kube.fixtures import skip_reason_for_node
from tests.support.kube.kubelet import cgroup_root_dirs
from tests.support.kube.node import kube_node, pod_manifest


def _hello_pod(name: str, token: str) -> dict:
    return pod_manifest(name, ["sh", "-c", f"echo {token} from $(hostname); exec sleep 3600"])


def test_standalone_kubelet_runs_a_static_pod_on_containerd_1_7_and_leaves_nothing_behind():
    reason = skip_reason_for_node("1.7", control_plane=False)
    if reason:
        pytest.skip(reason)
    token = f"hello-{uuid.uuid4().hex[:8]}"
    before = leftovers.take()
    with kube_node(paths.kube_bin_dir(), containerd=ContainerdSettings(version="1.7")) as node:
        workdir, cgroup_root, holder = node.workdir, node.cgroup_root, node.ns.pid
        full_name = node.add_static_pod(_hello_pod("hello", token))
        pod = node.wait_static_pod_running("hello")
        assert pod["status"]["containerStatuses"][0]["ready"] is True
        log = wait_until(lambda: token in node.container_log("hello", "main") and node.container_log("hello", "main"),
                         "the container's greeting in its log", 30, node.daemons())
        assert f"{token} from " in log
        # the kubelet's pod-resources API answers and lists the pod (no devices asked)
        with node.pod_resources() as api:
            listed = {(p.namespace, p.name) for p in api.list().pod_resources}
        assert ("default", full_name) in listed
        assert node.wait_allocatable("nvidia.com/gpu", 0) == []  # no device plugin here
        # a restarted kubelet (what the device-plugin tests do) finds its pod again and serves the API again
        node.restart_kubelet()
        node.wait_static_pod_running("hello")
        with node.pod_resources() as api:
            assert ("default", full_name) in {(p.namespace, p.name) for p in api.list().pod_resources}
        # a file written through node.path lands in the namespace, also below a symlink to an absolute
        # path (/var/run -> /run), never in the machine's /run
        probe = f"/var/run/gct-probe-{token}"
        node.path(probe).write_text(token)
        assert node.run(["cat", probe], capture_output=True, text=True).stdout == token
        assert not os.path.exists(f"/run/gct-probe-{token}")
        # the kubelet's fixed dirs are the namespace's, not the machine's
        assert node.path("/var/lib/kubelet/device-plugins/kubelet.sock").exists()
        assert not os.path.exists("/var/lib/kubelet/device-plugins/kubelet.sock") or \
            os.stat("/var/lib/kubelet/device-plugins/kubelet.sock") != \
            os.stat(node.path("/var/lib/kubelet/device-plugins/kubelet.sock"))
    assert not workdir.exists()
    assert not any(group.exists() for group in cgroup_root_dirs(cgroup_root))
    assert not os.path.exists(f"/proc/{holder}")
    appeared = leftovers.new_since(before, leftovers.take(), os.getpid())
    ours = leftovers.certainly_ours(appeared, [str(workdir), cgroup_root])
    assert not any(ours.values()), ours


def test_standalone_kubelet_runs_a_static_pod_through_our_shim_on_containerd_1_6(kube_node, tmp_path):
    """containerd 1.6 with the venv's nvidia-container-runtime as the pods' runtime (the shim path of the
    device-plugin tests): a pod that asks for no GPU goes through it to runc; its debug log shows the calls."""
    debug_log = tmp_path / "shim-debug.log"
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-runtime]\ndebug = "{debug_log}"\nlog-level = "debug"\n')
    token = f"hello-{uuid.uuid4().hex[:8]}"
    node = kube_node(containerd=ContainerdSettings(version="1.6", runtime_binary=str(SHIM),
                                                   env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config),
                                                        "NVIDIA_CTK_CACHE_DIR": str(tmp_path / "shim-cache")}))
    node.add_static_pod(_hello_pod("hello", token))
    node.wait_static_pod_running("hello")
    wait_until(lambda: token in node.container_log("hello", "main"), "the container's greeting in its log", 30,
               node.daemons())
    calls = debug_log.read_text().splitlines()
    creates = [c for c in calls if "command create," in c or "passthrough of 'create'" in c]
    assert len(creates) >= 2, calls  # the pod's sandbox and its container
    # its cache where the test named it, as everywhere in the suite (the node's /run is private anyway)
    assert list((tmp_path / "shim-cache").glob("runtime-*.cache")), calls
    # a restarted containerd keeps the running pod, and the kubelet starts a new one through it
    node.restart_containerd()
    node.add_static_pod(_hello_pod("after-restart", token))
    node.wait_static_pod_running("after-restart")
    assert node.static_pod("hello")["status"]["phase"] == "Running"
    wait_until(lambda: token in node.container_log("after-restart", "main"), "the new pod's greeting", 30,
               node.daemons())


def test_control_plane_schedules_a_pod_onto_the_ready_node(kube_node):
    token = f"hello-{uuid.uuid4().hex[:8]}"
    node = kube_node(control_plane=True)
    assert node_ready(node.api.node(node.name))
    node.api.create_pod(_hello_pod("scheduled", token))
    pod = node.wait_pod_phase("scheduled")
    assert pod["spec"]["nodeName"] == node.name
    log = wait_until(lambda: token in node.api.pod_log("scheduled") and node.api.pod_log("scheduled"),
                     "the container's greeting through the API server", 30, node.daemons())
    assert f"{token} from " in log
