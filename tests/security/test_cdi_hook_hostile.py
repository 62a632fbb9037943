"""nvidia-cdi-hook against hostile images (docs/reference.md#attacks): nothing appears, changes or runs on the host.

The installed program (the static launcher) runs as a createContainer hook would: root, state on
stdin, cwd in the rootfs. The "host" is a temp dir next to the rootfs holding a victim file; the image
points its library folder, its /etc, its cache and the links the hook makes at that dir, and sets
LD_PRELOAD / PYTHON* to code that would leave a marker if it ever ran. enable-cuda-compat reads the
image's /usr/local/cuda/compat (links out of the image, a /proc magic link, odd names and types, a
folder too large), and disable-device-node-modification mounts over the image's
/proc/driver/nvidia/params (its folder linking out, a params that is no file, a folder on a mount
shared with the host); those run in a private mount namespace, and nothing may be mounted after but
what the test itself mounted.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.rootfs import make_rootfs
from tests.support.hostile import marker_preload_library, marker_python_files
from tests.support.mountns import mounts_under, run_in_private_mount_ns, tree_listing

# the installed program; GCT_TEST_CDI_HOOK: another build of it (say one with the sanitizers)
HOOK = Path(os.environ.get("GCT_TEST_CDI_HOOK") or Path(sys.executable).parent / "nvidia-cdi-hook")
LIB = "usr/lib/x86_64-linux-gnu"
CUDA = "libcuda.so.550.54.15"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not HOOK.exists() or shutil.which("gcc") is None,
                                reason="needs root, gcc and the installed launcher (make venv)")


@pytest.fixture(scope="module")
def base_rootfs(tmp_path_factory):
    """busybox + glibc, and a real libcuda.so.550.54.15 (SONAME libcuda.so.1) where the runtime would
    have mounted it (ldconfig removes links to missing libraries, so it must be there)."""
    base = tmp_path_factory.mktemp("base")
    root = make_rootfs(base / "rootfs", glibc=True)
    (base / "cuda.c").write_text("int cuInit(unsigned flags) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", root / LIB / CUDA,
                    base / "cuda.c"], check=True)
    return root


@pytest.fixture
def world(tmp_path, base_rootfs):
    """(bundle, rootfs, host dir) with a copy of the base rootfs."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "victim").write_text("host file\n")
    (host / "etc").mkdir()
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    root = bundle / "rootfs"
    shutil.copytree(base_rootfs, root, symlinks=True)
    return bundle, root, host


