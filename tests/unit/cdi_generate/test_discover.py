"""cdi.discover over a simulated host: per-device and common edits, the hook entry, naming."""
from __future__ import annotations

import os
import stat

import pytest

import sys

from cdi.discover import (ALL_DEVICE, HOOK_ENV, NVIDIAS, OURS, DiscoveryError, EditsBuilder, build_edits,
                          build_spec_devices, default_hook_path, device_names, hook_flavour_of)
from cdi.record import replace
from cdi.selection import Selection
from hook.cdi_hook import parse_args
from tests.unit.cdi_generate.conftest import VERSION

HOOK = "/opt/test/bin/nvidia-cdi-hook"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
LIBCUDA_DIR = f"NVIDIA_CTK_LIBCUDA_DIR={LIBDIR}"


def builder(host, inventory, caps=("compute", "utility"), **kw):
    return EditsBuilder(str(host), inventory, caps, hook_path=HOOK, **kw)


def node_summary(edits):
    return [(n.path, n.host_path, n.type, n.major, n.minor) for n in edits.device_nodes]


def host_numbers(path):
    st = os.stat(path)
    assert stat.S_ISCHR(st.st_mode)
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def test_a_gpu_gets_exactly_its_node_with_host_path_and_numbers(sim_host, sim_inventory):
    edits = builder(sim_host, sim_inventory).device_edits(sim_inventory.gpus[0])
    host_path = f"{sim_host}/dev/nvidia0"
    assert node_summary(edits) == [("/dev/nvidia0", host_path, "c", *host_numbers(host_path))]
    assert not edits.mounts and not edits.hooks and not edits.env


def test_a_mig_device_gets_its_parents_node_and_its_own_two_cap_nodes(sim_host, sim_inventory):
    mig0, mig1 = sim_inventory.gpus[1].mig_devices
    edits = builder(sim_host, sim_inventory).device_edits(mig0)
    paths = [n.path for n in edits.device_nodes]
    assert paths == ["/dev/nvidia1", f"/dev/nvidia-caps/nvidia-cap{mig0.gi_cap_minor}",
                     f"/dev/nvidia-caps/nvidia-cap{mig0.ci_cap_minor}"]
    for node in edits.device_nodes:
        assert node.host_path == f"{sim_host}{node.path}"
        assert (node.major, node.minor) == host_numbers(node.host_path)
    assert not {f"/dev/nvidia-caps/nvidia-cap{mig1.gi_cap_minor}", "/dev/nvidia0"} & set(paths)


@pytest.mark.parametrize("caps, expected", [
    (("utility",), ["/dev/nvidiactl"]),
    (("compute", "utility"), ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]),
    (("display",), ["/dev/nvidiactl", "/dev/nvidia-modeset"]),
    (("all",), ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]),
])
def test_control_nodes_follow_the_capabilities(sim_host, sim_inventory, caps, expected):
    common = builder(sim_host, sim_inventory, caps).common_edits()
    assert [n.path for n in common.device_nodes] == expected
    # where libcuda is, when there is one (NVIDIA's specs set it too)
    with_cuda = "compute" in caps or "all" in caps
    assert common.env == ([LIBCUDA_DIR] if with_cuda else []) + ["NVIDIA_VISIBLE_DEVICES=void"]


def test_driver_files_are_mounted_read_only_and_never_noexec(sim_host, sim_inventory):
    common = builder(sim_host, sim_inventory).common_edits()
    by_path = {m.container_path: m for m in common.mounts}
    lib = by_path[f"{LIBDIR}/libcuda.so.{VERSION}"]
    assert lib.host_path == f"{sim_host}{LIBDIR}/libcuda.so.{VERSION}"
    assert lib.options == ["ro", "nosuid", "nodev", "bind", "rprivate"]
    assert by_path["/usr/bin/nvidia-smi"].options == ["ro", "nosuid", "nodev", "bind", "rprivate"]
    assert "/var/run/nvidia-persistenced/socket" in by_path
    assert any(p.startswith(f"/lib/firmware/nvidia/{VERSION}/gsp") for p in by_path)
    for mount in common.mounts:
        if ".so." in mount.container_path or mount.container_path.startswith("/usr/bin/"):
            assert "noexec" not in mount.options, mount
    assert all(os.path.exists(m.host_path) for m in common.mounts)


