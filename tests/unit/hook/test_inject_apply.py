"""hook.inject.inject into a real rootfs, in a private mount namespace (pid None: the batch child and the
ldconfig sandbox work in this namespace, as they would in a container's): the mounts and their flags,
the links, the ld cache, the /proc/driver/nvidia view where that directory exists, and the rollback
when a later step fails."""
from __future__ import annotations

import os
import subprocess

import pytest

from cdi.selection import Selection
from hook.inject import InjectionError, Target, inject, plan_injection
from tests.support.mountns import run_in_private_mount_ns

LIBDIR = "/usr/lib/x86_64-linux-gnu"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")


def mounts_under(root) -> dict[str, str]:
    """mount point (relative to root) -> per-mount options, for mounts below root."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4].startswith(str(root) + "/"):
                found[fields[4][len(str(root)):]] = fields[5]
    return found


def _apply(plan, root, warnings):
    try:
        injected = inject(plan, Target(str(root), None, cgroups=False), warn=warnings.append)
    except InjectionError as e:
        return "error", str(e), mounts_under(root)
    cache = subprocess.run(["chroot", str(root), "/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    return injected.nodes, injected.links, mounts_under(root), cache


def test_injection_mounts_links_and_ld_cache(sim_host, rootfs):
    host, inventory = sim_host
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), {"compute", "utility"})
    injected_nodes, links, mounts, cache = run_in_private_mount_ns(_apply, plan, rootfs, [])
    assert set(injected_nodes) == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    for node in injected_nodes:
        flags = mounts[node].split(",")
        assert {"ro", "nosuid", "noexec"} <= set(flags) and "nodev" not in flags
    library = f"{LIBDIR}/libcuda.so.550.54.15"
    assert "noexec" not in mounts[library].split(",") and "ro" in mounts[library].split(",")
    assert "noexec" not in mounts["/usr/bin/nvidia-smi"].split(",")
    assert f"{LIBDIR}/libcuda.so.1" in links
    assert f"libcuda.so.1 (libc6,x86-64) => {LIBDIR}/libcuda.so.1" in cache
    # nothing was left in the host's namespace
    assert mounts_under(rootfs) == {}
    assert os.readlink(rootfs / LIBDIR.lstrip("/") / "libcuda.so.1") == "libcuda.so.550.54.15"


def test_newer_cuda_compat_libraries_of_the_image_go_first_in_the_ld_cache(sim_host, rootfs, tmp_path):
    """enable-cuda-compat in the edits' hook entry, done live as nvidia-cdi-hook does it: the image's
    /usr/local/cuda/compat libcuda (for a driver 999) before the injected driver's (550)."""
    host, inventory = sim_host
    compat = rootfs / "usr/local/cuda/compat"
    compat.mkdir(parents=True)
    (tmp_path / "c.c").write_text("int compat_probe(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", compat / "libcuda.so.999.1.2",
                    tmp_path / "c.c"], check=True)
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), {"compute", "utility"})
    assert plan.host_driver_version == inventory.driver_version
    _, _, _, cache = run_in_private_mount_ns(_apply, plan, rootfs, [])
    entries = [line.split("=> ")[1] for line in cache.splitlines() if line.strip().startswith("libcuda.so.1 ")]
    assert entries == ["/usr/local/cuda/compat/libcuda.so.1", f"{LIBDIR}/libcuda.so.1"]


def _proc_view(plan, root):
    inject(plan, Target(str(root), None, cgroups=False))
    base = root / "proc/driver/nvidia"
    listing = sorted(str(p.relative_to(base)) for p in base.rglob("*"))
    params = (base / "params").read_text()
    try:
        (base / "version").write_text("x")
        writable = True
    except OSError:
        writable = False
    return listing, params, writable, mounts_under(root).get("/proc/driver/nvidia", "")


