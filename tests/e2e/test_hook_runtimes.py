"""nvidia-container-runtime-hook under real runc and crun, added by the runtime shim in legacy mode, on a
simulated host (2 GPUs, GPU 1 in MIG mode with two MIG devices).

The container reports what it got: exactly the requested GPU and MIG nodes (bind mounts, never
nodev), the driver libraries and their links, libcuda.so.1 in its ld cache, an nvidia-smi that lists
only what was asked for, and a device cgroup that denies a node of a GPU not requested (EPERM on open
of a node made with mknod inside) and allows a requested one (ENXIO: allowed, no driver behind it).
The host's mount table is the same afterwards.
"""
from __future__ import annotations

import json
import shutil

import pytest

from tests.e2e.bundle import make_bundle
from tests.e2e.hook_support import (HOOK, LIBDIR, PROBE, add_hook_entry, make_simulated_host, mount_table,
                                    nodes, opened, require_root_and, run_through_shim, run_with_runtime, smi,
                                    with_mknod, write_config)
from tests.e2e.host_setup import ensure_hugetlb_on_v1
from tests.e2e.rootfs import make_rootfs

pytestmark = pytest.mark.e2e
VERSION = "550.54.15"
EPERM, ENXIO = "Operation not permitted", "No such device or address"


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    require_root_and("runc", "crun", "gcc")
    ensure_hugetlb_on_v1()
    work = tmp_path_factory.mktemp("hook-host")
    inventory = make_simulated_host(work / "host", imex_channels=4)
    yield work / "host", inventory
    shutil.rmtree(work, ignore_errors=True)


def run(host, tmp_path, runtime: str, env: list[str], script: str = PROBE, config_extra: str = "",
        shim_env: dict | None = None):
    root, _ = host
    config = write_config(tmp_path / "config.toml", root, runtime, config_extra)
    bundle = with_mknod(make_bundle(tmp_path / "bundle", ["sh", "-c", script], env=env, glibc=True))
    before = mount_table(str(tmp_path), str(root))
    result = run_through_shim(bundle, config, tmp_path / "state", extra_env=shim_env)
    assert mount_table(str(tmp_path), str(root)) == before, "the host's mount table changed"
    return result


