"""`nvidia-ctk runtime configure` against real engines: containerd 1.6 and a private dockerd accept what it writes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.e2e.engines import busybox_image_tar, docker, short_tempdir

pytestmark = pytest.mark.e2e

# the runtime shim as `make venv` installs it beside this interpreter
SHIM = Path(sys.executable).parent / "nvidia-container-runtime"
CRI = "io.containerd.grpc.v1.cri"


def nvidia_ctk(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "ctk.main", "runtime", "configure", *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture
def workdir():
    path = short_tempdir("gct-rtcfg-")
    yield path
    subprocess.run(["rm", "-rf", str(path)])


def containerd_config(workdir: Path) -> tuple[str, Path, list[Path]]:
    """A user's containerd config whose every path points into workdir."""
    root, state, opt = workdir / "root", workdir / "state", workdir / "opt"
    socket = workdir / "containerd.sock"
    text = f"""# a user's containerd config
version = 2
root = "{root}"
state = "{state}"

[grpc]
  address = "{socket}"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{opt}"
  [plugins."{CRI}"]
    sandbox_image = "pause.invalid/pause:3.9"  # the user's own
    [plugins."{CRI}".containerd]
      snapshotter = "native"
      [plugins."{CRI}".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."{CRI}".containerd.runtimes.runc.options]
          SystemdCgroup = false
          NoPivotRoot = true
"""
    return text, socket, [root, state, opt]


