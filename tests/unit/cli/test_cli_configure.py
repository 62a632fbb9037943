"""`nvidia-container-cli configure` flag by flag, the way LXC calls it: no --pid, the rootfs in the
caller's own mount namespace (here a private one made with `unshare --mount`, so the host never sees a
mount), --no-cgroups. Each run looks inside the rootfs afterwards, from the same namespace."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from cdi.config_cache import RECENT_NS
from simulator.host_builder import create_simulated_host
from simulator.models import DEFAULT_MODEL
from tests.e2e.rootfs import make_rootfs

V = "550.54.15"
LIB = "/usr/lib/x86_64-linux-gnu"
CLI = f"{shlex.quote(sys.executable)} -m hook.cli"


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root (mknod, mount namespaces) and unshare")
    root = tmp_path_factory.mktemp("configure") / "host"
    create_simulated_host(str(root), gpus=2, model=DEFAULT_MODEL, driver_version=V, cuda_version="12.4",
                          mig_options=["1=1g.5gb"], imex_channels=2)
    return root


@pytest.fixture
def rootfs(tmp_path):
    return make_rootfs(tmp_path / "rootfs", glibc=True)


def configure(host, rootfs, *flags: str, after: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    """configure ROOTFS in a private mount namespace, then run `after` (a shell snippet) there."""
    script = (f"{CLI} --root {shlex.quote(str(host))} configure --no-cgroups "
              f"{' '.join(shlex.quote(f) for f in flags)} {shlex.quote(str(rootfs))}; echo \"rc=$?\"\n"
              f"cd {shlex.quote(str(rootfs))}\n{after}")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, env={**cli_env(host), **(env or {})}, timeout=120)


def cli_env(host) -> dict[str, str]:
    """The caller's environment less NVIDIA_*, with a cache dir of the host's: the CLI keeps the driver
    files it finds there (cdi.driver_files_cache), by default in the machine's /run/nvidia-container-toolkit."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NVIDIA_")}
    return {**environ, "NVIDIA_CTK_CACHE_DIR": str(host.parent / "cache")}


def present(*paths: str) -> str:
    """Shell that prints, per path (relative to the rootfs), `path: yes|no` (a mount, not a placeholder)."""
    return "\n".join(f"if [ -s {p} ] || [ -c {p} ] || [ -S {p} ]; then echo '{p}: yes'; else echo '{p}: no'; fi"
                     for p in paths)


def answers(done: subprocess.CompletedProcess) -> dict[str, str]:
    assert done.stdout.startswith("rc=0\n"), (done.stdout, done.stderr)
    return dict(line.split(": ", 1) for line in done.stdout.splitlines()[1:] if ": " in line)


def test_capabilities_decide_libraries_binaries_and_nodes(host, rootfs):
    paths = ("dev/nvidia0", "dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-modeset", f".{LIB}/libnvidia-ml.so.{V}",
             f".{LIB}/libcuda.so.{V}", f".{LIB}/libGLX_nvidia.so.{V}", "usr/bin/nvidia-smi",
             "var/run/nvidia-persistenced/socket", f"lib/firmware/nvidia/{V}/gsp_ga10x.bin")
    utility = answers(configure(host, rootfs, "--device=0", "--utility", after=present(*paths)))
    assert utility == {"dev/nvidia0": "yes", "dev/nvidiactl": "yes", "dev/nvidia-uvm": "no", "dev/nvidia-modeset": "no",
                       f".{LIB}/libnvidia-ml.so.{V}": "yes", f".{LIB}/libcuda.so.{V}": "no",
                       f".{LIB}/libGLX_nvidia.so.{V}": "no", "usr/bin/nvidia-smi": "yes",
                       "var/run/nvidia-persistenced/socket": "yes", f"lib/firmware/nvidia/{V}/gsp_ga10x.bin": "yes"}


