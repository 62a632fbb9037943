"""hook.container_ld_cache: the sandboxed ldconfig is skipped only when the container's own ld.so.cache
already lists exactly the paths the injection gives each driver soname (a restarted container's
rootfs), and runs whenever anything else is there; the image's file is read without following a link
or opening anything but a regular file."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import libcontainer_c.ldconfig as ldconfig_module
from cdi.discover import EditsBuilder
from cdi.record import replace
from cdi.selection import Selection
from hook.container_ld_cache import lists_exactly
from hook.inject import Target, _ld_entries, inject, plan_injection
from libcontainer_c.rootfs import Rootfs
from tests.e2e.rootfs import make_rootfs
from tests.support.mountns import run_in_private_mount_ns

LIBDIR = "/usr/lib/x86_64-linux-gnu"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")


@pytest.fixture
def rootfs(tmp_path):
    return make_rootfs(tmp_path / "rootfs", glibc=True)


def _start(plan, root):
    """One container start on `root` (its own mount namespace, as each start of a container has):
    how many times ldconfig ran, and what the container's loader cache then says."""
    runs = []
    real = ldconfig_module.run_ldconfig

    def counting(*args, **kwargs):
        runs.append(args)
        return real(*args, **kwargs)
    ldconfig_module.run_ldconfig = counting
    inject(plan, Target(str(root), None, cgroups=False))
    cache = subprocess.run(["chroot", str(root), "/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    return len(runs), cache


def start(plan, root):
    return run_in_private_mount_ns(_start, plan, root)


def plan_for(sim_host, capabilities):
    host, inventory = sim_host
    return plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), capabilities)


def test_a_restarted_container_does_not_run_ldconfig_again(sim_host, rootfs):
    plan = plan_for(sim_host, {"compute", "utility"})
    assert plan.ld_entries["libcuda.so.1"] == [f"{LIBDIR}/libcuda.so.1"]
    assert start(plan, rootfs)[0] == 1              # a new rootfs: the image's cache lacks the driver
    runs, cache = start(plan, rootfs)
    assert runs == 0
    assert f"libcuda.so.1 (libc6,x86-64) => {LIBDIR}/libcuda.so.1" in cache
    assert f"libnvidia-ml.so.1 (libc6,x86-64) => {LIBDIR}/libnvidia-ml.so.1" in cache


def test_a_library_the_cache_lacks_runs_ldconfig(sim_host, rootfs):
    start(plan_for(sim_host, {"utility"}), rootfs)
    runs, cache = start(plan_for(sim_host, {"compute", "utility"}), rootfs)   # libcuda is new
    assert runs == 1 and f"{LIBDIR}/libcuda.so.1" in cache


def test_another_entry_for_a_driver_soname_runs_ldconfig_every_time(sim_host, rootfs, tmp_path):
    """The image has its own libcuda.so.1 in a folder of its ld.so.conf: which one the loader takes
    is ldconfig's to decide, at every start."""
    (tmp_path / "c.c").write_text("int image_probe(void) { return 1; }\n")
    (rootfs / "opt/image").mkdir(parents=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", rootfs / "opt/image/libcuda.so.1",
                    tmp_path / "c.c"], check=True)
    with open(rootfs / "etc/ld.so.conf", "a") as f:
        f.write("/opt/image\n")
    plan = plan_for(sim_host, {"compute", "utility"})
    assert [start(plan, rootfs)[0] for _ in range(2)] == [1, 1]


def test_the_image_s_cuda_compat_folder_runs_ldconfig_every_time(sim_host, rootfs, tmp_path):
    compat = rootfs / "usr/local/cuda/compat"
    compat.mkdir(parents=True)
    (tmp_path / "c.c").write_text("int compat_probe(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", compat / "libcuda.so.999.1.2",
                    tmp_path / "c.c"], check=True)
    plan = plan_for(sim_host, {"compute", "utility"})
    assert [start(plan, rootfs)[0] for _ in range(2)] == [1, 1]


def test_a_library_without_a_soname_leaves_no_rule(sim_host):
    """What ldconfig lists for a library without a DT_SONAME is not known here: ldconfig always runs."""
    host, inventory = sim_host
    libraries = EditsBuilder(host, inventory, {"utility"}).driver_files.libraries
    assert _ld_entries(libraries) == plan_for(sim_host, {"utility"}).ld_entries
    assert _ld_entries([*libraries, replace(libraries[0], soname=None)]) is None


# -- reading the image's file ----------------------------------------------------------------------

def cache_of(rootfs):
    return rootfs / "etc/ld.so.cache"


def listed(rootfs, entries):
    with Rootfs(str(rootfs)) as root:
        return lists_exactly(root, entries)


ENTRIES = {"libc.so.6": ["/lib/x86_64-linux-gnu/libc.so.6"]}


def test_the_image_cache_is_read_as_ldconfig_wrote_it(rootfs):
    assert listed(rootfs, ENTRIES)
    assert not listed(rootfs, {"libc.so.6": ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/libc.so.6"]})
    assert not listed(rootfs, dict(ENTRIES, **{"libcuda.so.1": [f"{LIBDIR}/libcuda.so.1"]}))
    assert not listed(rootfs, {})


def test_a_link_a_fifo_garbage_or_nothing_there_is_not_a_current_cache(rootfs, tmp_path):
    cache = cache_of(rootfs)
    shutil.copy(cache, tmp_path / "good.cache")
    os.rename(cache, rootfs / "etc/real.cache")
    os.symlink("real.cache", cache)                 # the same content, behind a link
    assert not listed(rootfs, ENTRIES)
    os.unlink(cache)
    os.mkfifo(cache)                                # must not block the hook
    assert not listed(rootfs, ENTRIES)
    os.unlink(cache)
    cache.write_bytes(b"glibc-ld.so.cache1.1" + b"\xff" * 100)
    assert not listed(rootfs, ENTRIES)
    os.unlink(cache)
    assert not listed(rootfs, ENTRIES)
    shutil.copy(tmp_path / "good.cache", cache)     # the control: the file itself is fine
    assert listed(rootfs, ENTRIES)


def test_a_cache_over_the_limit_is_not_read(rootfs, monkeypatch):
    import hook.container_ld_cache as module

    monkeypatch.setattr(module, "MAX_BYTES", cache_of(rootfs).stat().st_size - 1)
    assert not listed(rootfs, ENTRIES)