def run_hook(bundle, args, env=None, cwd=None, timeout=60):
    # crun's createContainer state: the hook works where it is started
    state = {"ociVersion": "1.0.2", "id": "hostile", "status": "created", "pid": 0, "bundle": str(bundle)}
    return subprocess.run([str(HOOK), *args], input=json.dumps(state), capture_output=True, text=True,
                          cwd=str(cwd or bundle / "rootfs"), env=env or {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                          timeout=timeout)


def links_and_cache(folder: str) -> list[str]:
    return ["create-symlinks", "--link", "libcuda.so.550.54.15::" + folder + "/libcuda.so.1",
            "--link", "libcuda.so.1::" + folder + "/libcuda.so", "update-ldcache", "--folder", folder]


@pytest.mark.parametrize("how", ["absolute", "climbing"])
def test_a_symlinked_library_folder_pointing_out(world, how):
    bundle, root, host = world
    # where the runtime's mount of the library lands: the link resolved inside the root
    clamped = root / str(host).lstrip("/")
    clamped.mkdir(parents=True)
    shutil.move(root / LIB / CUDA, clamped / CUDA)
    shutil.rmtree(root / LIB)
    target = str(host) if how == "absolute" else "../../../../../../../../.." + str(host)
    os.symlink(target, root / LIB)
    before = tree_listing(host)
    result = run_hook(bundle, links_and_cache("/" + LIB))
    assert result.returncode == 0, result.stderr
    assert tree_listing(host) == before
    # the links landed inside the rootfs: the folder was followed as the container would, from its root
    assert os.readlink(clamped / "libcuda.so.1") == CUDA
    assert os.readlink(clamped / "libcuda.so") == "libcuda.so.1"


def test_existing_links_pointing_out_are_replaced_not_written_through(world):
    bundle, root, host = world
    os.symlink(str(host / "victim"), root / LIB / "libcuda.so.1")
    os.symlink("../../../../../../../.." + str(host / "victim"), root / LIB / "libcuda.so")
    result = run_hook(bundle, links_and_cache("/" + LIB))
    assert result.returncode == 0, result.stderr
    assert (host / "victim").read_text() == "host file\n"
    assert os.readlink(root / LIB / "libcuda.so.1") == "libcuda.so.550.54.15"
    assert os.readlink(root / LIB / "libcuda.so") == "libcuda.so.1"


@pytest.mark.parametrize("entry", ["etc", "etc/ld.so.cache", "etc/ld.so.conf"])
def test_etc_and_the_cache_pointing_out(world, entry):
    bundle, root, host = world
    victim = host / "etc" if entry == "etc" else host / "victim"
    path = root / entry
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    os.symlink(str(victim), path)
    before = tree_listing(host)
    run_hook(bundle, links_and_cache("/" + LIB))   # may fail: ldconfig finds no /etc inside
    assert tree_listing(host) == before
    assert (host / "victim").read_text() == "host file\n"


@pytest.mark.parametrize("how", ["dir-symlink", "file-symlink", "hard-link"])
def test_the_ld_so_conf_drop_in_never_writes_through(world, how):
    bundle, root, host = world
    conf_dir = root / "etc/ld.so.conf.d"
    shutil.rmtree(conf_dir, ignore_errors=True)
    if how == "dir-symlink":
        os.symlink(str(host / "etc"), conf_dir)
    else:
        conf_dir.mkdir()
        conf = conf_dir / "00-nvidia-cdi-hook.conf"
        os.symlink(str(host / "victim"), conf) if how == "file-symlink" else os.link(host / "victim", conf)
    before = tree_listing(host)
    result = run_hook(bundle, links_and_cache("/" + LIB))
    assert result.returncode == 0, result.stderr
    assert tree_listing(host) == before
    assert (host / "victim").read_text() == "host file\n"
    if how == "dir-symlink":   # it points at nothing inside the root: skipped, with a warning
        assert "warning: cannot write /etc/ld.so.conf.d/00-nvidia-cdi-hook.conf" in result.stderr
    else:                      # the image's entry is replaced, not written through
        assert (conf_dir / "00-nvidia-cdi-hook.conf").read_text().splitlines()[1:] == ["/" + LIB]


@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    """An LD_PRELOAD library and Python start-up files that each leave a marker when they run."""
    d = tmp_path_factory.mktemp("evil")
    markers = d / "markers"
    markers.mkdir()
    marker_preload_library(d, markers)
    py = d / "python"
    py.mkdir()
    marker_python_files(py, markers, ("sitecustomize", "usercustomize", "json", "os", "libcontainer_c", "hook"),
                        marker_prefix="pythonpath_")
    (d / "startup.py").write_text(f"open({str(markers / 'pythonstartup')!r}, 'w').close()\n")
    return d, markers


def test_an_image_environment_runs_nothing(world, evil):
    bundle, root, host = world
    d, markers = evil
    # the same files in the cwd (the rootfs, as under runc) and in the image's own /usr/lib/python3
    for name in ("json", "os", "sitecustomize"):
        shutil.copy(d / "python" / f"{name}.py", root / f"{name}.py")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LD_PRELOAD": str(d / "preload.so"),
           "LD_LIBRARY_PATH": str(d), "PYTHONPATH": str(d / "python"), "PYTHONSTARTUP": str(d / "startup.py"),
           "PYTHONINSPECT": "1", "PYTHONHOME": str(d), "PYTHONUSERBASE": str(d), "PYTHONSAFEPATH": "0",
           "PYTHONWARNINGS": "error", "PYTHONBREAKPOINT": "os.system"}
    result = run_hook(bundle, links_and_cache("/" + LIB), env=env)
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(markers)) == []
    assert os.readlink(root / LIB / "libcuda.so.1") == "libcuda.so.550.54.15"
    # and the marker library does work when it is allowed to load: the test can fail
    subprocess.run(["true"], env={"LD_PRELOAD": str(d / "preload.so")}, check=True)
    assert os.listdir(markers) == ["ld_preload"]
    os.unlink(markers / "ld_preload")


