"""Where the Kubernetes test binaries live: one cache per user, outside any checkout, so a second
`make test` (from this checkout or another) reuses what the first one built or fetched."""
from __future__ import annotations

import os
from pathlib import Path

# The release the e2e tests run (the newest 1.36 patch the Go module proxy serves) and the release of its
# published staging modules (k8s.io/api, k8s.io/client-go, ...: v0.<minor>.<patch>).
KUBE_VERSION = "v1.36.3"
STAGING_VERSION = "v0.36.3"
# Kubernetes 1.36 is built with Go 1.26; another Go builds binaries that misbehave (an apiserver built with
# Go 1.27 served a malformed /openapi/v2).
GO_SERIES = "go1.26"
KUBE_COMMANDS = ("kubelet", "kube-apiserver", "kube-scheduler", "kube-controller-manager")

# containerd with CDI (>= 1.7) from the Debian release after bookworm; it runs on bookworm.
CONTAINERD17_SUITE = "trixie"

KUBE_BIN_DIR_ENV = "KUBE_BIN_DIR"

# NVIDIA's own device plugin, for the parity test (tests/support/kube/nvidia_plugin_build.py says why this one)
NVIDIA_PLUGIN_VERSION = "v0.18.0"


def cache_root() -> Path:
    """${XDG_CACHE_HOME:-$HOME/.cache}/gpu-container-toolkit/kube"""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpu-container-toolkit" / "kube"


def built_bin_dir() -> Path:
    """Where the set-up puts the binaries it builds."""
    return cache_root() / KUBE_VERSION / "bin"


def kube_bin_dir() -> Path:
    """The binaries the tests run: $KUBE_BIN_DIR when set (the user's own), else the set-up's build."""
    given = os.environ.get(KUBE_BIN_DIR_ENV)
    return Path(given) if given else built_bin_dir()


def nvidia_plugin_bin_dir() -> Path:
    """Where the set-up puts NVIDIA's nvidia-device-plugin it builds."""
    return cache_root() / f"nvidia-device-plugin-{NVIDIA_PLUGIN_VERSION}" / "bin"


def missing_kube_binaries(bin_dir: Path) -> list[str]:
    return [name for name in KUBE_COMMANDS if not os.access(bin_dir / name, os.X_OK)]


def containerd17_root() -> Path:
    """The unpacked Debian package of containerd 1.7 (usr/bin/containerd, ctr, containerd-shim-runc-v2)."""
    return cache_root() / f"containerd-{CONTAINERD17_SUITE}" / "root"


def unavailable_file(part: str) -> Path:
    """Why the set-up could not obtain a part ("kube", "containerd"), for the tests' skip line."""
    return cache_root() / f"{part}.unavailable"


def unavailable_reason(part: str) -> str | None:
    try:
        return unavailable_file(part).read_text().strip() or None
    except OSError:
        return None