def test_one_hook_entry_makes_every_link_and_updates_the_ld_cache(sim_host, sim_inventory):
    b = builder(sim_host, sim_inventory)
    (hook,) = b.common_edits().hooks
    # createRuntime: the hook joins the container's mount namespace itself (runc 1.1 hands a
    # createContainer hook its state late)
    assert hook.hook_name == "createRuntime" and hook.path == HOOK
    assert hook.env == list(HOOK_ENV) and hook.env[0].startswith("PATH=")
    assert hook.args[0] == "nvidia-cdi-hook"
    tasks = parse_args(hook.args[1:])  # what the hook program will do with these args
    assert not tasks.warnings
    assert ("libcuda.so." + VERSION, f"{LIBDIR}/libcuda.so.1") in tasks.links
    assert ("libcuda.so.1", f"{LIBDIR}/libcuda.so") in tasks.links
    assert set(tasks.links) == {(link.target, link.path) for link in b.driver_files.symlinks}
    assert tasks.update_ldcache and tasks.folders == [LIBDIR]
    assert tasks.ldconfig == "/sbin/ldconfig"
    # the image's CUDA compat libraries go first when newer than this driver; ModifyDeviceFiles: 0,
    # from the driver root's params (the simulated host's own proc)
    assert tasks.host_driver_version == VERSION
    assert tasks.disable_device_node_modification and tasks.params_file == f"{sim_host}/proc/driver/nvidia/params"
    # NVIDIA 1.20's application profile (issue 27.1), last as in NVIDIA's specs
    assert tasks.update_application_profile and hook.args[-1] == "update-application-profile"


def test_without_libcuda_no_cuda_compat(sim_host, sim_inventory):
    (hook,) = builder(sim_host, sim_inventory, ("utility",)).common_edits().hooks
    tasks = parse_args(hook.args[1:])
    assert tasks.host_driver_version is None and tasks.disable_device_node_modification


def test_nvidias_hook_gets_nvidias_argv_one_entry_per_subcommand(sim_host, sim_inventory, tmp_path):
    """--nvidia-cdi-hook-path naming NVIDIA's program: it parses one subcommand per argv (our chain
    made it fail with `flag provided but not defined: -folder`)."""
    theirs = tmp_path / "nvidia-cdi-hook"
    theirs.write_bytes(b"\x7fELF a Go program")
    assert hook_flavour_of(str(theirs)) == NVIDIAS
    b = EditsBuilder(str(sim_host), sim_inventory, ("compute", "utility"), hook_path=str(theirs),
                     ldconfig="@/usr/sbin/ldconfig.real", hook_flavour=NVIDIAS)
    hooks = b.common_edits().hooks
    assert all(h.path == str(theirs) and h.env == list(HOOK_ENV) for h in hooks)
    # NVIDIA's works where it is started: in the container's mount namespace, as a createContainer hook
    assert {h.hook_name for h in hooks} == {"createContainer"}
    argvs = [h.args for h in hooks]
    assert [a[:2] for a in argvs] == [["nvidia-cdi-hook", "create-symlinks"], ["nvidia-cdi-hook", "enable-cuda-compat"],
                                      ["nvidia-cdi-hook", "update-ldcache"],
                                      ["nvidia-cdi-hook", "disable-device-node-modification"]]
    assert set(argvs[0][2::2]) == {"--link"}
    assert argvs[1][2:] == [f"--host-driver-version={VERSION}"]
    assert argvs[2][2:] == ["--folder", LIBDIR, "--ldconfig-path", "/usr/sbin/ldconfig.real"]
    assert argvs[3][2:] == []
    # each entry is one subcommand, which ours reads as well
    for argv in argvs:
        assert not [w for w in parse_args(argv[1:]).warnings if "enable-cuda-compat" not in w]
    # NVIDIA's nvidia-ctk takes them after `hook`
    theirs_ctk = tmp_path / "nvidia-ctk"
    theirs_ctk.write_bytes(b"\x7fELF another Go program")
    ctk = EditsBuilder(str(sim_host), sim_inventory, ("utility",), hook_path=str(theirs_ctk),
                       hook_flavour=hook_flavour_of(str(theirs_ctk)))
    hooks = ctk.common_edits().hooks
    assert len(hooks) > 1 and all(h.args[:2] == ["nvidia-ctk", "hook"] and h.hook_name == "createContainer"
                                  for h in hooks)


