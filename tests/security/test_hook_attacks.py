"""The known attacks on GPU container hooks (docs/reference.md#attacks), each against nvidia-container-runtime-hook with
a crafted rootfs or config, through the runtime shim in legacy mode, plain runc/crun with the hook
entry as docker writes it, and docker --gpus.

For every attack: nothing appears or changes in a host directory the image points at, no host path is
mounted into the container beyond the driver files, nothing the image supplies runs as root on the
host, the host's mount table (injection-related entries) is unchanged, and the container either starts
without the escape or fails with our one-line error.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.e2e.bundle import make_bundle
from tests.e2e.engines import docker, short_tempdir, start_dockerd, stop_daemon
from tests.e2e.hook_support import (BIN, LIBDIR, PROBE, add_hook_entry, make_simulated_host, mount_table, nodes,
                                    require_root_and, run_through_shim, run_with_runtime, smi, write_config)
from tests.e2e.host_setup import ensure_hugetlb_on_v1
from tests.e2e.rootfs import make_rootfs, rootfs_tar

pytestmark = pytest.mark.e2e
VERSION = "550.54.15"
HOOK_ERROR = "nvidia-container-runtime-hook: error: "


@pytest.fixture(scope="module")
def world():
    """A simulated host, a 'host' directory the attacks aim at, and a private dockerd using our hook."""
    require_root_and("runc", "crun", "gcc", "dockerd", "containerd")
    ensure_hugetlb_on_v1()
    work = short_tempdir("gct-hooksec-")
    daemon = None
    try:
        make_simulated_host(work / "host")
        config = write_config(work / "config.toml", work / "host")
        (work / "d").mkdir()
        (work / "daemon.json").write_text('{"storage-driver": "vfs"}\n')
        daemon = start_dockerd(work / "daemon.json", workdir=work / "d",
                               env={"PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                                    "NVIDIA_CTK_CONFIG_FILE_PATH": str(config)})
        yield work, config, daemon
    finally:
        if daemon is not None:
            stop_daemon(daemon)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def target(world):
    """A host directory with a victim file that the crafted images point their links at."""
    work = world[0]
    directory = work / f"target-{uuid.uuid4().hex[:8]}"
    directory.mkdir()
    (directory / "victim").write_text("host file\n")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def snapshot(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): (p.read_text() if p.is_file() and not p.is_symlink() else "")
            for p in sorted(directory.rglob("*"))}


def climbing(path: Path) -> str:
    """A link target that leaves the rootfs for a path-string resolver: /../../../../<path>."""
    return "/" + "../" * 8 + str(path).lstrip("/")


def crafted_rootfs(directory: Path, craft) -> Path:
    root = make_rootfs(directory, glibc=True)
    craft(root)
    return root


def run_container(engine: str, world, rootfs: Path, tmp_path: Path, env=(), script: str = PROBE,
                  config: Path | None = None):
    """Run `script` in the crafted rootfs with GPU 0 (by env), through the shim or docker --gpus."""
    work, default_config, daemon = world
    markers = (str(work), str(tmp_path))
    before = mount_table(*markers)
    if engine == "docker":
        image = f"gct-sec-{uuid.uuid4().hex[:8]}:latest"
        docker(daemon, "import", str(rootfs_tar(rootfs, tmp_path / "image.tar")), image)
        result = docker(daemon, "run", "--rm", "--network", "none", "--gpus", '"device=0"',
                        *[f"-e={e}" for e in env], image, "sh", "-c", script, check=False)
        docker(daemon, "rmi", image, check=False)
    else:
        bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", script], env=["NVIDIA_VISIBLE_DEVICES=0", *env],
                             rootfs=rootfs)
        result = run_through_shim(bundle, config or default_config, tmp_path / "state")
    assert mount_table(*markers) == before, "the host's mount table changed"
    assert "Traceback" not in result.stderr
    return result


def started_or_refused(result) -> list[str]:
    """The container's lines if it started; else our one-line error must be why it did not."""
    if result.returncode != 0:
        assert HOOK_ERROR in result.stderr or "error running hook" in result.stderr, result.stderr
        return []
    return result.stdout.splitlines()


# -- image symlinks where the injector creates or mounts files --------------------------------------

def _replace(root: Path, path: str, target: str) -> None:
    entry = root / path.lstrip("/")
    entry.parent.mkdir(parents=True, exist_ok=True)
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    elif entry.exists() or entry.is_symlink():
        entry.unlink()
    os.symlink(target, entry)


