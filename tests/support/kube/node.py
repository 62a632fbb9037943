"""A Kubernetes node for one test: `kube_node(...)` starts, in a private mount namespace, containerd (1.7 or
1.6), a kubelet and, with control_plane=True, etcd + kube-apiserver + kube-scheduler +
kube-controller-manager, and stops all of it at the end, leaving nothing behind (processes, mounts, cgroups,
files). See docs/kubernetes-testing.md.

    with kube_node(containerd=ContainerdSettings(version="1.7")) as node:
        node.add_static_pod(pod_manifest("hello", ["sh", "-c", "echo hi; sleep 3600"]))
        node.wait_static_pod_running("hello")
        assert "hi" in node.container_log("hello", "main")
"""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.e2e.engines import Daemon, short_tempdir, stop_daemon
from tests.support.kube import containerd as containerd_mod
from tests.support.kube import control_plane as plane_mod
from tests.support.kube import images
from tests.support.kube import kubelet as kubelet_mod
from tests.support.kube.containerd import ContainerdSettings
from tests.support.kube.control_plane import ControlPlane, node_ready, wait_until
from tests.support.kube.kubelet import KubeletSettings
from tests.support.kube.namespace import MountNamespace

PORT_NAMES = ("kubelet", "kubelet-healthz", "etcd", "etcd-peer", "apiserver", "scheduler", "controller-manager")


def free_ports(names) -> dict[str, int]:
    """A free loopback port for each name (held open together, so they differ)."""
    sockets = []
    try:
        for _ in names:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return {name: s.getsockname()[1] for name, s in zip(names, sockets)}
    finally:
        for s in sockets:
            s.close()


def pod_manifest(name: str, command: list[str], image: str = images.BUSYBOX_IMAGE, container: str = "main",
                 limits: dict | None = None, **spec) -> dict:
    """A host-network pod with one container that runs command from a local image (never pulled)."""
    resources = {"limits": limits} if limits else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"hostNetwork": True, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": container, "image": image, "imagePullPolicy": "Never",
                                     "command": command, "resources": resources}], **spec}}


