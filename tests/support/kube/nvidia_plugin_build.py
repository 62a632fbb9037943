"""Build NVIDIA's own device plugin (github.com/NVIDIA/k8s-device-plugin, cmd/nvidia-device-plugin) from
the Go module proxy into the user's cache, beside the Kubernetes binaries, once per release: the parity
test (tests/e2e/kube/test_nvidia_plugin_parity.py) runs it and ours on one simulated host and compares what
the kubelet offers.

As for kubelet (tests/support/kube/build.py), a small module of our own requires the release and
`go build`s the command; the release's go.mod needs no replaces. Unlike kubelet it needs cgo: go-nvml
dlopens libnvidia-ml.so.1 through cgo, so CGO_ENABLED=1 with the machine's gcc (Makefile's apt step).
NVIDIA_PLUGIN_VERSION is the newest v0.17/v0.18 release the proxy serves whose go.mod the checksum database
also knows (v0.18.1's lookup answers 404 there, so `go` refuses it).

Run by tests.support.kube.setup (`make kube`); a failure leaves a reason file, and the parity test skips
with it (CI=true: the set-up fails instead).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.kube import paths
from tests.support.kube.build import _go_env, _run_go, find_go, go_version
from tests.support.kube.setup_common import SetupError, cache_lock, say

MODULE = "github.com/NVIDIA/k8s-device-plugin"
COMMAND = f"{MODULE}/cmd/nvidia-device-plugin"
# NVIDIA's Makefile stamps the version this way (internal/info: "version must be set by go build's -X")
VERSION_VARIABLE = f"{MODULE}/internal/info.version"


def module_text() -> str:
    return "\n".join(["module gpu-container-toolkit.test/nvidia-device-plugin-build", "", "go 1.26", "",
                      f"require {MODULE} {paths.NVIDIA_PLUGIN_VERSION}", ""])


def build(dest: Path) -> None:
    go = find_go()
    version_dir = dest.parent
    work = version_dir / "go-work"  # kept if the build fails, so a retry resumes
    work.mkdir(parents=True, exist_ok=True)
    log = version_dir / "build.log"
    log.write_text("")
    env = _go_env(work)
    env["CGO_ENABLED"] = "1"  # go-nvml's dlopen of libnvidia-ml.so.1 is cgo
    if shutil.which("gcc") is None:
        raise SetupError("gcc is missing (cgo builds go-nvml)", "PATH")
    started = time.monotonic()
    say(f"building NVIDIA's nvidia-device-plugin {paths.NVIDIA_PLUGIN_VERSION} with {go_version(go)} into {dest} "
        f"(once per machine; log: {log})")
    with tempfile.TemporaryDirectory(prefix="nvidia-plugin-build-", dir=version_dir) as tmp:
        module = Path(tmp) / "module"
        module.mkdir()
        (module / "go.mod").write_text(module_text())
        _run_go(go, ["get", f"{COMMAND}@{paths.NVIDIA_PLUGIN_VERSION}"], module, env, log)
        out = Path(tmp) / "bin"
        out.mkdir()
        ldflags = f"-s -w -X {VERSION_VARIABLE}={paths.NVIDIA_PLUGIN_VERSION}"
        _run_go(go, ["build", "-trimpath", "-ldflags", ldflags, "-o", str(out) + "/", COMMAND], module, env, log)
        check_version(out / "nvidia-device-plugin")
        os.replace(out, dest)
    seconds = time.monotonic() - started
    (version_dir / "build-seconds").write_text(f"{seconds:.0f}\n")
    say(f"built NVIDIA's nvidia-device-plugin {paths.NVIDIA_PLUGIN_VERSION} in {seconds:.0f} s; removing the Go caches")
    subprocess.run([go, "clean", "-modcache"], env=env, capture_output=True, check=False)
    shutil.rmtree(work, ignore_errors=True)


def check_version(binary: Path) -> None:
    proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
    if paths.NVIDIA_PLUGIN_VERSION not in proc.stdout + proc.stderr:
        raise SetupError(f"built binary reports {(proc.stdout + proc.stderr).strip()!r}, "
                         f"not {paths.NVIDIA_PLUGIN_VERSION}", str(binary))


def ensure_nvidia_plugin() -> Path:
    """NVIDIA's nvidia-device-plugin in the cache, built if missing."""
    dest = paths.nvidia_plugin_bin_dir()
    with cache_lock("nvidia-device-plugin"):
        if os.access(dest / "nvidia-device-plugin", os.X_OK):
            return dest / "nvidia-device-plugin"
        if dest.exists():
            shutil.rmtree(dest)
        build(dest)
    return dest / "nvidia-device-plugin"
