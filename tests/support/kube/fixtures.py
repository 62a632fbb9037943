"""pytest fixtures for the Kubernetes e2e tests (registered in tests/conftest.py).

- `kube_bin_dir`: the directory with kubelet, kube-apiserver, kube-scheduler, kube-controller-manager
  ($KUBE_BIN_DIR or the set-up's build); the test is skipped, with one line saying why, when they are not
  there (`make kube` builds them; `make test` runs it first).
- `kube_node`: a factory, `kube_node(containerd=ContainerdSettings(...), kubelet=KubeletSettings(...),
  control_plane=False, controller_manager=True, glibc_image=False) -> KubeNode`, each node stopped and
  removed at the end of the test (tests.support.kube.node).
"""
from __future__ import annotations

import contextlib
import os
import shutil

import pytest

from tests.support.kube import paths
from tests.support.kube.containerd import ContainerdSettings, have_containerd
from tests.support.kube.kubelet import have_kubelet_prerequisites
from tests.support.kube.node import kube_node as start_kube_node


def skip_reason_for_binaries() -> str | None:
    bin_dir = paths.kube_bin_dir()
    missing = paths.missing_kube_binaries(bin_dir)
    if not missing:
        return None
    why = paths.unavailable_reason("kube") if not os.environ.get(paths.KUBE_BIN_DIR_ENV) else None
    return (f"Kubernetes binaries not available: {why or ', '.join(missing) + ' missing in ' + str(bin_dir)} "
            f"(`make kube` builds them; {paths.KUBE_BIN_DIR_ENV}=DIR uses yours)")


def skip_reason_for_nvidia_plugin() -> str | None:
    """Why NVIDIA's own nvidia-device-plugin (the parity test's reference, built by `make kube`) is not
    there, or None."""
    binary = paths.nvidia_plugin_bin_dir() / "nvidia-device-plugin"
    if os.access(binary, os.X_OK):
        return None
    why = paths.unavailable_reason("nvidia-device-plugin") or f"{binary} missing"
    return f"NVIDIA's nvidia-device-plugin not available: {why} (`make kube` builds it)"


def skip_reason_for_node(containerd_version: str, control_plane: bool) -> str | None:
    if os.geteuid() != 0:
        return "a Kubernetes node needs root"
    reason = have_kubelet_prerequisites() or skip_reason_for_binaries()
    if reason is None:
        reason = have_containerd(containerd_version)
        if reason and containerd_version == "1.7":
            reason = paths.unavailable_reason("containerd") or reason
    if reason is None and control_plane and shutil.which("etcd") is None:
        reason = "etcd is not installed (Debian's etcd-server)"
    return reason


@pytest.fixture
def kube_bin_dir():
    reason = skip_reason_for_binaries()
    if reason:
        pytest.skip(reason)
    return paths.kube_bin_dir()


@pytest.fixture
def kube_node():
    """Factory of started nodes; all are stopped at teardown, newest first."""
    with contextlib.ExitStack() as stack:
        def start(containerd: ContainerdSettings | None = None, control_plane: bool = False, **options):
            version = (containerd or ContainerdSettings()).version
            reason = skip_reason_for_node(version, control_plane)
            if reason:
                pytest.skip(reason)
            return stack.enter_context(start_kube_node(paths.kube_bin_dir(), containerd=containerd,
                                                       control_plane=control_plane, **options))
        yield start