SYMLINK_ATTACKS = {
    # the library dir the driver libraries and their links go into
    "library-dir": lambda root, host: _replace(root, LIBDIR, climbing(host)),
    # the firmware dir, as in the published attack
    "firmware-dir": lambda root, host: _replace(root, f"/lib/firmware/nvidia/{VERSION}", climbing(host)),
    # the IPC socket's directory
    "ipc-socket-dir": lambda root, host: _replace(root, "/var/run/nvidia-persistenced", str(host)),
    # a SONAME link already in the image, pointing at a host file
    "soname-link": lambda root, host: _replace(root, f"{LIBDIR}/libcuda.so.1", str(host / "victim")),
    # the ld cache ldconfig rewrites
    "ld-cache": lambda root, host: _replace(root, "/etc/ld.so.cache", climbing(host / "victim")),
    # the CUDA compat dir (never used by this hook: must stay untouched either way)
    "cuda-compat": lambda root, host: _replace(root, "/usr/local/cuda/compat", climbing(host)),
    # the binaries' dir, relative climb
    "bin-dir": lambda root, host: _replace(root, "/usr/bin", "../" * 8 + str(host).lstrip("/")),
}


@pytest.mark.parametrize("engine", ["shim", "docker"])
@pytest.mark.parametrize("attack", sorted(SYMLINK_ATTACKS))
def test_image_symlinks_never_reach_the_host(world, target, tmp_path, engine, attack):
    rootfs = crafted_rootfs(tmp_path / "rootfs", lambda root: SYMLINK_ATTACKS[attack](root, target))
    before = snapshot(target)
    result = run_container(engine, world, rootfs, tmp_path)
    assert snapshot(target) == before, f"the host dir changed: {snapshot(target)}"
    lines = started_or_refused(result)
    if lines:
        # it started: with exactly GPU 0, whatever the links in the image
        assert "/dev/nvidia0" in nodes(lines) and "/dev/nvidia1" not in nodes(lines)


def test_dev_placeholder_link_is_not_followed(world, target, tmp_path):
    """Without the runtime's /dev tmpfs, the image's /dev shows: a /dev/nvidia0 link to a host file
    must neither be followed nor turn the host file into a mount target."""
    rootfs = crafted_rootfs(tmp_path / "rootfs", lambda root: (
        _replace(root, "/dev/nvidia0", str(target / "victim")),
        _replace(root, "/dev/nvidia-caps", climbing(target))))
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", PROBE], env=["NVIDIA_VISIBLE_DEVICES=all"], rootfs=rootfs)
    spec = json.loads((bundle / "config.json").read_text())
    spec["mounts"] = [m for m in spec["mounts"] if m["destination"] != "/dev"]
    (bundle / "config.json").write_text(json.dumps(spec))
    before, table = snapshot(target), mount_table(str(target), str(tmp_path))
    result = run_through_shim(bundle, world[1], tmp_path / "state")
    assert snapshot(target) == before
    assert mount_table(str(target), str(tmp_path)) == table
    assert result.returncode != 0   # the placeholder is a link: refused (ELOOP), never followed
    assert HOOK_ERROR + "cannot bind mount in the container" in result.stderr, result.stderr
    assert "/dev/nvidia0" in result.stderr


# -- the image's environment reaching the hook ------------------------------------------------------

