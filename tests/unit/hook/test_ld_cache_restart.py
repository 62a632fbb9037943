"""The prestart hook's ld cache on a restarted container (the same rootfs started again): ldconfig runs
at every start (libcontainer_c's gct_update_ld_cache, nvidia-cdi-hook's too), so entries of the
image's own libraries that went stale are refreshed, and /etc/ld.so.cache is left as it is (same
inode, same mtime) when what ldconfig built is the same."""
from __future__ import annotations

import os
import subprocess

import pytest

from cdi.selection import Selection
from hook.inject import Target, inject, plan_injection
from tests.unit.hook.conftest import needs_root_and_ldconfig
from tests.support.mountns import run_in_private_mount_ns

LIBDIR = "/usr/lib/x86_64-linux-gnu"
pytestmark = needs_root_and_ldconfig


def build_library(path, soname: str) -> None:
    source = path.parent / f"{path.name}.c"
    source.write_text(f"int probe_{abs(hash(soname))}(void) {{ return 1; }}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", path, source], check=True)
    source.unlink()


def plan_for(sim_host):
    host, inventory = sim_host
    return plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), {"compute", "utility"})


def _start(plan, root):
    inject(plan, Target(str(root), None, cgroups=False))
    return subprocess.run(["chroot", str(root), "/sbin/ldconfig", "-p"], capture_output=True, text=True,
                          check=True).stdout


def start(plan, root) -> str:
    """One container start on `root` (its own mount namespace, as each start has): what the
    container's loader cache then lists."""
    return run_in_private_mount_ns(_start, plan, root)


def written(root):
    """The cache file's identity: an inode number can be reused by the next file, with its mtime a
    new file shows."""
    st = os.stat(root / "etc/ld.so.cache")
    return st.st_ino, st.st_mtime_ns


def test_a_restart_refreshes_a_stale_entry_of_the_image(sim_host, rootfs):
    """The container replaced a library of its own without running ldconfig: the next start's cache
    lists the new one, not the file that is gone."""
    (rootfs / "opt/image").mkdir(parents=True)
    with open(rootfs / "etc/ld.so.conf", "a") as f:
        f.write("/opt/image\n")
    build_library(rootfs / "opt/image/libimage.so.1", "libimage.so.1")
    plan = plan_for(sim_host)
    first = start(plan, rootfs)
    assert "libimage.so.1 (libc6,x86-64) => /opt/image/libimage.so.1" in first
    assert f"libcuda.so.1 (libc6,x86-64) => {LIBDIR}/libcuda.so.1" in first
    (rootfs / "opt/image/libimage.so.1").unlink()
    build_library(rootfs / "opt/image/libimage.so.2", "libimage.so.2")
    again = start(plan, rootfs)
    assert "libimage.so.2 (libc6,x86-64) => /opt/image/libimage.so.2" in again
    assert "libimage.so.1 " not in again
    assert f"libcuda.so.1 (libc6,x86-64) => {LIBDIR}/libcuda.so.1" in again


@pytest.mark.parametrize("image", ["plain", "own-libcuda", "cuda-compat"])
def test_a_restart_with_nothing_changed_leaves_the_cache_file_alone(sim_host, rootfs, image):
    """Whatever the image holds (its own libcuda.so.1 in a folder of its ld.so.conf, CUDA
    forward-compat libraries), a cache that comes out the same is not written again."""
    if image == "own-libcuda":
        (rootfs / "opt/image").mkdir(parents=True)
        build_library(rootfs / "opt/image/libcuda.so.1", "libcuda.so.1")
        with open(rootfs / "etc/ld.so.conf", "a") as f:
            f.write("/opt/image\n")
    elif image == "cuda-compat":
        (rootfs / "usr/local/cuda/compat").mkdir(parents=True)
        build_library(rootfs / "usr/local/cuda/compat/libcuda.so.999.1.2", "libcuda.so.1")
    plan = plan_for(sim_host)
    image_cache = written(rootfs)
    first = start(plan, rootfs)
    after_first = written(rootfs)
    assert after_first != image_cache              # the first start wrote the driver's entries
    assert start(plan, rootfs) == first
    assert written(rootfs) == after_first          # the second wrote nothing
    assert not [p for p in os.listdir(rootfs / "etc") if p.startswith(".")]   # no temp file left
