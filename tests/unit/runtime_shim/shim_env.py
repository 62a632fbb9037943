"""A private installation of the shim for tests: launchers in a temp bin dir, a config.toml naming a
fake low-level runtime that records its argv, environment and the bundle's config.json as it was
handed over, a cache dir and a debug log, all in temp dirs."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from launcher import install_launchers

FAKE_RUNTIME = """#!/bin/sh
# records what it was given: one JSON document per call
{python} - "$0" "$@" <<'PY' >> {record}
import json, os, sys
bundle = None
args = sys.argv[2:]
for i, a in enumerate(args):
    if a in ("--bundle", "-b") and i + 1 < len(args):
        bundle = args[i + 1]
spec = None
if bundle and os.path.exists(os.path.join(bundle, "config.json")):
    spec = open(os.path.join(bundle, "config.json")).read()
print(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "spec": spec}}))
PY
exit {exit_code}
"""


def install_shim(bindir: Path) -> Path:
    names = install_launchers.install(bindir, sys.executable)
    assert "nvidia-container-runtime" in names
    return bindir / "nvidia-container-runtime"


@dataclass
class ShimEnv:
    root: Path
    bindir: Path
    record: Path
    runtime: Path
    config: Path
    cache_dir: Path
    debug_log: Path

    @property
    def shim(self) -> Path:
        return self.bindir / "nvidia-container-runtime"

    def env(self, **extra: str) -> dict[str, str]:
        # a private PATH dir: the launcher's cache notes PATH dirs' mtimes, and the system's change when
        # packages are installed by other tests on the same machine
        return {"PATH": str(self.root / "path-bin"), "NVIDIA_CTK_CONFIG_FILE_PATH": str(self.config),
                "NVIDIA_CTK_CACHE_DIR": str(self.cache_dir), **extra}

    def write_config(self, text: str = "", runtimes: list[str] | None = None) -> None:
        runtimes = [str(self.runtime)] if runtimes is None else runtimes
        self.config.write_text(
            "[nvidia-container-runtime]\n"
            f"runtimes = {json.dumps(runtimes)}\n"
            f'debug = "{self.debug_log}"\nlog-level = "debug"\n' + text)

    def run(self, *args: str, program: str = "nvidia-container-runtime", env: dict | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
        exe = self.bindir / program
        return subprocess.run([str(exe), *args], env=env or self.env(), cwd=cwd or self.root,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)

    def calls(self) -> list[dict]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line.strip()]

    def reset(self) -> None:
        for path in (self.record, self.debug_log):
            path.unlink(missing_ok=True)

    def python_ran(self) -> bool:
        """The Python side logs every call it handles; the C passthrough logs another line."""
        return self.debug_log.exists() and "low-level runtime" in self.debug_log.read_text()


@pytest.fixture(scope="module")
def bindir(tmp_path_factory) -> Path:
    """A bin dir with the shim's launchers (and a fake runc), shared by a test module."""
    path = tmp_path_factory.mktemp("shim") / "bin"   # gct-nvml-inventory goes into ../libexec
    install_shim(path)
    return path


def make_shim_env(root: Path, bindir: Path, exit_code: int = 0) -> ShimEnv:
    record = root / "calls.jsonl"
    runtime = root / "fake-runc"
    runtime.write_text(FAKE_RUNTIME.format(python=sys.executable, record=record, exit_code=exit_code))
    runtime.chmod(0o755)
    env = ShimEnv(root, bindir, record, runtime, root / "config.toml", root / "cache", root / "debug.log")
    (root / "path-bin").mkdir()
    env.write_config()
    return env


def minimal_spec(env: list[str] | None = None, **extra) -> dict:
    return {"ociVersion": "1.0.2", "process": {"args": ["true"], "env": ["PATH=/bin", *(env or [])], "cwd": "/"},
            "root": {"path": "rootfs"}, "linux": {"namespaces": [{"type": "mount"}]}, **extra}


def make_bundle(path: Path, spec: dict, mode: int = 0o644) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(spec, indent=1))
    os.chmod(path / "config.json", mode)
    return path


KIND = "nvidia.com/gpu"
DOCKER_HOOK = {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"],
               "env": ["PATH=/usr/bin"]}


def private_node(root: Path, like: str) -> str:
    """A character device node in root with the number and mode of like (/dev/null, /dev/zero): the
    create cache checks its host nodes' ctime, and other work on the machine changes /dev/null's. like
    itself when nodes cannot be made (not root)."""
    st = os.stat(like)
    node = root / ("node-" + os.path.basename(like))
    try:
        os.mknod(node, stat.S_IFCHR | 0o600, st.st_rdev)
        os.chmod(node, stat.S_IMODE(st.st_mode))
    except PermissionError:
        return like
    return str(node)


def make_cdi_shim_env(root: Path, bindir: Path) -> ShimEnv:
    """A shim in cdi mode with a spec dir holding devices 0, 1, GPU-abc and all (nodes like /dev/null and
    /dev/zero, private_node) and common edits (NVIDIA_VISIBLE_DEVICES=void, /dev/nvidiactl, one library
    mount)."""
    from cdi.spec import ContainerEdits, Device, DeviceNode, Mount, Spec
    from cdi.spec_file import write_spec

    env = make_shim_env(root, bindir)
    null, zero = private_node(root, "/dev/null"), private_node(root, "/dev/zero")
    spec_dir = root / "cdi"
    spec_dir.mkdir()
    host_file = root / "libfake.so"
    host_file.write_text("x")
    common = ContainerEdits(env=["NVIDIA_VISIBLE_DEVICES=void"],
                            device_nodes=[DeviceNode(path="/dev/nvidiactl", host_path=null)],
                            mounts=[Mount(host_path=str(host_file), container_path="/usr/lib/libfake.so",
                                          options=["ro", "nosuid", "nodev", "bind", "rprivate"])])
    devices = [Device(name=n, container_edits=ContainerEdits(device_nodes=[DeviceNode(path=f"/dev/nvidia{m}",
                                                                                      host_path=zero)]))
               for n, m in (("0", 0), ("1", 1), ("GPU-abc", 1))]
    devices.append(Device(name="all", container_edits=ContainerEdits(device_nodes=[
        DeviceNode(path="/dev/nvidia0", host_path=zero), DeviceNode(path="/dev/nvidia1", host_path=zero)])))
    write_spec(Spec(kind=KIND, devices=devices, container_edits=common), spec_dir / "nvidia.json")
    env.spec_dir = spec_dir
    env.write_config(f'mode = "cdi"\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{spec_dir}"]\n')
    return env