EVIL_C = r"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void pwn(void) {
    int fd = open("MARKER", O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) { write(fd, "preloaded\n", 10); close(fd); }
}
"""


@pytest.mark.parametrize("hook_env", ["hostile", "absent"])
@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_image_environment_never_reaches_the_hook(world, tmp_path, runtime, hook_env):
    """LD_PRELOAD and every PYTHON* knob point at files in the bundle (the hook's cwd) and the rootfs;
    none may run. "hostile": the hook's own env holds them (the worst an engine could pass on);
    "absent": the entry has no env (an engine dropped an empty list), so a runtime may hand the hook
    the image's environment."""
    work, config, _ = world
    marker = tmp_path / "pwned"
    rootfs = make_rootfs(tmp_path / "bundle" / "rootfs", glibc=True)
    for where in (tmp_path / "bundle", rootfs):
        (where / "evil.c").write_text(EVIL_C.replace("MARKER", str(marker)))
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(where / "x.so"), str(where / "evil.c")], check=True)
        pkg = where / "pwn"
        pkg.mkdir()
        payload = f"open({str(marker)!r}, 'a').write('python\\n')\n"
        for module in ("sitecustomize.py", "usercustomize.py", "json.py", "startup.py", "encodings.py"):
            (pkg / module).write_text(payload)
    env = ["NVIDIA_VISIBLE_DEVICES=0", "LD_PRELOAD=/proc/self/cwd/x.so:/proc/self/cwd/rootfs/x.so",
           "LD_LIBRARY_PATH=/proc/self/cwd", "PYTHONPATH=/proc/self/cwd/pwn:/proc/self/cwd/rootfs/pwn",
           "PYTHONHOME=/proc/self/cwd/pwn", "PYTHONSTARTUP=/proc/self/cwd/pwn/startup.py", "PYTHONINSPECT=1",
           "PYTHONUSERBASE=/proc/self/cwd/pwn", "PYTHONWARNINGS=error", "PYTHONBREAKPOINT=os.system",
           f"NVIDIA_CTK_CONFIG_FILE_PATH={config}"]
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", PROBE], env=env, rootfs=Path("rootfs"))
    spec = json.loads((bundle / "config.json").read_text())
    spec["root"]["path"] = "rootfs"
    entry = {"path": str(BIN / "nvidia-container-runtime-hook"), "args": ["nvidia-container-runtime-hook", "prestart"]}
    if hook_env == "hostile":
        entry["env"] = ["PATH=/proc/self/cwd/rootfs/bin:/usr/bin:/bin", *env]
    spec["hooks"] = {"prestart": [entry]}
    (bundle / "config.json").write_text(json.dumps(spec))
    result = run_with_runtime(runtime, bundle, tmp_path / "state")
    assert not marker.exists(), marker.read_text()
    assert "Traceback" not in result.stderr
    if hook_env == "hostile":
        # the launcher kept only NVIDIA_* (the config path) and PATH: the injection worked
        assert result.returncode == 0, result.stderr
        assert "/dev/nvidia0" in nodes(result.stdout.splitlines())
    elif result.returncode != 0 and runtime == "runc":
        # no config path reached the hook: it looked at "/" and said so in one line
        assert HOOK_ERROR in result.stderr, result.stderr


# -- ldconfig from the image ------------------------------------------------------------------------

EVIL_LDCONFIG = "#!/bin/sh\necho ran > /pwned-by-image-ldconfig\necho ran > MARKER\n"


@pytest.mark.parametrize("configured", ["/sbin/ldconfig", "@/sbin/ldconfig"])
def test_image_ldconfig_never_runs(world, tmp_path, configured):
    """A config ldconfig path without '@' names the image's binary: refused unless the admin allowed
    it. With '@' the host's binary runs, never the image's (which here would leave a mark)."""
    work, _, _ = world
    marker = tmp_path / "pwned"

    def craft(root: Path) -> None:
        (root / "sbin/ldconfig").unlink()
        (root / "sbin/ldconfig").write_text(EVIL_LDCONFIG.replace("MARKER", str(marker)))
        (root / "sbin/ldconfig").chmod(0o755)

    rootfs = crafted_rootfs(tmp_path / "rootfs", craft)
    config = write_config(tmp_path / "config.toml", work / "host", extra="")
    config.write_text(config.read_text().replace("[nvidia-container-cli]\n",
                                                 f'[nvidia-container-cli]\nldconfig = "{configured}"\n'))
    result = run_container("shim", world, rootfs, tmp_path, config=config,
                           script="grep -c libcuda.so.1 /etc/ld.so.cache; echo done")
    assert not marker.exists() and not (rootfs / "pwned-by-image-ldconfig").exists()
    if configured.startswith("@"):
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0
        assert HOOK_ERROR + "ldconfig '/sbin/ldconfig' would run a binary from the container image" in result.stderr


# -- mounts leaking back through shared propagation --------------------------------------------------

