"""A kubelet for a test, inside the node's mount namespace: standalone (static pods from a directory) or
registered with a test API server (a kubeconfig).

It keeps the default root dir, /var/lib/kubelet (the namespace's overlay), because the device-plugin socket
dir /var/lib/kubelet/device-plugins/ is fixed in the kubelet; the pod-resources socket is below it too.
Its config carries what these machines need (docs/kubernetes-testing.md): cgroup v1 accepted
(failCgroupV1: false) below a cgroup root of its own made beforehand in every v1 hierarchy, no swap check,
no eviction, no image GC, no iptables, and its ports on the loopback.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.e2e.engines import Daemon, _spawn, _wait_for
from tests.support.cgroups import remove_cgroup_everywhere
from tests.support.kube.namespace import MountNamespace

CGROUP_ROOT = Path("/sys/fs/cgroup")
STATIC_POD_CHECK = "1s"  # how often the kubelet reads the static pod dir (default 20 s)


@dataclass
class KubeletSettings:
    node_name: str = "gct-node"
    kubeconfig: Path | None = None  # None: standalone
    config: dict = field(default_factory=dict)  # merged over the KubeletConfiguration below
    args: tuple[str, ...] = ()


def v1_hierarchies() -> list[Path]:
    """Mount points of the cgroup v1 hierarchies (cgroup2 excluded)."""
    with open("/proc/self/mountinfo") as f:
        found = [fields[4] for fields in (line.split() for line in f) if fields[fields.index("-") + 1] == "cgroup"]
    return [Path(point) for point in found]


def cgroup_root_dirs(name: str) -> list[Path]:
    """The kubelet's cgroupRoot /<name> in each hierarchy it uses: every v1 hierarchy (these machines run
    the v1/v2 hybrid); on a machine with cgroup v2 alone, the one tree (not run here so far)."""
    v1 = v1_hierarchies()
    return [hierarchy / name for hierarchy in v1] if v1 else [CGROUP_ROOT / name]


def make_cgroup_root(name: str) -> None:
    """The kubelet's cgroupRoot, which it refuses to start without; a v1 cpuset one gets its parent's cpus
    and mems, without which no task can join it."""
    for group in cgroup_root_dirs(name):
        group.mkdir(exist_ok=True)
        if (group.parent / "cpuset.cpus").exists() and (group / "cpuset.cpus").exists():
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (group / knob).write_text((group.parent / knob).read_text())


def kill_cgroup_tasks(name: str) -> None:
    """SIGKILL every process left below the cgroup root (pods' containers whose shim is gone)."""
    for group in cgroup_root_dirs(name):
        for dirpath, _, files in os.walk(group):
            if "cgroup.procs" not in files:
                continue
            with contextlib.suppress(OSError):
                for pid in Path(dirpath, "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), 9)


def remove_cgroup_root(name: str) -> bool:
    """rmdir the cgroup root and everything below it, in every hierarchy; True when none is left."""
    if v1_hierarchies():
        remove_cgroup_everywhere(name, str(CGROUP_ROOT))  # the hybrid's unified tree too
    else:
        for dirpath, _, _ in sorted(os.walk(CGROUP_ROOT / name), key=lambda entry: len(entry[0]), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
    return not any(group.exists() for group in cgroup_root_dirs(name))


def kubelet_config(settings: KubeletSettings, cgroup_root: str, static_pods: Path, ports: dict[str, int],
                   runtime_socket: Path) -> dict:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": "/" + cgroup_root,
        "failSwapOn": False,
        "enforceNodeAllocatable": [],
        "evictionHard": {},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "makeIPTablesUtilChains": False,
        "protectKernelDefaults": False,
        "address": "127.0.0.1",
        "port": ports["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports["kubelet-healthz"],
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "staticPodPath": str(static_pods),
        "fileCheckFrequency": STATIC_POD_CHECK,
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        "resolvConf": "",
        "serializeImagePulls": False,
    }
    config.update(settings.config)
    return config


def start(ns: MountNamespace, workdir: Path, binary: Path, config: dict, settings: KubeletSettings) -> Daemon:
    """The kubelet with config (a dict written as its --config); ready when its healthz answers."""
    workdir.mkdir(parents=True)
    config_file = workdir / "kubelet.yaml"
    config_file.write_text(yaml.safe_dump(config))
    argv = [str(binary), f"--config={config_file}", f"--hostname-override={settings.node_name}", "--v=2",
            *settings.args]
    if settings.kubeconfig:
        argv.append(f"--kubeconfig={settings.kubeconfig}")
    daemon = _spawn("kubelet", ns.argv(argv), workdir, workdir / "no-socket", [])
    url = f"http://127.0.0.1:{config['healthzPort']}/healthz"
    _wait_for(lambda: _healthy(url), daemon, "its healthz answered", timeout=90)
    return daemon


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.read() == b"ok"
    except OSError:
        return False


def api_get(port: int, path: str) -> dict:
    """GET on the kubelet's own API (anonymous, on the loopback; its certificate is self-signed)."""
    context = ssl._create_unverified_context()  # noqa: S323 - a test kubelet's self-signed cert on 127.0.0.1
    with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", timeout=10, context=context) as answer:
        return json.loads(answer.read())


def write_static_pod(static_pods: Path, manifest: dict) -> Path:
    """Put a pod manifest into the static pod dir (atomically: the kubelet may read it any moment)."""
    path = static_pods / f"{manifest['metadata']['name']}.yaml"
    tmp = static_pods.parent / f".{path.name}.tmp"
    tmp.write_text(yaml.safe_dump(manifest))
    os.replace(tmp, path)
    return path


def have_kubelet_prerequisites() -> str | None:
    for program in ("nsenter", "unshare", "mount"):
        if shutil.which(program) is None:
            return f"{program} is not installed"
    if not v1_hierarchies() and not (CGROUP_ROOT / "cgroup.controllers").exists():
        return f"no cgroup hierarchy is mounted at {CGROUP_ROOT}"
    return None
