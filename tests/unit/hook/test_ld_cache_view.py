"""The prestart hook's ld cache goes where the container sees it: a live container's mount namespace
may have something mounted over a directory of its rootfs (a volume over /etc), which the runtime's
namespace, where the hook runs, does not see. ldconfig reads the container's view (its sandbox joins
that namespace), and the cache and the ld.so.conf.d drop-in are written through the same view
(the root opened as /proc/<pid>/root + rootfs), never under the mount where the container cannot
see them.

The container's init is stood in for by a process in a private mount namespace of its own with a
copy of the image's /etc bind-mounted over <rootfs>/etc, as a volume would be."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from cdi.selection import Selection
from hook.inject import Target, inject, plan_injection
from libcontainer_c.errors import ContainerFsError
from libcontainer_c.ldconfig import LD_SO_CONF_PATH, run_ldconfig
from libcontainer_c.rootfs import Rootfs
from tests.unit.hook.conftest import needs_root_and_ldconfig
from tests.support.mountns import process_in_mount_ns, tree_listing

LIBDIR = "/usr/lib/x86_64-linux-gnu"
pytestmark = needs_root_and_ldconfig


@pytest.fixture
def volume(tmp_path, rootfs):
    """The host directory mounted over the container's /etc: a copy of the image's /etc."""
    volume = tmp_path / "volume"
    shutil.copytree(rootfs / "etc", volume, symlinks=True)
    return volume


@pytest.fixture
def container_init(rootfs, volume):
    """The container's init: its own private mount namespace with the volume over <rootfs>/etc."""
    with process_in_mount_ns(binds=[(volume, rootfs / "etc")]) as pid:
        yield pid


def listed(etc) -> str:
    """What the loader cache in the directory `etc` lists (read by the host's ldconfig)."""
    return subprocess.run(["/sbin/ldconfig", "-p", "-C", str(etc / "ld.so.cache")], capture_output=True,
                          text=True, check=True).stdout


def test_the_prestart_hook_writes_the_cache_and_drop_in_through_the_containers_view(
        sim_host, rootfs, volume, container_init):
    host, inventory = sim_host
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), {"compute", "utility"})
    under_the_mount = tree_listing(rootfs / "etc")
    image_cache = (rootfs / "etc/ld.so.cache").read_bytes()
    inject(plan, Target(str(rootfs), container_init, cgroups=False))
    # the container's /etc (the volume) got the driver's libraries and the drop-in
    assert f"libcuda.so.1 (libc6,x86-64) => {LIBDIR}/libcuda.so.1" in listed(volume)
    assert (volume / os.path.relpath(LD_SO_CONF_PATH, "/etc")).read_text().strip()
    in_container = f"/proc/{container_init}/root{rootfs}/etc/ld.so.cache"
    assert open(in_container, "rb").read() == (volume / "ld.so.cache").read_bytes()
    # nothing landed underneath the mount, where the container cannot see it
    assert tree_listing(rootfs / "etc") == under_the_mount
    assert (rootfs / "etc/ld.so.cache").read_bytes() == image_cache


def test_run_ldconfig_with_a_pid_installs_in_the_containers_view(rootfs, volume, container_init):
    under_the_mount = tree_listing(rootfs / "etc")
    image_cache = (rootfs / "etc/ld.so.cache").read_bytes()
    os.unlink(volume / "ld.so.cache")
    assert run_ldconfig(rootfs, [LIBDIR], pid=container_init).returncode == 0
    assert "libc.so.6" in listed(volume)
    assert tree_listing(rootfs / "etc") == under_the_mount
    assert (rootfs / "etc/ld.so.cache").read_bytes() == image_cache


def test_run_ldconfig_takes_the_callers_open_root(rootfs, volume, container_init):
    os.unlink(volume / "ld.so.cache")
    # a folder only the container's ld.so.conf (the volume's) lists: ldconfig must read that one
    (rootfs / "opt/vendor").mkdir(parents=True)
    shutil.copy(rootfs / "lib/x86_64-linux-gnu/libc.so.6", rootfs / "opt/vendor/libc.so.6")
    with open(volume / "ld.so.conf", "a") as conf:
        conf.write("/opt/vendor\n")
    with Rootfs(rootfs, pid=container_init) as root:
        assert run_ldconfig(root, [LIBDIR]).returncode == 0   # the root brings its pid: ldconfig runs there
    assert "=> /opt/vendor/libc.so.6" in listed(volume)
    with Rootfs(rootfs) as root, pytest.raises(ValueError):
        run_ldconfig(root, [LIBDIR], pid=container_init)   # a root of another view than the pid's


def test_a_root_of_the_containers_view_resolves_inside_its_root(rootfs, volume, container_init):
    """The rootfs path is resolved inside the init's root (the root of its mount namespace before
    pivot_root): the view the container has, the volume over /etc included; a pid that is gone is a
    clear error."""
    (volume / "only-in-the-volume").write_text("x")
    with Rootfs(rootfs, pid=container_init) as root:
        assert root.exists("/etc/only-in-the-volume")
    with Rootfs(rootfs) as root:
        assert not root.exists("/etc/only-in-the-volume")
    gone = subprocess.Popen(["true"])
    gone.wait()
    with pytest.raises(ContainerFsError) as info:
        Rootfs(rootfs, pid=gone.pid)
    assert info.value.errno == 2 and f"/proc/{gone.pid}/root" in str(info.value)


def test_the_images_own_file_at_a_link_is_judged_in_the_containers_view(sim_host, rootfs, tmp_path):
    """A volume over the library folder holding the image's own libcuda.so: the prestart hook sees it
    where the container does, keeps it with a warning and injects the rest (judged in the host's view,
    where the folder under the volume has no such file, the link was planned and the batch, which
    works in the container's namespace, failed the injection on it)."""
    host, inventory = sim_host
    libs = tmp_path / "lib-volume"
    shutil.copytree(rootfs / LIBDIR.lstrip("/"), libs, symlinks=True)
    (libs / "libcuda.so").write_text("the image's own")
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), {"compute", "utility"})
    warnings = []
    with process_in_mount_ns(binds=[(libs, rootfs / LIBDIR.lstrip("/"))]) as pid:
        inject(plan, Target(str(rootfs), pid, cgroups=False), warn=warnings.append)
        in_container = f"/proc/{pid}/root{rootfs}{LIBDIR}"
        assert open(f"{in_container}/libcuda.so").read() == "the image's own"
        assert os.readlink(f"{in_container}/libcuda.so.1") == "libcuda.so.550.54.15"
    assert any("libcuda.so" in w and "its own file" in w for w in warnings), warnings
    assert not (rootfs / LIBDIR.lstrip("/") / "libcuda.so").exists()   # nothing under the volume