def test_our_installed_hook_is_told_from_nvidias():
    ours = os.path.join(os.path.dirname(sys.executable), "nvidia-cdi-hook")
    if not os.path.exists(ours):
        pytest.skip("needs the installed launcher (make venv)")
    assert hook_flavour_of(ours) == OURS
    assert hook_flavour_of("/nonexistent/nvidia-cdi-hook") == OURS   # a spec written before the install


def test_our_nvidia_ctk_as_the_hook_gets_our_one_chain_after_hook(sim_host, sim_inventory):
    ctk = os.path.join(os.path.dirname(sys.executable), "nvidia-ctk")
    if not os.path.exists(ctk) or hook_flavour_of(ctk) != OURS:
        pytest.skip("needs the installed nvidia-ctk launcher (make venv)")
    (hook,) = EditsBuilder(str(sim_host), sim_inventory, ("compute", "utility"), hook_path=ctk,
                           hook_flavour=OURS).common_edits().hooks
    assert hook.args[:3] == ["nvidia-ctk", "hook", "create-symlinks"] and "update-ldcache" in hook.args


def test_a_configured_ldconfig_reaches_the_hook_as_a_host_path(sim_host, sim_inventory):
    (hook,) = builder(sim_host, sim_inventory, ldconfig="/usr/sbin/ldconfig.real").common_edits().hooks
    at = hook.args.index("--ldconfig-path")
    assert hook.args[at + 1] == "@/usr/sbin/ldconfig.real"
    assert parse_args(hook.args[1:]).ldconfig == "/usr/sbin/ldconfig.real"


def test_common_edits_are_a_copy_each_time(sim_host, sim_inventory):
    b = builder(sim_host, sim_inventory)
    first = b.common_edits()
    first.env.append("X=1")
    assert b.common_edits().env == [LIBCUDA_DIR, "NVIDIA_VISIBLE_DEVICES=void"]


def test_edits_for_a_request_hold_common_edits_once_and_shared_nodes_once(sim_host, sim_inventory):
    migs = sim_inventory.gpus[1].mig_devices
    edits = build_edits(str(sim_host), sim_inventory, ["compute", "utility"], Selection((), migs), hook_path=HOOK)
    paths = [n.path for n in edits.device_nodes]
    assert paths.count("/dev/nvidia1") == 1 and len(paths) == len(set(paths))
    assert {f"/dev/nvidia-caps/nvidia-cap{m.gi_cap_minor}" for m in migs} <= set(paths)
    assert len(edits.hooks) == 1 and edits.env == [LIBCUDA_DIR, "NVIDIA_VISIBLE_DEVICES=void"]


def test_a_missing_gpu_node_is_an_error_naming_it(sim_host, sim_inventory):
    ghost = replace(sim_inventory.gpus[0], index=7, minor=7)
    with pytest.raises(DiscoveryError) as err:
        builder(sim_host, sim_inventory).device_edits(ghost)
    assert err.value.where == f"{sim_host}/dev/nvidia7" and "GPU 7" in err.value.what


def test_an_unknown_capability_is_an_error(sim_host, sim_inventory):
    with pytest.raises(DiscoveryError, match="unknown driver capability 'gpu'"):
        builder(sim_host, sim_inventory, ("gpu",))


@pytest.mark.parametrize("strategies, gpu1, mig10", [
    (["index"], ["1"], ["1:0"]),
    (["uuid"], ["GPU-"], ["MIG-"]),
    (["type-index"], ["gpu1"], ["mig1:0"]),
    (["index", "uuid", "index"], ["1", "GPU-"], ["1:0", "MIG-"]),
])
def test_device_names_per_strategy(sim_inventory, strategies, gpu1, mig10):
    gpu, mig = sim_inventory.gpus[1], sim_inventory.gpus[1].mig_devices[0]
    got_gpu, got_mig = device_names(gpu, strategies), device_names(mig, strategies)
    assert [n if not n.startswith("GPU-") else "GPU-" for n in got_gpu] == gpu1
    assert [n if not n.startswith("MIG-") else "MIG-" for n in got_mig] == mig10
    if "uuid" in strategies:
        assert gpu.uuid in got_gpu and mig.uuid in got_mig


def test_an_unknown_strategy_is_an_error(sim_inventory):
    with pytest.raises(DiscoveryError, match="unknown device name strategy 'name'"):
        device_names(sim_inventory.gpus[0], ["name"])


