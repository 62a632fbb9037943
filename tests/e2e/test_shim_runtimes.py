"""The shim in front of real runc and crun on a simulated GPU host: each container sees exactly the
devices it asked for (nodes, libraries, `nvidia-smi -L` from the simulated driver), one without a
request sees nothing and keeps its config.json byte for byte. Every runtime call goes through the shim."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from cdi.config_cache import RECENT_NS
from tests.e2e.bundle import USERNS_BASE, make_bundle, userns_work_dir, with_user_namespace
from tests.e2e.host_setup import ensure_hugetlb_on_v1
from tests.support.mountns import dev_with_extra_nodes, run_in_private_mount_ns
from tests.e2e.shim_host import (GPU_REPORT, SHIM, ShimLifecycle, build_gpu_host, parse_gpu_report, shim_env,
                                 write_shim_config)

pytestmark = pytest.mark.e2e
MODEL = "NVIDIA A100-SXM4-40GB"


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (device nodes, runc)")
    if not SHIM.exists():
        pytest.skip(f"{SHIM} is not installed (make venv)")
    ensure_hugetlb_on_v1()
    return build_gpu_host(tmp_path_factory.mktemp("shim-e2e"))


def lifecycle_for(runtime, gpu_host, tmp_path, mode="cdi"):
    if shutil.which(runtime) is None:
        pytest.skip(f"{runtime} is not installed")
    config = write_shim_config(tmp_path / "config.toml", gpu_host, runtime=runtime, mode=mode,
                               debug_log=tmp_path / "shim.log")
    return ShimLifecycle(shim_env(config, tmp_path / "cache"), tmp_path / "state")


def smi_gpu_line(uuid: str) -> str:
    return f"GPU 0: {MODEL} (UUID: {uuid})"


def smi_mig_line(uuid: str) -> str:
    return f"  MIG 1g.5gb      Device  0: (UUID: {uuid})"


def expected_mig(gpu_host, key):
    gi, ci = gpu_host.mig_caps[key]
    return {"dev": sorted(["nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps",
                           f"nvidia-caps/nvidia-cap{gi}", f"nvidia-caps/nvidia-cap{ci}"]),
            "smi": [smi_gpu_line(gpu_host.gpu_uuids[1]), smi_mig_line(gpu_host.mig_uuids[key])]}


CASES = {
    "gpu-index": (["NVIDIA_VISIBLE_DEVICES=0"], None),   # GPU 1 is in MIG mode: the spec names its MIG devices
    "mig-uuid": (["NVIDIA_VISIBLE_DEVICES={mig11}"], None),
    "cdi-name": (["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1:1"], None),
    "annotation": ([], {"cdi.k8s.io/gct-test": "nvidia.com/gpu=0"}),
}


@pytest.mark.parametrize("runtime", ["runc", "crun"])
@pytest.mark.parametrize("case", list(CASES))
def test_container_sees_exactly_what_it_asked_for(gpu_host, tmp_path, runtime, case):
    env, annotations = CASES[case]
    env = [e.format(mig11=gpu_host.mig_uuids["1:1"]) for e in env]
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", GPU_REPORT], env=env, glibc=True, annotations=annotations)
    code, output, stderr = lifecycle_for(runtime, gpu_host, tmp_path).run(bundle)
    assert code == 0, stderr
    seen = parse_gpu_report(output)
    if case == "gpu-index":
        assert seen["dev"] == sorted(["nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"])
        assert seen["smi"] == [smi_gpu_line(gpu_host.gpu_uuids[0])]
    elif case == "annotation":
        assert "nvidia0" in seen["dev"] and "nvidia1" not in seen["dev"]
        assert seen["smi"] == [smi_gpu_line(gpu_host.gpu_uuids[0])]
    else:
        expected = expected_mig(gpu_host, "1:1")
        assert seen["dev"] == expected["dev"]
        assert seen["smi"] == expected["smi"]
    for lib in ("libcuda.so.1", "libnvidia-ml.so.1", "libcuda.so.550.54.15"):
        assert lib in seen["libs"]


@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_container_without_a_request_is_left_alone(gpu_host, tmp_path, runtime):
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", GPU_REPORT], glibc=True)
    before = (bundle / "config.json").read_bytes()
    code, output, stderr = lifecycle_for(runtime, gpu_host, tmp_path).run(bundle)
    assert code == 0, stderr
    assert parse_gpu_report(output) == {"dev": [], "libs": [], "smi": ["NO-NVIDIA-SMI"]}
    assert (bundle / "config.json").read_bytes() == before


@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_jit_cdi_gives_only_the_requested_capabilities(gpu_host, tmp_path, runtime):
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", GPU_REPORT], glibc=True,
                         env=["NVIDIA_VISIBLE_DEVICES=1:0", "NVIDIA_DRIVER_CAPABILITIES=utility"])
    code, output, stderr = lifecycle_for(runtime, gpu_host, tmp_path, mode="jit-cdi").run(bundle)
    assert code == 0, stderr
    seen = parse_gpu_report(output)
    assert seen["smi"] == expected_mig(gpu_host, "1:0")["smi"]
    assert "nvidia-uvm" not in seen["dev"]  # uvm only with compute
    assert "libnvidia-ml.so.1" in seen["libs"] and not any(lib.startswith("libcuda") for lib in seen["libs"])


def test_all_means_the_same_devices_in_every_mode(gpu_host, tmp_path):
    """NVIDIA_VISIBLE_DEVICES=all: GPU 0 and, GPU 1 being in MIG mode, its two MIG devices (with GPU 1's
    node), whether from the spec's `all` device (cdi), the edits built for the request (jit-cdi) or the
    prestart hook (legacy). jit-cdi and legacy used to give both whole GPUs and no MIG device."""
    caps = {f"nvidia-caps/nvidia-cap{minor}" for pair in gpu_host.mig_caps.values() for minor in pair}
    seen = {}
    for mode in ("cdi", "jit-cdi", "legacy"):
        work = tmp_path / mode
        work.mkdir()
        bundle = make_bundle(work / "bundle", ["sh", "-c", GPU_REPORT], glibc=True,
                             env=["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"])
        code, output, stderr = lifecycle_for("runc", gpu_host, work, mode=mode).run(bundle)
        assert code == 0, (mode, stderr)
        report = parse_gpu_report(output)
        # (the spec serves every capability, so cdi mode also has display's nvidia-modeset)
        seen[mode] = ([d for d in report["dev"] if d != "nvidia-modeset"], report["smi"])
        assert {"nvidia0", "nvidia1"} | caps <= set(report["dev"]), (mode, report["dev"])
        assert [line.strip().split(": (UUID: ")[-1].rstrip(")") for line in report["smi"] if "MIG" in line] \
            == [gpu_host.mig_uuids["1:0"], gpu_host.mig_uuids["1:1"]], (mode, report["smi"])
    assert seen["cdi"] == seen["jit-cdi"] == seen["legacy"]


@pytest.mark.parametrize("mode", ["cdi", "jit-cdi"])
def test_modify_device_files_is_0_and_newer_cuda_compat_libraries_come_first(gpu_host, tmp_path, mode):
    """What NVIDIA's disable-device-node-modification and enable-cuda-compat hooks do, done by our one
    hook entry. The container has no procfs here (the simulated driver is not in the
    kernel's; crun starts without one, runc does not): its image's /proc/driver/nvidia/params stands
    where the driver's would be, and the hook covers it with the simulated driver's params,
    ModifyDeviceFiles: 0. The image carries CUDA
    forward-compat libraries for a driver 999, newer than the simulated 550: ld.so must find them first."""
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", "cat /proc/driver/nvidia/params; "
                                               "ldconfig -p | grep 'libcuda.so.1 '"],
                         glibc=True, env=["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"])
    config = json.loads((bundle / "config.json").read_text())
    config["mounts"] = [m for m in config["mounts"] if m["destination"] != "/proc"]
    (bundle / "config.json").write_text(json.dumps(config))
    rootfs = bundle / "rootfs"
    (rootfs / "proc/driver/nvidia").mkdir(parents=True)
    (rootfs / "proc/driver/nvidia/params").write_text("ModifyDeviceFiles: 1\n")
    compat = rootfs / "usr/local/cuda/compat"
    compat.mkdir(parents=True)
    (tmp_path / "c.c").write_text("int compat_probe(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", compat / "libcuda.so.999.1.2",
                    tmp_path / "c.c"], check=True)
    code, output, stderr = lifecycle_for("crun", gpu_host, tmp_path, mode=mode).run(bundle)
    assert code == 0, stderr
    lines = output.splitlines()
    driver_params = (gpu_host.root / "proc/driver/nvidia/params").read_text()
    assert "ModifyDeviceFiles: 1" in driver_params
    assert "\n".join(lines[:-2]) + "\n" == driver_params.replace("ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0")
    assert [line.split("=> ")[1] for line in lines[-2:]] == ["/usr/local/cuda/compat/libcuda.so.1",
                                                            "/usr/lib/x86_64-linux-gnu/libcuda.so.1"]
    assert (rootfs / "proc/driver/nvidia/params").read_text() == "ModifyDeviceFiles: 1\n"


@pytest.mark.parametrize("mode", ["cdi", "jit-cdi", "legacy"])
def test_a_directory_at_a_link_path_is_kept_in_every_mode(gpu_host, tmp_path, mode):
    """The image has a directory where the driver's libcuda.so link goes: the container starts, the
    directory stays (nvidia-cdi-hook used to fail the start with EISDIR, the prestart hook kept it)."""
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", "ls /usr/lib/x86_64-linux-gnu/libcuda.so; "
                                               "readlink /usr/lib/x86_64-linux-gnu/libcuda.so.1"],
                         glibc=True, env=["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"])
    own = bundle / "rootfs/usr/lib/x86_64-linux-gnu/libcuda.so"
    own.mkdir(parents=True)
    (own / "the-images-own").write_text("x")
    code, output, stderr = lifecycle_for("runc", gpu_host, tmp_path, mode=mode).run(bundle)
    assert code == 0, stderr
    assert output.splitlines() == ["the-images-own", "libcuda.so.550.54.15"]


def test_auto_mode_uses_the_spec_for_a_device_it_defines(gpu_host, tmp_path):
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", GPU_REPORT], glibc=True,
                         env=["NVIDIA_VISIBLE_DEVICES=" + gpu_host.gpu_uuids[0]])
    code, output, stderr = lifecycle_for("runc", gpu_host, tmp_path, mode="auto").run(bundle)
    assert code == 0, stderr
    assert parse_gpu_report(output)["smi"] == [smi_gpu_line(gpu_host.gpu_uuids[0])]
    assert "mode cdi" in (tmp_path / "shim.log").read_text()


def test_unknown_device_fails_the_create_with_our_message(gpu_host, tmp_path):
    bundle = make_bundle(tmp_path / "bundle", ["true"], env=["NVIDIA_VISIBLE_DEVICES=7"])
    before = (bundle / "config.json").read_bytes()
    lifecycle = lifecycle_for("runc", gpu_host, tmp_path)
    code, _, stderr = lifecycle.run(bundle)
    assert code == 1
    assert stderr == (f"nvidia-container-runtime: error: unresolvable CDI device nvidia.com/gpu=7: no such device in the specs "
                      "(nvidia-ctk cdi list shows them; regenerate after a GPU change) "
                      f"(spec dirs {gpu_host.spec_dir})\n")
    assert json.loads((bundle / "log.json").read_text())["msg"] == stderr.strip()
    assert (bundle / "config.json").read_bytes() == before


def test_only_create_starts_python(gpu_host, tmp_path):
    """start, state and delete reach runc through the launcher alone: only create is in Python's log."""
    bundle = make_bundle(tmp_path / "bundle", ["true"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    lifecycle = lifecycle_for("runc", gpu_host, tmp_path)
    assert lifecycle.run(bundle)[0] == 0
    log = (tmp_path / "shim.log").read_text().splitlines()
    python_lines = [line for line in log if "low-level runtime" in line]
    assert len(python_lines) == 1 and "command create" in python_lines[0]
    passthrough = [line.split("passthrough of '")[1].split("'")[0] for line in log if "passthrough of" in line]
    assert passthrough[0] == "start" and passthrough[-1] == "delete" and "state" in passthrough


@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_legacy_program_name_adds_the_hook_that_injects_at_prestart(gpu_host, tmp_path, runtime):
    """nvidia-container-runtime.legacy (the config says cdi): our prestart hook, found beside the shim,
    reads the same config through its env and gives the container GPU 1."""
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", GPU_REPORT], glibc=True, env=["NVIDIA_VISIBLE_DEVICES=1"])
    lifecycle = lifecycle_for(runtime, gpu_host, tmp_path)
    lifecycle.shim = SHIM.with_name("nvidia-container-runtime.legacy")
    hook = SHIM.with_name("nvidia-container-runtime-hook")
    if not hook.exists():
        pytest.skip(f"{hook} is not installed")
    code, output, stderr = lifecycle.run(bundle)
    assert code == 0, stderr
    assert parse_gpu_report(output)["smi"] == [smi_gpu_line(gpu_host.gpu_uuids[1])]
    [entry] = json.loads((bundle / "config.json").read_text())["hooks"]["prestart"]
    assert entry["path"] == str(hook) and entry["args"] == ["nvidia-container-runtime-hook", "prestart"]
    assert f"NVIDIA_CTK_CONFIG_FILE_PATH={tmp_path / 'config.toml'}" in entry["env"]


def run_with_host_nodes(lifecycle, bundle, host_dev):
    """The lifecycle with the simulated host's nodes in /dev (this private namespace's), where a real
    driver makes them: in a user namespace runc cannot mknod and bind-mounts each node from the
    device's path on the host."""
    nodes = {str(p.relative_to(host_dev)): str(p) for p in host_dev.rglob("*") if p.is_char_device()}
    dev_with_extra_nodes(nodes)
    return lifecycle.run(bundle)


USERNS_REPORT = GPU_REPORT + "; cat /proc/self/uid_map; cd /dev; stat -c 'NODE %n %u:%g %a %F' nvidia*"


@pytest.fixture(scope="module")
def userns_work():
    if os.geteuid() != 0:
        pytest.skip("needs root (device nodes, runc)")
    with userns_work_dir() as work:
        yield work


@pytest.fixture(scope="module")
def userns_gpu_host(userns_work):
    if not SHIM.exists():
        pytest.skip(f"{SHIM} is not installed (make venv)")
    ensure_hugetlb_on_v1()
    host = build_gpu_host(userns_work / "host")
    # jit-cdi keeps no create-cache entry for driver files changed less than RECENT_NS ago (their ctime
    # could still hide a racing write), and this test asserts that the second create is the cache's
    time.sleep(RECENT_NS / 1e9 + 0.1)
    return host


@pytest.mark.parametrize("runtime", ["runc", "crun"])
@pytest.mark.parametrize("mode", ["cdi", "jit-cdi", "legacy"])
def test_a_container_with_a_user_namespace_gets_its_gpu(userns_gpu_host, userns_work, runtime, mode):
    """Rootless and userns-remapped engines: the container's root is an unprivileged host uid. The
    container gets GPU 0 in every mode under both runtimes, created by Python and then by the launcher from
    its create cache. Its device nodes are the host's, bind-mounted
    (runc, and the prestart hook in legacy mode), seen inside as owned by nobody (the host's root is not
    mapped), or crun's own for config.json's devices. Failed before: legacy under both runtimes (EOVERFLOW
    making the mount target in the container's /dev), cdi and jit-cdi under crun (its state's bundle "/")."""
    gpu_host, tmp_path = userns_gpu_host, userns_work / f"{runtime}-{mode}"
    tmp_path.mkdir()
    lifecycle = lifecycle_for(runtime, gpu_host, tmp_path, mode=mode)
    # twice: the second create of the same request is the launcher's, from its create cache (the report
    # is a script in the rootfs: a backslash in config.json would send the create to Python)
    for run in ("first", "cached"):
        bundle = make_bundle(tmp_path / run, ["sh", "/report.sh"], glibc=True,
                             env=["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"])
        (bundle / "rootfs/report.sh").write_text(USERNS_REPORT + "\n")
        with_user_namespace(bundle)
        code, output, stderr = run_in_private_mount_ns(run_with_host_nodes, lifecycle, bundle,
                                                       gpu_host.root / "dev")
        assert code == 0, (run, stderr)
        check_userns_report(output, gpu_host, runtime, mode)
    log = (tmp_path / "shim.log").read_text()
    assert log.count("command create") == 1 and log.count("from the create cache") == 1, log


def check_userns_report(output, gpu_host, runtime, mode):
    seen = parse_gpu_report("\n".join(line for line in output.splitlines() if not line.startswith(("NODE", " "))))
    assert seen["smi"] == [smi_gpu_line(gpu_host.gpu_uuids[0])]
    assert {"nvidia0", "nvidiactl", "nvidia-uvm"} <= set(seen["dev"]) and "nvidia1" not in seen["dev"]
    assert "libcuda.so.1" in seen["libs"]
    assert output.splitlines()[-len(seen["dev"]) - 1].split() == ["0", str(USERNS_BASE), "65536"]   # uid_map
    nodes = {line.split()[1]: line.split(maxsplit=4)[2:] for line in output.splitlines() if line.startswith("NODE ")}
    if runtime == "crun" and mode != "legacy":
        # crun makes the nodes of config.json itself, on the host, for the container's root (its umask
        # applied to the spec's 0666)
        assert nodes["nvidia0"] == ["0:0", "644", "character special file"], nodes
    else:   # the host's node bound: owned by the host's root, which the namespace does not map
        assert nodes["nvidia0"] == ["65534:65534", "666", "character special file"], nodes


PROFILE = "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf"


@pytest.mark.parametrize("runtime", ["runc", "crun"])
@pytest.mark.parametrize("mode, devices, mask", [("cdi", "0", 0x1), ("cdi", "all", 0x3), ("jit-cdi", "1:0", 0x2)])
def test_egl_and_vulkan_see_only_the_containers_gpus(gpu_host, tmp_path, runtime, mode, devices, mask):
    """Issue 27.1: the hook entry's update-application-profile (NVIDIA 1.20's) writes, inside the real
    container's rootfs, the application profile whose EGLVisibleDGPUDevices holds the minors of the
    GPUs the container got (a MIG device: its GPU's)."""
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", f"cat {PROFILE}; echo; ls -l {PROFILE}"], glibc=True,
                         env=[f"NVIDIA_VISIBLE_DEVICES={devices}"])
    code, output, stderr = lifecycle_for(runtime, gpu_host, tmp_path, mode=mode).run(bundle)
    assert code == 0, stderr
    content, listing = output.splitlines()
    assert content == ('{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x%x]}],'
                       '"rules":[{"pattern":[],"profile":"_container_"}]}' % mask)
    assert listing.startswith("-r--r--r--")
    root_path = json.loads((bundle / "config.json").read_text())["root"]["path"]
    assert (bundle / root_path / PROFILE.lstrip("/")).read_text() == content   # in that container's rootfs