def config_dump(config: Path) -> dict:
    result = subprocess.run(["containerd", "--config", str(config), "config", "dump"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return tomllib.loads(result.stdout)


def test_containerd_accepts_the_written_config(workdir, private_containerd):
    config = workdir / "config.toml"
    text, socket, dirs = containerd_config(workdir)
    config.write_text(text)

    nvidia_ctk("--runtime=containerd", f"--config={config}", f"--nvidia-runtime-path={SHIM}", "--set-as-default")
    dump = config_dump(config)
    cri = dump["plugins"][CRI]
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    assert runtimes["nvidia"]["options"] == {"BinaryName": str(SHIM), "SystemdCgroup": False, "NoPivotRoot": True}
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    # the user's settings survive the import, which replaces the whole CRI section
    assert cri["sandbox_image"] == "pause.invalid/pause:3.9"
    assert cri["containerd"]["snapshotter"] == "native"
    assert runtimes["runc"]["options"] == {"SystemdCgroup": False, "NoPivotRoot": True}
    assert dump["plugins"]["io.containerd.internal.v1.opt"]["path"] == str(workdir / "opt")
    assert dump["root"] == str(workdir / "root") and dump["grpc"]["address"] == str(socket)

    # a real containerd starts with it and its CRI plugin loads
    daemon = private_containerd(config, socket, dirs)
    plugins = subprocess.run(["ctr", "--address", str(socket), "plugins", "ls"],
                             capture_output=True, text=True, timeout=30)
    assert plugins.returncode == 0, plugins.stderr
    # rows are TYPE ID PLATFORMS STATUS
    cri_rows = [row for row in map(str.split, plugins.stdout.splitlines()) if row[:2] == CRI.rsplit(".", 1)]
    assert cri_rows and cri_rows[0][-1] == "ok", plugins.stdout + daemon.log_tail()

    nvidia_ctk("--runtime=containerd", f"--config={config}", "--remove")
    assert config.read_text() == text
    assert "nvidia" not in config_dump(config)["plugins"][CRI]["containerd"]["runtimes"]


def test_containerd_fresh_config_keeps_runc(workdir):
    """No config at all: our drop-in must not take away containerd's built-in runc runtime."""
    config = workdir / "etc" / "config.toml"
    nvidia_ctk("--runtime=containerd", f"--config={config}", f"--nvidia-runtime-path={SHIM}")
    runtimes = config_dump(config)["plugins"][CRI]["containerd"]["runtimes"]
    assert runtimes["runc"]["runtime_type"] == "io.containerd.runc.v2"
    assert runtimes["nvidia"]["options"]["BinaryName"] == str(SHIM)
    nvidia_ctk("--runtime=containerd", f"--config={config}", "--remove")
    assert not config.exists()


def test_dockerd_starts_with_the_written_daemon_json(workdir, private_dockerd):
    daemon_json = workdir / "daemon.json"
    original = '{\n  "log-level": "warn",\n  "storage-driver": "vfs"\n}\n'
    daemon_json.write_text(original)
    nvidia_ctk(f"--config={daemon_json}", f"--nvidia-runtime-path={SHIM}", "--set-as-default")
    assert json.loads(daemon_json.read_text())["storage-driver"] == "vfs"

    # the shim's own config, reaching it through dockerd's environment: a debug log shows it ran
    shim_log = workdir / "shim-debug.log"
    toolkit_config = workdir / "toolkit-config.toml"
    toolkit_config.write_text(f'[nvidia-container-runtime]\ndebug = "{shim_log}"\nlog-level = "debug"\n')
    # and its cache in the test's dir (else /run/nvidia-container-toolkit, where it would stay)
    daemon = private_dockerd(daemon_json, env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(toolkit_config),
                                               "NVIDIA_CTK_CACHE_DIR": str(workdir / "shim-cache")})
    info = json.loads(docker(daemon, "info", "--format", "{{json .}}").stdout)
    assert info["Runtimes"]["nvidia"]["path"] == str(SHIM)
    assert "runc" in info["Runtimes"]
    assert info["DefaultRuntime"] == "nvidia"
    assert info["Driver"] == "vfs"  # the user's key still applies

    if not SHIM.exists():
        pytest.skip(f"running a container needs the runtime shim ({SHIM}), which `make venv` installs once "
                    "runtime_shim/main.py exists")
    docker(daemon, "import", str(busybox_image_tar(workdir)), "gct-busybox:latest")
    run = docker(daemon, "run", "--name", "via-nvidia", "--runtime=nvidia", "gct-busybox:latest",
                 "/bin/echo", "hello from nvidia runtime")
    assert run.stdout.strip() == "hello from nvidia runtime"
    inspect = docker(daemon, "inspect", "--format", "{{.HostConfig.Runtime}} {{.Id}}", "via-nvidia")
    runtime_name, container_id = inspect.stdout.split()
    assert runtime_name == "nvidia"
    assert container_id in shim_log.read_text()  # dockerd ran the container through our shim
    docker(daemon, "rm", "via-nvidia")


def test_a_reload_is_enough_for_dockerd_and_keeps_its_containers_running(workdir, private_dockerd):
    """Issue 27.6: configure says `reload docker`, not restart, for runtimes/default-runtime. Checked on a
    real dockerd: after a SIGHUP it lists the new runtime and runs a container with it, while a container
    started before the change is still the same running process."""
    daemon_json = workdir / "daemon.json"
    daemon_json.write_text('{\n  "storage-driver": "vfs"\n}\n')
    daemon = private_dockerd(daemon_json, env={"NVIDIA_CTK_CACHE_DIR": str(workdir / "shim-cache")})
    docker(daemon, "import", str(busybox_image_tar(workdir)), "gct-busybox:latest")
    docker(daemon, "run", "-d", "--name", "before", "gct-busybox:latest", "/bin/sleep", "600")
    pid_before = docker(daemon, "inspect", "--format", "{{.State.Pid}}", "before").stdout.strip()

    said = nvidia_ctk(f"--config={daemon_json}", f"--nvidia-runtime-path={SHIM}", "--set-as-default").stderr
    assert "reload docker to apply this" in said and "restart" not in said
    assert "nvidia" not in json.loads(docker(daemon, "info", "--format", "{{json .Runtimes}}").stdout)
    os.kill(daemon.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        info = json.loads(docker(daemon, "info", "--format", "{{json .}}").stdout)
        if "nvidia" in info["Runtimes"]:
            break
        time.sleep(0.2)
    assert info["Runtimes"]["nvidia"]["path"] == str(SHIM) and info["DefaultRuntime"] == "nvidia"
    state = docker(daemon, "inspect", "--format", "{{.State.Running}} {{.State.Pid}}", "before").stdout.split()
    assert state == ["true", pid_before]   # the reload left the running container alone
    if SHIM.exists():
        run = docker(daemon, "run", "--rm", "gct-busybox:latest", "/bin/echo", "via the reloaded default")
        assert run.stdout.strip() == "via the reloaded default"
    docker(daemon, "rm", "-f", "before")


def test_daemon_json_remove_restores_original(workdir):
    daemon_json = workdir / "daemon.json"
    original = '{\n  "log-level": "warn"\n}\n'
    daemon_json.write_text(original)
    nvidia_ctk(f"--config={daemon_json}", f"--nvidia-runtime-path={SHIM}", "--cdi.enabled")
    nvidia_ctk(f"--config={daemon_json}", "--remove")
    assert daemon_json.read_text() == original
    assert sorted(p.name for p in workdir.iterdir()) == ["daemon.json"]


def test_podman_runs_the_hook_from_the_written_hooks_file(workdir, private_podman):
    """podman 4.3 accepts the hooks.d file and runs the hook at prestart with exactly its env."""
    hooks_dir = workdir / "hooks.d"
    seen = workdir / "hook-seen"
    hook = workdir / "fake-nvidia-container-runtime-hook"
    # stands in for the real hook: records what podman ran it with
    hook.write_text(f'#!/bin/sh\necho "args=$*" > {seen}\nenv >> {seen}\ncat >> {seen}\n')
    hook.chmod(0o755)
    nvidia_ctk("--runtime=podman", f"--config={hooks_dir / 'oci-nvidia-hook.json'}",
               f"--nvidia-runtime-hook-path={hook}")

    podman = private_podman(hooks_dir)
    podman("import", str(busybox_image_tar(workdir)), "gct-busybox:latest")
    assert podman("run", "--rm", "--net=none", "gct-busybox:latest", "/bin/echo", "ok").stdout.strip() == "ok"
    lines = seen.read_text().splitlines()
    assert lines[0] == "args=prestart"
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in lines
    assert '"status":"creating"' in lines[-1]  # the OCI state on stdin

    nvidia_ctk("--runtime=podman", f"--config={hooks_dir / 'oci-nvidia-hook.json'}", "--remove")
    seen.unlink()
    podman("run", "--rm", "--net=none", "gct-busybox:latest", "/bin/true")
    assert not seen.exists()  # no hook once removed
