"""nvidia-cdi-hook against hostile images (REFERENCE §6): nothing appears, changes or runs on the host.

The installed program (the static launcher) runs as a createContainer hook would: root, state on
stdin, cwd in the rootfs. The "host" is a temp dir next to the rootfs holding a victim file; the image
points its library folder, its /etc, its cache and the links the hook makes at that dir, and sets
LD_PRELOAD / PYTHON* to code that would leave a marker if it ever ran.
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
from tests.support.mountns import tree_listing

HOOK = Path(sys.executable).parent / "nvidia-cdi-hook"
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


def run_hook(bundle, args, env=None, cwd=None):
    state = {"ociVersion": "1.0.2", "id": "hostile", "status": "creating", "pid": 1, "bundle": str(bundle)}
    return subprocess.run([str(HOOK), *args], input=json.dumps(state), capture_output=True, text=True,
                          cwd=str(cwd or bundle / "rootfs"), env=env or {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                          timeout=60)


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