@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_gpu_0_gets_exactly_its_node_libraries_links_and_cgroup_rule(host, tmp_path, runtime):
    _, inventory = host
    result = run(host, tmp_path, runtime, ["NVIDIA_VISIBLE_DEVICES=0"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert nodes(lines) == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    assert f"link {LIBDIR}/libcuda.so.1 -> libcuda.so.{VERSION}" in lines
    assert f"link {LIBDIR}/libcuda.so -> libcuda.so.1" in lines
    assert f"link {LIBDIR}/libnvidia-ml.so.1 -> libnvidia-ml.so.{VERSION}" in lines
    assert "ldcache-ok" in lines
    assert "NODEV-ON-NODE" not in lines
    listed = smi(lines)
    assert len(listed) == 1 and inventory["gpus"][0]["uuid"] in listed[0], listed
    assert ENXIO in opened(lines, 0)       # requested: the cgroup lets it through to the (absent) driver
    assert EPERM in opened(lines, 1)       # not requested: the cgroup denies it


@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_mig_device_gets_its_parent_and_cap_nodes_only(host, tmp_path, runtime):
    _, inventory = host
    mig0, mig1 = inventory["gpus"][1]["mig_devices"]
    result = run(host, tmp_path, runtime, ["NVIDIA_VISIBLE_DEVICES=1:0"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert nodes(lines) == {"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                            f"/dev/nvidia-caps/nvidia-cap{mig0['gi_cap_minor']}",
                            f"/dev/nvidia-caps/nvidia-cap{mig0['ci_cap_minor']}"}
    listed = "\n".join(smi(lines))
    assert mig0["uuid"] in listed and mig1["uuid"] not in listed
    assert inventory["gpus"][0]["uuid"] not in listed
    assert EPERM in opened(lines, 0) and ENXIO in opened(lines, 1)


def test_utility_only_gets_no_cuda_and_no_uvm(host, tmp_path):
    result = run(host, tmp_path, "runc", ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "/dev/nvidia-uvm" not in nodes(lines)
    assert {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"} <= nodes(lines)
    assert f"link {LIBDIR}/libcuda.so.1 -> " in lines   # no libcuda: readlink prints nothing
    assert f"link {LIBDIR}/libnvidia-ml.so.1 -> libnvidia-ml.so.{VERSION}" in lines
    assert ENXIO in opened(lines, 0) and ENXIO in opened(lines, 1)


def test_no_gpu_requested_touches_nothing_and_never_reads_the_driver(host, tmp_path):
    # a driver root that does not exist: the hook would fail if it so much as looked at it
    config = write_config(tmp_path / "config.toml", tmp_path / "no-such-root")
    bundle = with_mknod(make_bundle(tmp_path / "bundle", ["sh", "-c", PROBE], glibc=True))
    result = run_through_shim(bundle, config, tmp_path / "state")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert nodes(lines) == set() and smi(lines) == []
    assert EPERM in opened(lines, 0)


@pytest.mark.parametrize("env, message", [
    (["NVIDIA_VISIBLE_DEVICES=7"], "unknown device id '7'"),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99.0"], "unsatisfied condition 'cuda>=99.0'"),
])
def test_a_refused_request_stops_the_container_with_one_line(host, tmp_path, env, message):
    result = run(host, tmp_path, "runc", env, script="echo STARTED")
    assert result.returncode != 0
    assert "STARTED" not in result.stdout
    assert f"nvidia-container-runtime-hook: error: {message}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_the_hook_alone_refuses_mig_config_for_an_unprivileged_container(host, tmp_path, runtime):
    # the hook entry as docker adds it, without the shim (which would refuse first)
    root, _ = host
    config = write_config(tmp_path / "config.toml", root, runtime)
    bundle = add_hook_entry(make_bundle(tmp_path / "bundle", ["echo", "STARTED"], glibc=True, env=[
        "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"]), config)
    before = mount_table(str(tmp_path), str(root))
    result = run_with_runtime(runtime, bundle, tmp_path / "state")
    assert mount_table(str(tmp_path), str(root)) == before
    assert result.returncode != 0 and "STARTED" not in result.stdout
    if runtime == "crun":   # crun sends a hook's stderr nowhere unless an annotation asks for it
        assert "error executing hook" in result.stderr
        return
    assert ("nvidia-container-runtime-hook: error: NVIDIA_MIG_CONFIG_DEVICES is only allowed for privileged "
            "containers (CAP_SYS_ADMIN)") in result.stderr, result.stderr


def test_mig_config_and_monitor_for_a_privileged_container(host, tmp_path):
    root, _ = host
    config = write_config(tmp_path / "config.toml", root)
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", PROBE], glibc=True, env=[
        "NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_MIG_CONFIG_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=all"])
    spec = json.loads((bundle / "config.json").read_text())
    spec["process"]["capabilities"]["bounding"].append("CAP_SYS_ADMIN")
    (bundle / "config.json").write_text(json.dumps(spec))
    result = run_with_runtime("runc", add_hook_entry(bundle, config), tmp_path / "state")
    assert result.returncode == 0, result.stderr
    found = nodes(result.stdout.splitlines())
    assert {"/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2", "/dev/nvidia1"} <= found
    assert "/dev/nvidia0" not in found


def test_legacy_cuda_image_gets_every_gpu_and_its_cuda_requirement(host, tmp_path):
    # CUDA_VERSION without NVIDIA_REQUIRE_CUDA: an old CUDA image; unset NVIDIA_VISIBLE_DEVICES means all
    _, inventory = host
    result = run(host, tmp_path, "runc", ["CUDA_VERSION=12.1.0"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert {"/dev/nvidia0", "/dev/nvidia1"} <= nodes(lines)
    # `all`: GPU 0, and GPU 1 (in MIG mode) with its two MIG devices
    listed = smi(lines)
    assert [line.split(":")[0].strip() for line in listed] == ["GPU 0", "GPU 1", "MIG 1g.5gb      Device  0",
                                                               "MIG 1g.5gb      Device  1"], listed


def test_legacy_cuda_image_newer_than_the_driver_is_refused(host, tmp_path):
    result = run(host, tmp_path, "runc", ["CUDA_VERSION=13.0"], script="echo STARTED")
    assert result.returncode != 0 and "STARTED" not in result.stdout
    assert "nvidia-container-runtime-hook: error: unsatisfied condition 'cuda>=13.0'" in result.stderr, result.stderr


@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_imex_channels(host, tmp_path, runtime):
    script = PROBE + "; (exec 3<>/dev/nvidia-caps-imex-channels/channel1) 2>&1 | sed 's/^/imex1 /'"
    result = run(host, tmp_path, runtime, ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=1,3"], script=script)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    imex = {n for n in nodes(lines) if "imex" in n}
    assert imex == {"/dev/nvidia-caps-imex-channels/channel1", "/dev/nvidia-caps-imex-channels/channel3"}
    assert any(line.startswith("imex1 ") and ENXIO in line for line in lines), lines   # allowed by the cgroup


def test_imex_channel_that_does_not_exist_is_refused(host, tmp_path):
    result = run(host, tmp_path, "runc", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=9"], script="echo STARTED")
    assert result.returncode != 0 and "STARTED" not in result.stdout
    assert "nvidia-container-runtime-hook: error: device node of the IMEX channel 9 does not exist" in result.stderr


def test_device_plugin_volume_mounts_select_the_gpu_when_enabled(host, tmp_path):
    # a device plugin's way: /dev/null mounted at /var/run/nvidia-container-devices/<id>; the env asks
    # for all, and the mounts win (docs/reference.md#requests: precedence)
    root, inventory = host
    config = write_config(tmp_path / "config.toml", root, extra="accept-nvidia-visible-devices-as-volume-mounts = true")
    bundle = with_mknod(make_bundle(tmp_path / "bundle", ["sh", "-c", PROBE], env=["NVIDIA_VISIBLE_DEVICES=all"],
                                    glibc=True))
    spec = json.loads((bundle / "config.json").read_text())
    spec["mounts"].append({"destination": "/var/run/nvidia-container-devices/1", "type": "bind",
                           "source": "/dev/null", "options": ["rbind", "ro"]})
    (bundle / "config.json").write_text(json.dumps(spec))
    result = run_with_runtime("runc", add_hook_entry(bundle, config), tmp_path / "state")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "/dev/nvidia1" in nodes(lines) and "/dev/nvidia0" not in nodes(lines)
    assert EPERM in opened(lines, 0) and ENXIO in opened(lines, 1)


def test_rhel_like_rootfs_finds_the_libraries_through_the_ld_cache(host, tmp_path):
    # no /etc/debian_version and an ld.so.conf that does not list the host's library dir: the
    # libraries still land where the host keeps them and ldconfig is told about that folder
    root, _ = host
    rootfs = make_rootfs(tmp_path / "rootfs", glibc=True)
    (rootfs / "etc/debian_version").unlink()
    (rootfs / "etc/ld.so.conf").write_text("/usr/lib64\n")
    config = write_config(tmp_path / "config.toml", root)
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", PROBE], env=["NVIDIA_VISIBLE_DEVICES=0"], rootfs=rootfs)
    result = run_through_shim(bundle, config, tmp_path / "state")
    assert result.returncode == 0, result.stderr
    assert "ldcache-ok" in result.stdout.splitlines()


def test_a_restarted_container_keeps_its_links_and_ld_cache(host, tmp_path):
    """The same rootfs started again, as a restarted container's: the second start's ldconfig builds
    the same cache the first start's wrote, so the file is left as it is (gct_update_ld_cache: not
    replaced), and the container sees the same links and ld cache."""
    root, _ = host
    config = write_config(tmp_path / "config.toml", root)
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", PROBE], env=["NVIDIA_VISIBLE_DEVICES=0"], glibc=True)
    ld_cache = bundle / "rootfs/etc/ld.so.cache"

    def written():   # an inode number can be reused by the next file: with its mtime, a new file shows
        st = ld_cache.stat()
        return st.st_ino, st.st_mtime_ns
    image_cache = written()
    starts = [run_through_shim(bundle, config, tmp_path / "state1")]
    after_first = written()
    starts.append(run_through_shim(bundle, config, tmp_path / "state2"))
    assert [s.returncode for s in starts] == [0, 0], starts[-1].stderr
    assert after_first != image_cache      # the first start ran ldconfig (a new file renamed into place)
    for start in starts:
        lines = start.stdout.splitlines()
        assert "ldcache-ok" in lines
        assert f"link {LIBDIR}/libcuda.so.1 -> libcuda.so.{VERSION}" in lines
    assert written() == after_first        # the second did not


@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_a_volume_over_etc_gets_the_ld_cache(host, tmp_path, runtime):
    """A volume over the rootfs' /etc is mounted in the container's namespace only: the hook, in the
    runtime's, writes the cache and the drop-in through the container's view, so the volume gets them
    and the image's /etc under it is left as it was."""
    root, _ = host
    config = write_config(tmp_path / "config.toml", root, runtime)
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", PROBE], env=["NVIDIA_VISIBLE_DEVICES=0"], glibc=True)
    volume = tmp_path / "volume"
    shutil.copytree(bundle / "rootfs/etc", volume, symlinks=True)
    spec = json.loads((bundle / "config.json").read_text())
    spec["mounts"].append({"destination": "/etc", "type": "bind", "source": str(volume),
                           "options": ["rbind", "rw"]})
    (bundle / "config.json").write_text(json.dumps(spec))
    image_etc = sorted(p.name for p in (bundle / "rootfs/etc").iterdir())
    image_cache = (bundle / "rootfs/etc/ld.so.cache").read_bytes()
    result = run_through_shim(bundle, config, tmp_path / "state")
    assert result.returncode == 0, result.stderr
    assert "ldcache-ok" in result.stdout.splitlines()
    assert (volume / "ld.so.conf.d/00-nvidia-cdi-hook.conf").exists()
    assert sorted(p.name for p in (bundle / "rootfs/etc").iterdir()) == image_etc
    assert (bundle / "rootfs/etc/ld.so.cache").read_bytes() == image_cache


def test_require_is_skipped_when_disabled(host, tmp_path):
    result = run(host, tmp_path, "runc", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99.0",
                                          "NVIDIA_DISABLE_REQUIRE=true"], script="echo STARTED")
    assert result.returncode == 0, result.stderr
    assert "STARTED" in result.stdout


def test_poststart_and_poststop_succeed_doing_nothing():
    import subprocess

    if not HOOK.exists():
        pytest.skip("hook launcher not installed")
    for command in ("poststart", "poststop"):
        result = subprocess.run([str(HOOK), command], input="not even json", capture_output=True, text=True)
        assert result.returncode == 0 and result.stderr == ""


@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_the_mps_pipe_directory_of_the_engines_environment_is_mounted(host, tmp_path, runtime):
    """CUDA_MPS_PIPE_DIRECTORY in the shim's environment reaches the hook it adds, which mounts that
    directory (writable: MPS clients make their pipes in it) for compute (issue 22, item 9)."""
    root, _ = host
    (root / "srv" / "mps").mkdir(parents=True, exist_ok=True)
    script = ("grep -q ' /srv/mps ' /proc/self/mountinfo && echo mps-mounted; "
              "grep -q ' /tmp/nvidia-mps ' /proc/self/mountinfo && echo default-mounted; "
              "touch /srv/mps/client && echo mps-writable; true")
    result = run(host, tmp_path, runtime, ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute"],
                 script=script, shim_env={"CUDA_MPS_PIPE_DIRECTORY": "/srv/mps"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["mps-mounted", "mps-writable"]
    assert (root / "srv" / "mps" / "client").exists()