def test_compute_and_display(host, rootfs):
    paths = ("dev/nvidia-uvm", "dev/nvidia-modeset", f".{LIB}/libcuda.so.{V}", f".{LIB}/libGLX_nvidia.so.{V}",
             "usr/bin/nvidia-smi", f".{LIB}/libnvidia-ml.so.{V}")
    got = answers(configure(host, rootfs, "--device=0", "--compute", "--display", after=present(*paths)))
    # display brings graphics libraries and the modeset node; compute the uvm nodes; no utility files
    assert got == {"dev/nvidia-uvm": "yes", "dev/nvidia-modeset": "yes", f".{LIB}/libcuda.so.{V}": "yes",
                   f".{LIB}/libGLX_nvidia.so.{V}": "yes", "usr/bin/nvidia-smi": "no", f".{LIB}/libnvidia-ml.so.{V}": "no"}


def test_no_flags_exclude_nodes_sockets_and_firmware(host, rootfs):
    paths = ("dev/nvidia0", "dev/nvidiactl", f".{LIB}/libnvidia-ml.so.{V}", "var/run/nvidia-persistenced/socket",
             f"lib/firmware/nvidia/{V}/gsp_ga10x.bin")
    got = answers(configure(host, rootfs, "--device=0", "--utility", "--no-devbind", "--no-persistenced",
                            "--no-fabricmanager", "--no-gsp-firmware", after=present(*paths)))
    assert got == {"dev/nvidia0": "no", "dev/nvidiactl": "no", f".{LIB}/libnvidia-ml.so.{V}": "yes",
                   "var/run/nvidia-persistenced/socket": "no", f"lib/firmware/nvidia/{V}/gsp_ga10x.bin": "no"}


def test_mig_device_mig_config_and_imex_channel(host, rootfs):
    import json

    mig = json.loads((host / ".nvidia-simulated-host.json").read_text())["inventory"]["gpus"][1]["mig_devices"][0]
    paths = ("dev/nvidia0", "dev/nvidia1", f"dev/nvidia-caps/nvidia-cap{mig['gi_cap_minor']}",
             f"dev/nvidia-caps/nvidia-cap{mig['ci_cap_minor']}", "dev/nvidia-caps/nvidia-cap1",
             "dev/nvidia-caps/nvidia-cap2", "dev/nvidia-caps-imex-channels/channel1",
             "dev/nvidia-caps-imex-channels/channel0")
    got = answers(configure(host, rootfs, "--device=1:0", "--mig-config=1", "--imex-channel=1", after=present(*paths)))
    assert got == {"dev/nvidia0": "no", "dev/nvidia1": "yes", f"dev/nvidia-caps/nvidia-cap{mig['gi_cap_minor']}": "yes",
                   f"dev/nvidia-caps/nvidia-cap{mig['ci_cap_minor']}": "yes", "dev/nvidia-caps/nvidia-cap1": "yes",
                   "dev/nvidia-caps/nvidia-cap2": "no", "dev/nvidia-caps-imex-channels/channel1": "yes",
                   "dev/nvidia-caps-imex-channels/channel0": "no"}


def test_ld_cache_is_rebuilt_with_the_host_ldconfig(host, rootfs):
    done = configure(host, rootfs, "--device=0", "--compute", "--ldconfig=@/sbin/ldconfig",
                     after="chroot . /sbin/ldconfig -p | grep -c 'libcuda.so.1 '")
    assert done.stdout.splitlines() == ["rc=0", "1"], done.stderr


def test_a_container_ldconfig_is_refused_even_when_the_config_allows_it(host, rootfs, tmp_path):
    """The image's ldconfig would run as root in the host's pid, network and IPC namespaces (the sandbox
    joins only the mount namespace): refused with the feature too, nothing injected (issue 22, item 9)."""
    count = "chroot . /sbin/ldconfig -p | grep -c 'libcuda.so.1 '; grep -c \" $PWD\" /proc/self/mountinfo"
    refused = configure(host, rootfs, "--device=0", "--compute", "--ldconfig=/sbin/ldconfig", after=count)
    assert refused.stderr.strip() == (
        "nvidia-container-cli: error: ldconfig '/sbin/ldconfig' would run a binary from the container image; use "
        "'@/sbin/ldconfig' for the host's (a path without '@' is refused unless "
        "features.allow-ldconfig-from-container is set, and refused here even then) (--ldconfig)")
    assert refused.stdout.splitlines() == ["rc=1", "0", "0"]      # nothing injected, nothing mounted
    config = tmp_path / "config.toml"
    config.write_text("[features]\nallow-ldconfig-from-container = true\n")
    allowed = configure(host, rootfs, "--device=0", "--compute", "--ldconfig=/sbin/ldconfig", after=count,
                        env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)})
    assert allowed.stderr.strip() == (
        "nvidia-container-cli: error: ldconfig '/sbin/ldconfig' would run a binary from the container image as "
        "root on the host; this toolkit refuses that even with features.allow-ldconfig-from-container: use "
        "'@/sbin/ldconfig' for the host's (--ldconfig)")
    assert allowed.stdout.splitlines() == ["rc=1", "0", "0"]


