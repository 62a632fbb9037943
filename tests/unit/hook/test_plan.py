"""hook.inject.plan_injection: the edits of cdi.discover for a selection, plus MIG config/monitor and
IMEX channel nodes, the links and folders of the nvidia-cdi-hook entry, the /proc view and the cgroup
rules; and the mount option mapping. On a simulated host, without NVML (inventory from its marker)."""
from __future__ import annotations

import os
import stat

import pytest

from cdi.discover import build_edits
from cdi.errors import RequestError
from cdi.selection import Selection
from hook.inject import InjectionError, mount_options, plan_injection
from libcontainer_c.rootfs import NOEXEC, NODEV, NOSUID, RDONLY

LIBDIR = "/usr/lib/x86_64-linux-gnu"


def test_plan_applies_exactly_the_edits_discovery_builds(sim_host):
    host, inventory = sim_host
    selection = Selection(gpus=(inventory.gpus[0],))
    plan = plan_injection(host, inventory, selection, {"compute", "utility"})
    expected = build_edits(host, inventory, {"compute", "utility"}, selection)
    assert [n.path for n in plan.device_nodes] == [n.path for n in expected.device_nodes]
    assert [(m.host_path, m.container_path) for m in plan.mounts] == \
        [(m.host_path, m.container_path) for m in expected.mounts]
    assert {n.path for n in plan.device_nodes} == {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                                   "/dev/nvidia0"}
    assert ("libcuda.so.1", f"{LIBDIR}/libcuda.so") in plan.links
    assert plan.folders == [LIBDIR] and plan.update_ldcache
    assert plan.ldconfig == "/sbin/ldconfig"


def test_mig_device_plan_has_parent_and_caps_and_proc_files(sim_host):
    host, inventory = sim_host
    mig = inventory.gpus[1].mig_devices[0]
    plan = plan_injection(host, inventory, Selection(mig_devices=(mig,)), {"utility"})
    paths = {n.path for n in plan.device_nodes}
    assert {"/dev/nvidia1", f"/dev/nvidia-caps/nvidia-cap{mig.gi_cap_minor}",
            f"/dev/nvidia-caps/nvidia-cap{mig.ci_cap_minor}", "/dev/nvidiactl"} == paths
    files = dict(plan.proc_view.files)
    assert f"capabilities/gpu1/mig/gi{mig.gi}/access" in files
    assert f"capabilities/gpu1/mig/gi{mig.gi}/ci{mig.ci}/access" in files
    assert "gpus/0000:0f:00.0/information" in files and "gpus/0000:07:00.0/information" not in files
    other = inventory.gpus[1].mig_devices[1]
    assert not any(f"gi{other.gi}" in name for name in files)


def test_device_rules_are_read_write_never_mknod(sim_host):
    host, inventory = sim_host
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[1],)), {"utility"})
    rules = {str(rule) for rule in plan.device_rules()}
    assert rules == {"c 195:1 rw", "c 195:255 rw"}


def test_utility_only_has_no_uvm_and_no_cuda(sim_host):
    host, inventory = sim_host
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[0],)), {"utility"})
    assert "/dev/nvidia-uvm" not in {n.path for n in plan.device_nodes}
    assert not any("libcuda" in m.container_path for m in plan.mounts)


def test_mig_config_and_monitor_add_their_capability_nodes(sim_host):
    host, inventory = sim_host
    plan = plan_injection(host, inventory, Selection(gpus=(inventory.gpus[1],)), {"utility"},
                          mig_config=("all",), mig_monitor=("1",))
    paths = {n.path for n in plan.device_nodes}
    assert {"/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"} <= paths
    files = dict(plan.proc_view.files)
    assert "capabilities/mig/config" in files and "capabilities/mig/monitor" in files


def test_mig_config_naming_an_unknown_gpu_is_an_error(sim_host):
    host, inventory = sim_host
    with pytest.raises(RequestError, match="unknown device id '5'"):
        plan_injection(host, inventory, Selection(), {"utility"}, mig_config=("5",))


def test_imex_channels(sim_host, tmp_path):
    host, inventory = sim_host
    channels = host / "dev/nvidia-caps-imex-channels"
    channels.mkdir(exist_ok=True)
    for n in (0, 3):
        if not (channels / f"channel{n}").exists():
            os.mknod(channels / f"channel{n}", stat.S_IFCHR | 0o666, os.makedev(122, n))
    plan = plan_injection(host, inventory, Selection(), {"utility"}, imex_channels=(3,))
    assert "/dev/nvidia-caps-imex-channels/channel3" in {n.path for n in plan.device_nodes}
    every = plan_injection(host, inventory, Selection(), {"utility"}, imex_all=True)
    assert [n.path for n in every.device_nodes if "imex" in n.path] == [
        "/dev/nvidia-caps-imex-channels/channel0", "/dev/nvidia-caps-imex-channels/channel3"]
    with pytest.raises(InjectionError, match="IMEX channel 7 does not exist"):
        plan_injection(host, inventory, Selection(), {"utility"}, imex_channels=(7,))


def test_none_gives_control_nodes_and_driver_files_but_no_gpu(sim_host):
    host, inventory = sim_host
    plan = plan_injection(host, inventory, Selection(), {"utility"})
    assert {n.path for n in plan.device_nodes} == {"/dev/nvidiactl"}
    assert any(m.container_path.endswith("/nvidia-smi") for m in plan.mounts)
    assert plan.proc_view.files and not any(name.startswith("gpus/") for name, _ in plan.proc_view.files)


@pytest.mark.parametrize("options, set_bits, clear_bits, recursive", [
    (["ro", "nosuid", "nodev", "bind"], RDONLY | NOSUID | NODEV, NOEXEC, False),        # a library
    (["nosuid", "nodev", "noexec", "bind"], NOSUID | NODEV | NOEXEC, RDONLY, False),   # an IPC socket
    (["rbind", "rw", "exec", "nosuid"], NOSUID, RDONLY | NOEXEC, True),
    (["ro", "noexec"], RDONLY | NOEXEC, 0, False),
])
def test_mount_options_mapping(options, set_bits, clear_bits, recursive):
    result = mount_options(options, "x")
    assert (result.set, result.clear, result.recursive) == (set_bits, clear_bits, recursive)


def test_mig_config_and_monitor_minors_skip_non_ascii_digits(tmp_path):
    from cdi.driver_root import DriverRoot
    from cdi.nvml import DEFAULT_MIG_CONTROL_MINORS as DEFAULT_MIG_MINORS, MIG_MINORS
    from hook.inject import _mig_global_minors

    root = tmp_path / "root"
    (root / "proc" / MIG_MINORS).parent.mkdir(parents=True)
    (root / "proc" / MIG_MINORS).write_text("config \u00b2\nmonitor 7\n")
    (root / ".nvidia-simulated-host.json").write_text("{}")  # a marked root supplies its own proc
    assert _mig_global_minors(DriverRoot(str(root))) == {**DEFAULT_MIG_MINORS, "monitor": 7}