@dataclass
class KubeNode:
    workdir: Path
    ns: MountNamespace
    bin_dir: Path
    containerd_settings: ContainerdSettings
    kubelet_settings: KubeletSettings
    cgroup_root: str
    ports: dict[str, int]
    containerd: Daemon | None = None
    kubelet: Daemon | None = None
    plane: ControlPlane | None = None
    kubelet_config: dict = field(default_factory=dict)
    _kubelet_starts: int = 0
    _containerd_starts: int = 0

    # -- the parts -------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.kubelet_settings.node_name

    @property
    def static_pods(self) -> Path:
        return self.workdir / "static-pods"

    @property
    def api(self) -> plane_mod.Api:
        assert self.plane is not None, "this node has no control plane (kube_node(control_plane=True))"
        return self.plane.api

    def daemons(self) -> list[Daemon]:
        return [d for d in (self.containerd, self.kubelet, *(self.plane.daemons if self.plane else ())) if d]

    def logs(self, lines: int = 30) -> str:
        return "\n".join(f"--- {d.name} log ---\n{d.log_tail(lines)}" for d in self.daemons())

    # -- inside the namespace ---------------------------------------------------------------------------
    def path(self, inside: str | Path) -> Path:
        """How this process reaches a file of the node's namespace (e.g. /var/lib/kubelet/...)."""
        return self.ns.path(inside)

    def run(self, command: list[str], **kwargs):
        """subprocess.run of command inside the node's mount namespace."""
        return self.ns.run(command, **kwargs)

    def popen(self, command: list[str], **kwargs):
        """subprocess.Popen of command inside the node's mount namespace (e.g. a device plugin); anything
        still running there when the node stops is killed."""
        return self.ns.popen(command, **kwargs)

    # -- containerd -------------------------------------------------------------------------------------
    @property
    def containerd_dir(self) -> Path:
        return self.workdir / "containerd"

    def start_containerd(self) -> Daemon:
        self._containerd_starts += 1
        self.containerd = containerd_mod.start(self.ns, self.containerd_dir, self.containerd_settings,
                                               self._containerd_starts)
        return self.containerd

    def restart_containerd(self) -> Daemon:
        """Stop containerd and start it again on the same root and state: running containers stay (their
        shims are not its children), the kubelet reconnects."""
        stop_daemon(self.containerd)
        return self.start_containerd()

    def ctr(self, *args: str, check: bool = True):
        return containerd_mod.ctr(self.containerd, self.containerd_settings.version, *args, check=check)

    def allocatable_devices(self) -> dict[str, list[str]]:
        """resource name -> device ids the kubelet can allocate now (pod-resources GetAllocatableResources:
        works standalone too)."""
        with self.pod_resources() as api:
            return api.allocatable_devices()

    def wait_allocatable(self, resource: str, count: int, timeout: float = 30) -> list[str]:
        """The device ids of resource once the kubelet offers exactly count of them (0: none)."""
        found: list[str] = []

        def offered() -> bool:
            found[:] = self.allocatable_devices().get(resource, [])
            return len(found) == count
        wait_until(offered, f"{count} {resource} allocatable (last seen: {found})", timeout, self.daemons())
        return list(found)

    def pod_resources(self):
        """A client of the kubelet's pod-resources API, a podresources.PodResources (close it, or use it in a
        with block). Imported here: generating its gRPC modules is needless for tests that never ask."""
        from tests.support.kube import podresources

        return podresources.PodResources(self.path(podresources.SOCKET))

    # -- the kubelet ------------------------------------------------------------------------------------
    def start_kubelet(self) -> Daemon:
        self._kubelet_starts += 1
        workdir = self.workdir / f"kubelet-{self._kubelet_starts}"
        self.kubelet = kubelet_mod.start(self.ns, workdir, self.bin_dir / "kubelet", self.kubelet_config,
                                         self.kubelet_settings)
        return self.kubelet

    def stop_kubelet(self) -> None:
        if self.kubelet is not None:
            stop_daemon(self.kubelet)
            self.kubelet = None

    def restart_kubelet(self) -> Daemon:
        """Stop the kubelet and start it again with the same config (its state in /var/lib/kubelet stays)."""
        self.stop_kubelet()
        return self.start_kubelet()

    def kubelet_pods(self) -> list[dict]:
        """The pods the kubelet runs, with their status, from its own API (works without a control plane)."""
        return kubelet_mod.api_get(self.ports["kubelet"], "/pods").get("items") or []

    # -- static pods ----------------------------------------------------------------------------------
    def add_static_pod(self, manifest: dict) -> str:
        """Write manifest into the static pod dir; returns the pod's name as the kubelet runs it
        (<name>-<node name>)."""
        kubelet_mod.write_static_pod(self.static_pods, manifest)
        return f"{manifest['metadata']['name']}-{self.name}"

    def remove_static_pod(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.static_pods / f"{name}.yaml").unlink()

    def static_pod(self, name: str) -> dict | None:
        full = f"{name}-{self.name}"
        return next((p for p in self.kubelet_pods() if p["metadata"]["name"] == full), None)

    def wait_static_pod_phase(self, name: str, phases=("Running",), timeout: float = 90) -> dict:
        def reached():
            pod = self.static_pod(name)
            return pod if pod and pod.get("status", {}).get("phase") in phases else None
        return wait_until(reached, f"static pod {name} in phase {'/'.join(phases)}", timeout, self.daemons())

    def wait_static_pod_running(self, name: str, timeout: float = 90) -> dict:
        return self.wait_static_pod_phase(name, ("Running",), timeout)

    def container_log(self, pod: str, container: str, namespace: str = "default") -> str:
        """What a container printed, from the kubelet's log files (/var/log/pods/<ns>_<pod>_<uid>/<c>/N.log,
        lines `<time> stdout F <text>`), as text; pod is the name the kubelet runs (a static pod's
        full name, or add_static_pod's short name)."""
        names = (pod, f"{pod}-{self.name}")
        found = [f for n in names for f in
                 sorted(glob.glob(str(self.path(f"/var/log/pods/{namespace}_{n}_*/{container}/*.log"))))]
        lines = []
        for log in found:
            with contextlib.suppress(OSError):
                for line in Path(log).read_text(errors="replace").splitlines():
                    parts = line.split(" ", 3)
                    lines.append(parts[3] if len(parts) == 4 else line)
        return "\n".join(lines)

    # -- with the control plane -------------------------------------------------------------------------
    def wait_ready(self, timeout: float = 120) -> dict:
        """The node object once it is Ready and the not-ready taint is gone (pods can be scheduled)."""
        def ready():
            with contextlib.suppress(plane_mod.ApiError):
                node = self.api.node(self.name)
                taints = node.get("spec", {}).get("taints") or []
                if node_ready(node) and not any(t["key"] == "node.kubernetes.io/not-ready" for t in taints):
                    return node
            return None
        return wait_until(ready, f"node {self.name} Ready and untainted", timeout, self.daemons())

    def wait_pod_phase(self, name: str, phases=("Running",), namespace: str = "default",
                       timeout: float = 90) -> dict:
        def reached():
            pod = self.api.pod(name, namespace)
            return pod if pod.get("status", {}).get("phase") in phases else None
        return wait_until(reached, f"pod {namespace}/{name} in phase {'/'.join(phases)}", timeout, self.daemons())


