"""containerd with its CRI plugin for a test's kubelet, inside the node's mount namespace.

Two versions: "1.7" (trixie's, unpacked in the cache by the set-up; CRI passes a device plugin's CDI devices
and `enable_cdi` applies them from `cdi_spec_dirs`) and "1.6" (the machine's Debian one; CRI drops CDI
devices, `cdi.k8s.io/*` annotations still reach the runtime). Its root and state are in the test's work dir
(the overlayfs snapshotter needs a real filesystem below it, not the namespace's /var overlay); its shims'
sockets go to /run/containerd/s, the namespace's own tmpfs.

Settings these machines need (docs/kubernetes-testing.md): `restrict_oom_score_adj` (runc may not lower
oom_score_adj here: every sandbox failed without it), the pause image built by tests.support.kube.images,
and a CNI config so the runtime reports its network ready (pods use the host's network; the plugin is a
no-op).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.e2e.engines import Daemon, _spawn, _wait_for
from tests.support.kube import paths
from tests.support.kube.images import PAUSE_IMAGE
from tests.support.kube.namespace import MountNamespace

CRI = 'plugins."io.containerd.grpc.v1.cri"'
K8S_NAMESPACE = "k8s.io"  # the containerd namespace CRI keeps pods and images in
CDI_ANNOTATIONS = ["cdi.k8s.io/*"]
NOOP_CNI = "#!/bin/sh\n# A CNI plugin for host-network pods only: answers every call with an empty result.\n" \
           "echo '{\"cniVersion\": \"0.4.0\"}'\n"


@dataclass
class ContainerdSettings:
    version: str = "1.7"
    # the default runtime's binary (what kubelet pods run with): runc, or e.g. nvidia-container-runtime
    runtime_binary: str = "runc"
    # more CRI runtime handlers, name -> binary (pods choose one with a RuntimeClass)
    runtimes: dict[str, str] = field(default_factory=dict)
    # CDI spec dirs inside the namespace (1.7 only: 1.6 has no CDI)
    cdi_spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
    env: dict[str, str] = field(default_factory=dict)  # the daemon's, so its shims' and runtimes'


def binaries(version: str) -> tuple[Path, Path]:
    """(containerd, its bin dir) of that version; the bin dir also holds ctr and the runc shim."""
    if version == "1.7":
        bin_dir = paths.containerd17_root() / "usr/bin"
    elif version == "1.6":
        bin_dir = Path("/usr/bin")
    else:
        raise ValueError(f"containerd {version!r}: the tests run 1.6 (Debian 12) or 1.7 (Debian 13)")
    return bin_dir / "containerd", bin_dir


def _runtime_table(name: str, binary: str) -> str:
    quoted = json.dumps(CDI_ANNOTATIONS)
    return (f"[{CRI}.containerd.runtimes.{name}]\n"
            f'  runtime_type = "io.containerd.runc.v2"\n'
            f"  pod_annotations = {quoted}\n  container_annotations = {quoted}\n"
            f"[{CRI}.containerd.runtimes.{name}.options]\n"
            f"  BinaryName = {json.dumps(binary)}\n  SystemdCgroup = false\n")


def config_text(workdir: Path, settings: ContainerdSettings) -> str:
    cdi = (f"  enable_cdi = true\n  cdi_spec_dirs = {json.dumps(list(settings.cdi_spec_dirs))}\n"
           if settings.version != "1.6" else "")
    runtimes = {"runc": settings.runtime_binary, **settings.runtimes}
    return ("version = 2\n"
            f'root = "{workdir}/root"\nstate = "{workdir}/state"\n'
            f'[grpc]\n  address = "{socket_of(workdir)}"\n'
            f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{workdir}/opt"\n'
            f"[{CRI}]\n  sandbox_image = \"{PAUSE_IMAGE}\"\n  restrict_oom_score_adj = true\n{cdi}"
            f"[{CRI}.containerd]\n  snapshotter = \"overlayfs\"\n  default_runtime_name = \"runc\"\n"
            + "".join(_runtime_table(name, binary) for name, binary in runtimes.items())
            + f'[{CRI}.cni]\n  bin_dir = "{workdir}/cni/bin"\n  conf_dir = "{workdir}/cni/net.d"\n')


def socket_of(workdir: Path) -> Path:
    return workdir / "containerd.sock"


def _write_cni(workdir: Path) -> None:
    bin_dir, conf_dir = workdir / "cni/bin", workdir / "cni/net.d"
    bin_dir.mkdir(parents=True)
    conf_dir.mkdir(parents=True)
    plugin = bin_dir / "gct-noop"
    plugin.write_text(NOOP_CNI)
    plugin.chmod(0o755)
    (conf_dir / "10-gct-noop.conf").write_text(
        json.dumps({"cniVersion": "0.4.0", "name": "gct-noop", "type": "gct-noop"}))


def start(ns: MountNamespace, workdir: Path, settings: ContainerdSettings, run: int = 1) -> Daemon:
    """containerd with its root, state, config and CNI config in workdir (made by the first run, kept by
    later ones: a restart finds its images and running containers), its log in workdir.parent/containerd-<run>
    (the daemon's own dir, which stopping it removes; its shims keep running)."""
    containerd, bin_dir = binaries(settings.version)
    if not os.access(containerd, os.X_OK):
        raise FileNotFoundError(f"containerd {settings.version} is not there ({containerd}): run `make kube`")
    config = workdir / "config.toml"
    if not config.exists():
        workdir.mkdir(parents=True)
        _write_cni(workdir)
        config.write_text(config_text(workdir, settings))
    log_dir = workdir.parent / f"containerd-{run}"
    log_dir.mkdir()
    # containerd finds its shim (containerd-shim-runc-v2) on PATH: the one of the same release first
    env = {**settings.env, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}
    socket = socket_of(workdir)
    daemon = _spawn("containerd", ns.argv([str(containerd), "--config", str(config)]), log_dir, socket, [], env)
    _wait_for(lambda: socket.exists() and ctr(daemon, settings.version, "version", check=False).returncode == 0,
              daemon, "its API answered")
    return daemon


def ctr(daemon: Daemon, version: str, *args: str, check: bool = True, timeout: float = 120
        ) -> subprocess.CompletedProcess:
    """ctr of that release against the daemon, in CRI's namespace."""
    _, bin_dir = binaries(version)
    result = subprocess.run([str(bin_dir / "ctr"), "--address", str(daemon.socket), "--namespace", K8S_NAMESPACE,
                             *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"ctr {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}\n"
                             f"--- containerd log ---\n{daemon.log_tail()}")
    return result


def import_image(daemon: Daemon, version: str, archive: Path) -> None:
    ctr(daemon, version, "images", "import", str(archive))


def have_containerd(version: str) -> str | None:
    """None, or why this containerd cannot run here (one line)."""
    containerd, bin_dir = binaries(version)
    if not os.access(containerd, os.X_OK):
        return f"containerd {version} is not there ({containerd}; `make kube` fetches it)"
    if not shutil.which("runc"):
        return "runc is not installed"
    return None