# -- enable-cuda-compat: the image's /usr/local/cuda/compat ---------------------------------------

COMPAT = "usr/local/cuda/compat"


def build_libcuda(path: Path) -> None:
    """A real ELF object with libcuda's soname (ldconfig drops what is not one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.parent / ".libcuda.c"
    source.write_text("int cuda_probe(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", path, source], check=True)
    source.unlink()


def with_compat(folder: str) -> list[str]:
    return links_and_cache(folder) + ["enable-cuda-compat", "--host-driver-version", "550.54.15"]


def first_libcuda(root: Path) -> str:
    """Where ld.so finds libcuda.so.1 in the rootfs: the first entry of that soname in its cache."""
    listing = subprocess.run(["chroot", str(root), "/sbin/ldconfig", "-p"], capture_output=True, text=True,
                             check=True).stdout
    lines = [line for line in listing.splitlines() if line.strip().startswith("libcuda.so.1 ")]
    return lines[0].split("=> ")[1] if lines else ""


@pytest.mark.parametrize("how", ["absolute", "climbing"])
def test_a_compat_folder_pointing_at_a_host_folder_is_read_inside_the_image(world, how):
    """/usr/local/cuda/compat -> a host folder with a newer libcuda: neither read nor scanned there
    (ldconfig would make its soname link libcuda.so.1 in a folder it scans)."""
    bundle, root, host = world
    build_libcuda(host / "compat" / "libcuda.so.999.1.2")
    (root / "usr/local/cuda").mkdir(parents=True)
    target = str(host / "compat") if how == "absolute" else "../../../../../../../../.." + str(host / "compat")
    os.symlink(target, root / COMPAT)
    before = tree_listing(host)
    result = run_hook(bundle, with_compat("/" + LIB))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert tree_listing(host) == before
    assert first_libcuda(root) == "/" + LIB + "/libcuda.so.1"
    assert "/usr/local/cuda/compat" not in (root / "etc/ld.so.conf.d/00-nvidia-cdi-hook.conf").read_text()


def test_a_compat_folder_through_a_magic_link_is_refused(world):
    """/usr/local/cuda/compat -> /proc/self/root/<host folder>, with the container's procfs mounted
    as the runtime mounts it: the resolver refuses /proc magic links, so the host's newer libcuda is
    never taken."""
    bundle, root, host = world
    build_libcuda(host / "compat" / "libcuda.so.999.1.2")
    (root / "usr/local/cuda").mkdir(parents=True)
    os.symlink("/proc/self/root" + str(host / "compat"), root / COMPAT)
    before = tree_listing(host)

    def run():
        subprocess.run(["mount", "-n", "-t", "proc", "proc", str(root / "proc")], check=True)
        return run_hook(bundle, with_compat("/" + LIB))

    result = run_in_private_mount_ns(run)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert tree_listing(host) == before
    assert first_libcuda(root) == "/" + LIB + "/libcuda.so.1"
    assert "/usr/local/cuda/compat" not in (root / "etc/ld.so.conf.d/00-nvidia-cdi-hook.conf").read_text()


def test_odd_entries_in_the_compat_folder_are_no_version(world):
    """Names and types an image may put there: none is a libcuda.so.<major>.<...> for a newer driver,
    nothing blocks (a FIFO is never opened) and nothing is said."""
    bundle, root, host = world
    compat = root / COMPAT
    compat.mkdir(parents=True)
    os.mkfifo(compat / "libcuda.so.999.1")                       # not a file
    (compat / "libcuda.so.998.1").mkdir()                        # not a file
    for name in ("libcuda.so." + "9" * 40 + ".1",                # beyond any int: no version
                 "libcuda.so.9999999.1",                         # more digits than a major has
                 "libcuda.so.-999.1", "libcuda.so.+999.1", "libcuda.so. 999.1", "libcuda.so.999",
                 "libcuda.so.\u0669\u0669\u0669.1",               # Arabic-Indic digits
                 "libcuda.so.999\n.1"):
        (compat / name).write_text("")
    result = run_hook(bundle, with_compat("/" + LIB), timeout=30)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert first_libcuda(root) == "/" + LIB + "/libcuda.so.1"


def test_a_compat_folder_too_large_to_read_is_a_warning(world):
    bundle, root, host = world
    compat = root / COMPAT
    compat.mkdir(parents=True)
    for i in range(65537):
        os.mknod(compat / f"f{i}")
    result = run_hook(bundle, with_compat("/" + LIB))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ("nvidia-cdi-hook: warning: not using the CUDA compat libraries in "
                             "/usr/local/cuda/compat: Argument list too long\n")
    assert first_libcuda(root) == "/" + LIB + "/libcuda.so.1"


# -- disable-device-node-modification: the container's /proc/driver/nvidia/params ------------------

PARAMS = "Mode: 1\nModifyDeviceFiles: 1\n"


@pytest.fixture
def params_world(world, tmp_path):
    """world plus the driver's params (saying 1) and the hook's argv for them."""
    bundle, root, host = world
    (tmp_path / "driver-params").write_text(PARAMS)
    (host / "nvidia").mkdir()
    (host / "nvidia" / "params").write_text("host params\n")
    args = ["disable-device-node-modification", "--params-file", str(tmp_path / "driver-params")]
    return bundle, root, host, args


def hook_in_namespace(bundle, args, setup=None):
    """The hook in a private mount namespace (a container's), after setup(); then every mount at or
    below the bundle and the host dir, as that namespace sees them."""
    def run():
        if setup:
            setup()
        result = run_hook(bundle, args)
        return result, mounts_under(bundle.parent)
    return run_in_private_mount_ns(run)


@pytest.mark.parametrize("how", ["absolute", "climbing"])
def test_a_proc_driver_folder_pointing_at_a_host_folder_is_not_covered(params_world, how):
    bundle, root, host, args = params_world
    (root / "proc/driver").mkdir(parents=True, exist_ok=True)
    target = str(host / "nvidia") if how == "absolute" else "../../../../../../../../.." + str(host / "nvidia")
    os.symlink(target, root / "proc/driver/nvidia")
    result, mounts = hook_in_namespace(bundle, args)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert mounts == []
    assert (host / "nvidia" / "params").read_text() == "host params\n"


@pytest.mark.parametrize("kind", ["fifo", "directory", "link to a host file", "link within the image"])
def test_a_params_entry_that_is_no_file_is_left_alone(params_world, kind):
    bundle, root, host, args = params_world
    folder = root / "proc/driver/nvidia"
    folder.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(folder / "params")
    elif kind == "directory":
        (folder / "params").mkdir()
    elif kind == "link to a host file":
        os.symlink(str(host / "nvidia" / "params"), folder / "params")
    else:
        (folder / "real").write_text("ModifyDeviceFiles: 1\n")
        os.symlink("real", folder / "params")
    result, mounts = hook_in_namespace(bundle, args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "nvidia-cdi-hook: warning: not covering /proc/driver/nvidia/params: it is not the driver's file\n"
    assert mounts == []
    assert (host / "nvidia" / "params").read_text() == "host params\n"


def test_a_proc_driver_folder_on_a_mount_shared_with_the_host_is_refused(params_world):
    """/proc/driver/nvidia is a volume the runtime mounted rshared with a host folder: a tmpfs or a
    file mounted there would appear in the host folder too. The hook refuses, nothing reaches the host."""
    bundle, root, host, args = params_world
    folder = root / "proc/driver/nvidia"
    folder.mkdir(parents=True)
    shared = host / "nvidia"

    def setup():
        subprocess.run(["mount", "-n", "--bind", str(shared), str(shared)], check=True)
        subprocess.run(["mount", "-n", "--make-shared", str(shared)], check=True)
        subprocess.run(["mount", "-n", "--bind", str(shared), str(folder)], check=True)   # a peer of the host's

    result, mounts = hook_in_namespace(bundle, args, setup)
    assert result.returncode == 1, result
    assert result.stderr.startswith("nvidia-cdi-hook: error: cannot cover /proc/driver/nvidia/params"), result.stderr
    assert sorted(point for point, _, _ in mounts) == [str(folder), str(shared)]
    assert (host / "nvidia" / "params").read_text() == "host params\n"