# -- start and stop ----------------------------------------------------------------------------------

def _import_images(node: KubeNode, glibc_image: bool) -> None:
    build = node.workdir / "images"
    build.mkdir()
    archives = [images.pause_archive(build), images.busybox_archive(build)]
    if glibc_image:
        archives.append(images.busybox_archive(build, glibc=True))
    for archive in archives:
        containerd_mod.import_image(node.containerd, node.containerd_settings.version, archive)


def _kill_namespace_processes(ns: MountNamespace) -> None:
    """SIGKILL every process still in the node's mount namespace (besides the holder): shims, containers,
    a device plugin a test started."""
    if ns.proc is None:
        return
    try:
        target = os.stat(f"/proc/{ns.pid}/ns/mnt")
    except OSError:
        return
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (ns.pid, os.getpid()):
            continue
        with contextlib.suppress(OSError):
            st = os.stat(f"/proc/{entry}/ns/mnt")
            if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                os.kill(int(entry), signal.SIGKILL)


def stop_node(node: KubeNode) -> None:
    """Stop everything, newest first, and remove what it made."""
    node.stop_kubelet()
    kubelet_mod.kill_cgroup_tasks(node.cgroup_root)
    for daemon in reversed(node.plane.daemons if node.plane else []):
        stop_daemon(daemon)
    if node.containerd is not None:
        stop_daemon(node.containerd)
    _kill_namespace_processes(node.ns)
    kubelet_mod.kill_cgroup_tasks(node.cgroup_root)
    node.ns.stop()
    for _ in range(50):  # killed tasks leave their cgroups a moment later
        if kubelet_mod.remove_cgroup_root(node.cgroup_root):
            break
        time.sleep(0.1)
    shutil.rmtree(node.workdir, ignore_errors=True)


@contextlib.contextmanager
def kube_node(bin_dir: Path, containerd: ContainerdSettings | None = None, kubelet: KubeletSettings | None = None,
              control_plane: bool = False, controller_manager: bool = True, glibc_image: bool = False):
    """Yield a started KubeNode: standalone (static pods) or, with control_plane, registered with its own
    API server and Ready. glibc_image also imports images.BUSYBOX_GLIBC_IMAGE."""
    workdir = short_tempdir("gct-kube-")
    layers = workdir / "layers"
    kubelet = kubelet or KubeletSettings()
    node = KubeNode(workdir, MountNamespace(layers, (kubelet.node_name,)), bin_dir, containerd or ContainerdSettings(),
                    kubelet, f"gct-kube-{uuid.uuid4().hex[:8]}", free_ports(PORT_NAMES))
    try:
        node.ns.start()
        node.static_pods.mkdir()
        node.start_containerd()
        _import_images(node, glibc_image)
        if control_plane:
            try:
                node.plane = plane_mod.start(node.ns, workdir / "control-plane", bin_dir, node.ports,
                                             controller_manager)
            except BaseException as exc:
                node.plane = ControlPlane(None, None, getattr(exc, "started_daemons", []))  # stopped below
                raise
            node.kubelet_settings = replace(node.kubelet_settings, kubeconfig=node.plane.kubeconfig)
        kubelet_mod.make_cgroup_root(node.cgroup_root)
        node.kubelet_config = kubelet_mod.kubelet_config(node.kubelet_settings, node.cgroup_root, node.static_pods,
                                                         node.ports, containerd_mod.socket_of(node.containerd_dir))
        node.start_kubelet()
        if control_plane:
            node.wait_ready()
        yield node
    finally:
        stop_node(node)