def test_proc_view_shows_only_the_injected_gpu_where_the_directory_exists(sim_host, rootfs):
    host, inventory = sim_host
    (rootfs / "proc/driver/nvidia/gpus/0000:07:00.0").mkdir(parents=True)   # as a driver's procfs would
    (rootfs / "proc/driver/nvidia/gpus/0000:0f:00.0").mkdir(parents=True)
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[1],)), {"utility"})
    plan.update_ldcache = False
    listing, params, writable, options = run_in_private_mount_ns(_proc_view, plan, rootfs)
    assert "gpus/0000:0f:00.0/information" in listing
    assert not any("0000:07:00.0" in name for name in listing)
    assert {"version", "params", "registry"} <= set(listing)
    assert "ModifyDeviceFiles: 0" in params and "ModifyDeviceFiles: 1" not in params
    assert not writable and options.startswith("ro")


def test_no_proc_view_without_the_directory(sim_host, rootfs):
    host, inventory = sim_host
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), {"utility"})
    plan.update_ldcache = False
    run_in_private_mount_ns(lambda: inject(plan, Target(str(rootfs), None, cgroups=False)) and None)
    assert not (rootfs / "proc/driver").exists()


def test_a_failing_ldconfig_undoes_every_mount(sim_host, rootfs):
    host, inventory = sim_host
    (rootfs / "proc/driver/nvidia").mkdir(parents=True)
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), {"compute", "utility"},
                          ldconfig="/nonexistent/ldconfig")
    outcome, message, mounts = run_in_private_mount_ns(_apply, plan, rootfs, [])
    assert outcome == "error"
    assert "ldconfig failed" in message and "/nonexistent/ldconfig" in message
    assert mounts == {}   # the device nodes, driver files and the /proc tmpfs are all gone again


def test_a_device_node_that_is_not_the_expected_one_stops_everything(sim_host, rootfs):
    host, inventory = sim_host
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), {"utility"})
    plan.device_nodes[-1].host_path = "/dev/null"      # char 1:3, not 195:0
    outcome, message, mounts = run_in_private_mount_ns(_apply, plan, rootfs, [])
    assert outcome == "error"
    assert "device node is not the expected one: want char 195:0, found char 1:3" in message
    assert "/dev/null" in message and mounts == {}


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_the_images_own_file_at_a_link_is_kept(sim_host, rootfs, kind):
    host, inventory = sim_host
    own = rootfs / LIBDIR.lstrip("/") / "libcuda.so"
    if kind == "directory":
        own.mkdir()
        own = own / "inside"
    own.write_text("the image's own")
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), {"compute"})
    warnings = []

    def apply():
        _apply(plan, rootfs, warnings)
        return warnings

    warnings = run_in_private_mount_ns(apply)
    assert own.read_text() == "the image's own"
    assert any("libcuda.so" in w and "its own file" in w for w in warnings)


def test_target_needs_an_absolute_rootfs():
    with pytest.raises(InjectionError, match="absolute path"):
        Target("relative/rootfs")


def test_a_device_node_already_in_the_rootfs_is_mounted_over(sim_host, rootfs):
    """A privileged container's /dev holds the host's own nodes: the injected node goes on top."""
    import stat as stat_module

    host, inventory = sim_host
    os.mknod(rootfs / "dev/nvidia0", stat_module.S_IFCHR | 0o600, os.makedev(195, 0))
    os.mkfifo(rootfs / "dev/nvidiactl")
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), {"utility"})
    plan.update_ldcache = False
    plan.edits.device_nodes = [n for n in plan.device_nodes if n.path == "/dev/nvidia0"]
    nodes, _, mounts, _ = run_in_private_mount_ns(_apply, plan, rootfs, [])
    assert nodes == ["/dev/nvidia0"] and "/dev/nvidia0" in mounts
    # any other kind of file is still no mount target
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), {"utility"})
    plan.update_ldcache = False
    outcome, message, mounts = run_in_private_mount_ns(_apply, plan, rootfs, [])
    assert outcome == "error" and "/dev/nvidiactl" in message and "File exists" in message and mounts == {}