def test_spec_devices_and_the_all_device(sim_host, sim_inventory):
    devices = build_spec_devices(builder(sim_host, sim_inventory), strategies=["index"])
    # GPU 1 is in MIG mode: only its MIG devices are devices (as in NVIDIA's specs)
    assert [d.name for d in devices] == ["0", "1:0", "1:1", ALL_DEVICE]
    every = [n.path for n in devices[-1].container_edits.device_nodes]
    assert len(every) == len(set(every)) == 2 + 4  # two GPU nodes, two cap nodes per MIG device
    assert "/dev/nvidia1" in every                  # the MIG devices bring their parent's node
    assert not build_spec_devices(builder(sim_host, sim_inventory), all_device=False)[-1].name == ALL_DEVICE


def test_default_hook_path_is_next_to_the_running_program(tmp_path):
    program = tmp_path / "nvidia-ctk"
    hook = tmp_path / "nvidia-cdi-hook"
    program.write_text("")
    assert default_hook_path(str(program)) != str(hook)
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    assert default_hook_path(str(program)) == str(hook)


@pytest.fixture(scope="module")
def drm_host(tmp_path_factory):
    """A one-GPU simulated host: the simulator gives its GPU card1 and renderD128 in dev/dri and in
    sysfs; sysfs also lists a controlD64 that dev/dri does not have (skipped with a warning)."""
    from tests.support.simulated_host import create_in_process, inventory_from_marker

    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    root = tmp_path_factory.mktemp("drm") / "host"
    create_in_process(root, gpus=1, mig_options=(), driver_version=VERSION)
    inventory = inventory_from_marker(root)
    bus = inventory.gpus[0].pci_bus_id          # NVML's 8-digit domain
    sysfs = root / "sys/bus/pci/devices" / bus[4:].lower() / "drm"
    assert sorted(p.name for p in sysfs.iterdir()) == ["card1", "renderD128"]
    (sysfs / "controlD64").mkdir()
    return root, inventory


@pytest.mark.parametrize("caps, drm", [(("graphics",), True), (("display",), True), (("compute", "utility"), False)])
def test_drm_nodes_go_with_a_gpu_for_graphics(drm_host, caps, drm):
    root, inventory = drm_host
    edits = EditsBuilder(str(root), inventory, caps, hook_path=HOOK).device_edits(inventory.gpus[0])
    drm_major = os.major(os.stat(root / "dev/dri/card1").st_rdev)   # 226, unless a DRM driver has it
    expected = [("/dev/nvidia0", 195, 0)] + ([("/dev/dri/card1", drm_major, 1), ("/dev/dri/renderD128", drm_major, 128)]
                                             if drm else [])
    assert [(n.path, n.major, n.minor) for n in edits.device_nodes] == expected
    assert all(n.host_path == f"{root}{n.path}" for n in edits.device_nodes)


def test_sysfs_bus_id():
    from cdi.discover import sysfs_bus_id

    assert sysfs_bus_id("00000000:0F:00.0") == "0000:0f:00.0"
    assert sysfs_bus_id("0000:07:00.0") == "0000:07:00.0"
    with pytest.raises(DiscoveryError):
        sysfs_bus_id("../../x")


def test_modeset_is_in_the_spec_for_every_container_and_per_container_only_with_display(sim_host, sim_inventory):
    """Issue 27.4: cdi mode's spec holds /dev/nvidia-modeset for every GPU container (one spec for all of
    them, as NVIDIA's); edits built for one container (jit-cdi, legacy, the hook) only with display. The
    difference is README's to explain."""
    from pathlib import Path

    from cdi.generate import generate_spec

    spec = generate_spec(sim_host, sim_inventory, hook_path="/usr/bin/nvidia-cdi-hook")
    assert "/dev/nvidia-modeset" in [n.path for n in spec.container_edits.device_nodes]
    for caps, has in ((("compute", "utility"), False), (("compute", "utility", "display"), True)):
        common = builder(sim_host, sim_inventory, caps).common_edits()
        assert ("/dev/nvidia-modeset" in [n.path for n in common.device_nodes]) is has
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    differences = readme[readme.index("## Differences from NVIDIA's tools"):readme.index("## Security model")]
    assert "`/dev/nvidia-modeset` is in every GPU container of `cdi` mode" in differences
    assert "`/var/run/nvidia-persistenced/socket`" in differences and "`bind,rprivate`" in differences