@pytest.mark.parametrize("flags, message", [
    (["--device=0", "--require=cuda>=99.0"],
     "unsatisfied condition 'cuda>=99.0': this host has cuda 12.4, driver 550.54.15, arch 8.0, brand Nvidia "
     "(--require, GPU 0)"),
    (["--device=0", "--require=arch<7.0 brand=Tesla"], "unsatisfied condition 'arch<7.0 brand=Tesla'"),
    (["--device=3"], "unknown device id '3': GPU index 3 out of range, this host has 2 GPUs (0-1) (--device)"),
    (["--device=0", "--mig-config=9"], "unknown device id '9': GPU index 9 out of range, this host has 2 GPUs (0-1) (--mig-config)"),
    (["--device=0", "--imex-channel=5"], "IMEX channel 5 does not exist"),
    (["--device=0", "--compute", "--ldconfig=@/nonexistent/ldconfig"],
     "cannot use ldconfig: No such file or directory (/nonexistent/ldconfig)"),
    (["--device=0", "--compute", "--ldconfig=@/proc/version"], "cannot use ldconfig: not an executable file"),
    (["--device=0", "--compute", "--ldconfig=@sbin/ldconfig"], "must be an absolute host path (--ldconfig)"),
])
def test_refusals_are_one_line_and_leave_nothing_mounted(host, rootfs, flags, message):
    done = configure(host, rootfs, *flags, after="grep -c \" $PWD\" /proc/self/mountinfo")
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvidia-container-cli: error: ") and message in lines[0], done.stderr
    assert done.stdout.splitlines() == ["rc=1", "0"]


def test_debug_log(host, rootfs, tmp_path):
    log = tmp_path / "cli.log"
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-m", "hook.cli",
                           "--root", str(host), f"--debug={log}", "--load-kmods", "configure", "--no-cgroups",
                           "--device=0", "--utility", str(rootfs)], capture_output=True, text=True, timeout=120,
                          env=cli_env(host))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert f"injected into {rootfs}" in log.read_text()


def test_the_driver_files_found_are_kept_in_the_given_cache_dir(host, rootfs):
    """Once the host's files are older than config_cache.RECENT_NS the CLI keeps what it found, in
    NVIDIA_CTK_CACHE_DIR (every run here names one: the default is the machine's /run)."""
    newest = max(os.lstat(os.path.join(d, n)).st_ctime_ns for d, dirs, files in os.walk(host) for n in dirs + files)
    time.sleep(max(0.0, (newest + RECENT_NS - time.time_ns()) / 1e9) + 0.05)
    assert configure(host, rootfs, "--device=0", "--utility").stdout.splitlines()[0] == "rc=0"
    assert list((host.parent / "cache").glob("driver-files-*.json"))


def test_configure_imports_no_admin_cli_libraries():
    # the start path (ctr's hook) must not pay for click, jsonschema or YAML (DESIGN: the hot path is small)
    code = ("import sys, hook.cli, hook.cli_configure, hook.cli_info, hook.inject, cdi.nvml\n"
            "print(sorted(m for m in ('click', 'jsonschema', 'yaml') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stderr


def test_a_late_failure_undoes_every_mount(host, rootfs):
    # ldconfig runs after the mounts; a dynamically linked one is refused there, and everything is undone
    done = configure(host, rootfs, "--device=0", "--compute", "--ldconfig=@/bin/false",
                     after="grep -c \" $PWD\" /proc/self/mountinfo")
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvidia-container-cli: error: ldconfig failed"), done.stderr
    assert done.stdout.splitlines() == ["rc=1", "0"]