def test_injected_mounts_never_propagate_through_a_shared_volume(world, tmp_path):
    """The library dir is a volume bind-mounted rshared from a shared host mount: mounting a library
    there would propagate it to the host. The injection is refused (EXDEV) and nothing reaches the host."""
    work, config, _ = world
    volume = tmp_path / "volume"
    volume.mkdir()
    subprocess.run(["mount", "-n", "--bind", str(volume), str(volume)], check=True)
    try:
        subprocess.run(["mount", "-n", "--make-shared", str(volume)], check=True)
        rootfs = make_rootfs(tmp_path / "rootfs", glibc=True)
        bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", "echo STARTED"], env=["NVIDIA_VISIBLE_DEVICES=0"],
                             rootfs=rootfs)
        spec = json.loads((bundle / "config.json").read_text())
        spec["mounts"].append({"destination": LIBDIR, "type": "bind", "source": str(volume),
                               "options": ["rbind", "rw", "rshared"]})
        (bundle / "config.json").write_text(json.dumps(spec))
        before = mount_table(str(volume))
        result = run_through_shim(bundle, config, tmp_path / "state")
        after = mount_table(str(volume))
        listing = sorted(os.listdir(volume))
    finally:
        subprocess.run(["umount", "-n", "-l", str(volume)], check=False)
    assert after == before, "a mount propagated to the host"
    assert result.returncode != 0 and "STARTED" not in result.stdout
    assert HOOK_ERROR in result.stderr and "shared mount" in result.stderr, result.stderr
    # at most empty placeholders were made in the volume; nothing is mounted over them
    assert all(os.path.getsize(volume / name) == 0 for name in listing if (volume / name).is_file())


# -- hostile device ids ----------------------------------------------------------------------------

HOSTILE_IDS = ["../0", "0/../1", "GPU-../../etc", "/dev/nvidia0", "0\x01", "0\n1", "A" * 5000,
               "GPU-" + "a" * 300, "nvidia.com/gpu=../../0"]


@pytest.mark.parametrize("value", HOSTILE_IDS, ids=lambda v: repr(v)[:24])
def test_hostile_device_ids_in_the_environment_are_refused(world, tmp_path, value):
    rootfs = make_rootfs(tmp_path / "rootfs", glibc=True)
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", "echo STARTED"], env=[f"NVIDIA_VISIBLE_DEVICES={value}"],
                         rootfs=rootfs)
    add_hook_entry(bundle, world[1])
    table = mount_table(str(tmp_path))
    result = run_with_runtime("runc", bundle, tmp_path / "state")
    assert mount_table(str(tmp_path)) == table
    assert result.returncode != 0 and "STARTED" not in result.stdout
    assert HOOK_ERROR in result.stderr and "Traceback" not in result.stderr
    error_line = next(line for line in result.stderr.split("\\n") if HOOK_ERROR in line)
    assert len(error_line) < 1024   # quoted and cut, never the whole hostile value


@pytest.mark.parametrize("name", ["../../../etc/passwd", "0/../../1", "..", "0\x7f"])
def test_hostile_device_ids_in_volume_mounts_are_refused(world, tmp_path, name):
    work = world[0]
    config = write_config(tmp_path / "config.toml", work / "host",
                          extra="accept-nvidia-visible-devices-as-volume-mounts = true")
    rootfs = make_rootfs(tmp_path / "rootfs", glibc=True)
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", "echo STARTED"], rootfs=rootfs)
    spec = json.loads((bundle / "config.json").read_text())
    spec["mounts"].append({"destination": f"/var/run/nvidia-container-devices/{name}", "type": "bind",
                           "source": "/dev/null", "options": ["rbind", "ro"]})
    (bundle / "config.json").write_text(json.dumps(spec))
    add_hook_entry(bundle, config)
    table = mount_table(str(tmp_path))
    result = run_with_runtime("runc", bundle, tmp_path / "state")
    assert mount_table(str(tmp_path)) == table
    assert "STARTED" not in result.stdout
    assert result.returncode != 0
    assert "Traceback" not in result.stderr


# -- requests the container is not entitled to -----------------------------------------------------

def test_unprivileged_mig_monitor_is_refused(world, tmp_path):
    rootfs = make_rootfs(tmp_path / "rootfs", glibc=True)
    result = run_container("docker", world, rootfs, tmp_path, env=["NVIDIA_MIG_MONITOR_DEVICES=all"],
                           script="echo STARTED")
    assert result.returncode != 0 and "STARTED" not in result.stdout
    assert HOOK_ERROR + "NVIDIA_MIG_MONITOR_DEVICES is only allowed for privileged containers" in result.stderr


def test_env_request_ignored_when_the_admin_disabled_it(world, tmp_path):
    work = world[0]
    config = write_config(tmp_path / "config.toml", work / "host",
                          extra="accept-nvidia-visible-devices-envvar-when-unprivileged = false")
    rootfs = make_rootfs(tmp_path / "rootfs", glibc=True)
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", PROBE], env=["NVIDIA_VISIBLE_DEVICES=all"], rootfs=rootfs)
    add_hook_entry(bundle, config)
    result = run_with_runtime("runc", bundle, tmp_path / "state")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert nodes(lines) == set() and smi(lines) == []   # started, without any GPU
