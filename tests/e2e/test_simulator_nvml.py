"""The simulated libnvidia-ml.so.1 through the real pynvml: every NVML function of docs/reference.md#nvml, with
the values the host was built with, and the errors the real library gives for bad handles, indices,
versions and states. One NVML per process: every check runs in its own Python subprocess."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from simulator.host_builder import create_simulated_host

pytestmark = pytest.mark.e2e

LIB = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"

PRELUDE = """
import ctypes, json, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import pynvml as n

def err(f, *args):
    try:
        f(*args)
    except n.NVMLError as e:
        return e.value
    return 0

def s(v):
    return v.decode() if isinstance(v, bytes) else v

out = {}
"""


def run_nvml(root: str, body: str) -> dict:
    """Run `body` (which fills `out`) against the root's library in a fresh interpreter."""
    code = PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    done = subprocess.run([sys.executable, "-c", code, os.path.join(root, LIB)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def marker(root: str) -> dict:
    with open(os.path.join(root, ".nvidia-simulated-host.json")) as f:
        return json.load(f)["inventory"]


def build(tmp_path_factory, name: str, **options) -> str:
    if os.geteuid() != 0 or not shutil.which("gcc"):
        pytest.skip("a simulated host needs root (mknod) and gcc")
    root = str(tmp_path_factory.mktemp(name) / "host")
    defaults = dict(gpus=2, model="NVIDIA A100-SXM4-40GB", driver_version="550.54.15", cuda_version="12.4")
    create_simulated_host(root, **{**defaults, **options})
    return root


@pytest.fixture(scope="module")
def a100(tmp_path_factory):
    return build(tmp_path_factory, "a100", gpus=3, mig_options=["1=3g.20gb,1g.5gb", "2=7g.40gb"])


def test_system_queries_and_every_gpu_field(a100):
    inv = marker(a100)
    out = run_nvml(a100, """
        n.nvmlInit()
        out["driver"] = s(n.nvmlSystemGetDriverVersion())
        out["cuda"] = [n.nvmlSystemGetCudaDriverVersion(), n.nvmlSystemGetCudaDriverVersion_v2()]
        out["gpus"] = []
        for i in range(n.nvmlDeviceGetCount()):
            h = n.nvmlDeviceGetHandleByIndex(i)
            pci = n.nvmlDeviceGetPciInfo_v3(h)
            mem, mem2 = n.nvmlDeviceGetMemoryInfo(h), n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
            uuid = s(n.nvmlDeviceGetUUID(h))
            out["gpus"].append({
                "index": n.nvmlDeviceGetIndex(h), "name": s(n.nvmlDeviceGetName(h)), "uuid": uuid,
                "minor": n.nvmlDeviceGetMinorNumber(h), "bus_id": s(pci.busId), "legacy": s(pci.busIdLegacy),
                "pci": [pci.domain, pci.bus, pci.device, pci.pciDeviceId],
                "mem": [mem.total, mem.free + mem.used, mem2.total, mem2.free + mem2.reserved + mem2.used],
                "brand": n.nvmlDeviceGetBrand(h), "arch": n.nvmlDeviceGetArchitecture(h),
                "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)),
                "by_uuid": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(uuid)),
                "by_uuid_lower": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(uuid.lower())),
                "mig_mode": n.nvmlDeviceGetMigMode(h), "max_mig": n.nvmlDeviceGetMaxMigDeviceCount(h),
                "is_mig": n.nvmlDeviceIsMigDeviceHandle(h).value,
            })
        n.nvmlShutdown()
    """)
    assert out["driver"] == "550.54.15" and out["cuda"] == [12040, 12040]
    assert len(out["gpus"]) == 3
    for i, (got, want) in enumerate(zip(out["gpus"], inv["gpus"])):
        assert got["index"] == got["by_uuid"] == got["by_uuid_lower"] == i
        assert (got["name"], got["uuid"], got["minor"], got["bus_id"]) == \
               (want["name"], want["uuid"], want["minor"], want["pci_bus_id"])
        assert got["legacy"] == want["pci_bus_id"][4:]
        assert got["pci"][0] == 0 and got["pci"][1] == int(want["pci_bus_id"][9:11], 16)
        assert got["pci"][3] == 0x20B010DE
        assert got["mem"] == [40960 << 20] * 4
        assert (got["brand"], got["arch"], got["cc"]) == (14, 7, [8, 0])   # NVIDIA, Ampere
        assert got["is_mig"] == 0
    assert [g["mig_mode"] for g in out["gpus"]] == [[0, 0], [1, 1], [1, 1]]
    assert [g["max_mig"] for g in out["gpus"]] == [0, 7, 7]


def test_mig_devices_instances_and_profiles(a100):
    inv = marker(a100)
    out = run_nvml(a100, """
        n.nvmlInit()
        gpu = n.nvmlDeviceGetHandleByIndex(1)
        out["migs"] = []
        for k in range(n.nvmlDeviceGetMaxMigDeviceCount(gpu)):
            try:
                m = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu, k)
            except n.NVMLError_NotFound:
                out.setdefault("empty", []).append(k)
                continue
            gi_id, ci_id = n.nvmlDeviceGetGpuInstanceId(m), n.nvmlDeviceGetComputeInstanceId(m)
            gi = n.nvmlDeviceGetGpuInstanceById(gpu, gi_id)
            info = n.nvmlGpuInstanceGetInfo(gi)
            ci = n.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
            cinfo = n.nvmlComputeInstanceGetInfo(ci)
            cinfo2 = n.nvmlComputeInstanceGetInfo_v2(ci)
            a = n.nvmlDeviceGetAttributes_v2(m)
            gp1 = {}
            gp2 = {}
            for p in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT):
                try:
                    v1 = n.nvmlDeviceGetGpuInstanceProfileInfo(gpu, p, version=1)
                    v2 = n.nvmlDeviceGetGpuInstanceProfileInfo(gpu, p)
                except n.NVMLError as e:
                    continue
                gp1[v1.id] = [p, v1.sliceCount, v1.memorySizeMB, v1.instanceCount]
                gp2[v2.id] = [s(v2.name), v2.sliceCount, v2.memorySizeMB]
            cp1 = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, cinfo.profileId, 0, version=1)
            cp2 = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, cinfo.profileId, 0)
            out["migs"].append({
                "uuid": s(n.nvmlDeviceGetUUID(m)), "name": s(n.nvmlDeviceGetName(m)),
                "is_mig": n.nvmlDeviceIsMigDeviceHandle(m).value, "index": n.nvmlDeviceGetIndex(m),
                "parent": s(n.nvmlDeviceGetUUID(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m))),
                "by_uuid": s(n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByUUID(s(n.nvmlDeviceGetUUID(m))))),
                "gi": gi_id, "ci": ci_id, "gi_profile": info.profileId,
                "gi_device": s(n.nvmlDeviceGetUUID(info.device)), "placement": [info.placement.start, info.placement.size],
                "ci_info": [cinfo.id, cinfo.profileId, cinfo.placement.start, cinfo.placement.size,
                            s(n.nvmlDeviceGetUUID(cinfo.device)), n.nvmlGpuInstanceGetInfo(cinfo.gpuInstance).id],
                "ci_info_v2_id": cinfo2.id,
                "attrs": [a.multiprocessorCount, a.gpuInstanceSliceCount, a.computeInstanceSliceCount, a.memorySizeMB],
                "mem": n.nvmlDeviceGetMemoryInfo(m).total,
                "pci": s(n.nvmlDeviceGetPciInfo(m).busId),
                "gp1": gp1, "gp2": gp2,
                "cp": [cp1.sliceCount, s(cp2.name), cp2.sliceCount, cp2.instanceCount],
            })
        n.nvmlShutdown()
    """)
    want = inv["gpus"][1]["mig_devices"]
    parent = inv["gpus"][1]["uuid"]
    assert out["empty"] == [2, 3, 4, 5, 6]
    got = out["migs"]
    assert [m["uuid"] for m in got] == [m["by_uuid"] for m in got] == [m["uuid"] for m in want]
    assert [m["name"] for m in got] == ["NVIDIA A100-SXM4-40GB MIG 3g.20gb", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"]
    assert all(m["is_mig"] == 1 and m["parent"] == m["gi_device"] == parent for m in got)
    assert [m["index"] for m in got] == [0, 1]
    assert [(m["gi"], m["ci"]) for m in got] == [(w["gi"], w["ci"]) for w in want] == [(1, 0), (11, 0)]
    assert [m["gi_profile"] for m in got] == [9, 19]
    assert [m["placement"] for m in got] == [[0, 4], [4, 1]]
    assert [m["ci_info"] for m in got] == [[0, 2, 0, 3, parent, 1], [0, 0, 0, 1, parent, 11]]
    assert [m["attrs"] for m in got] == [[42, 3, 3, 19968], [14, 1, 1, 4864]]
    assert [m["mem"] for m in got] == [19968 << 20, 4864 << 20]
    assert all(m["pci"] == inv["gpus"][1]["pci_bus_id"] for m in got)
    assert [m["cp"] for m in got] == [[3, "MIG 3g.20gb", 3, 1], [1, "MIG 1g.5gb", 1, 1]]
    gp1, gp2 = got[0]["gp1"], got[0]["gp2"]
    # profile id -> [profile index, slices, memory, instances]: the real A100-40GB table
    assert gp1 == {"19": [0, 1, 4864, 7], "14": [1, 2, 9856, 3], "9": [2, 3, 19968, 2], "5": [3, 4, 19968, 1],
                   "0": [4, 7, 40192, 1], "20": [7, 1, 4864, 1], "15": [9, 1, 9856, 4]}
    assert {k: v[0] for k, v in gp2.items()} == {"19": "MIG 1g.5gb", "14": "MIG 2g.10gb", "9": "MIG 3g.20gb",
                                                 "5": "MIG 4g.20gb", "0": "MIG 7g.40gb", "20": "MIG 1g.5gb+me",
                                                 "15": "MIG 1g.10gb"}


def test_a_compute_instance_smaller_than_its_gpu_instance(tmp_path_factory):
    """A 1c.3g.20gb device (`--mig 1=1c.3g.20gb`) as NVML reports one: its name, its compute instance's
    profile (1 slice) and placement, the attributes (its share of the multiprocessors, the GPU
    instance's slices and memory); the toolkit's inventory names its profile 1c.3g.20gb."""
    root = build(tmp_path_factory, "small-ci", mig_options=["1=1c.3g.20gb,3g.20gb"])
    out = run_nvml(root, """
        n.nvmlInit()
        gpu = n.nvmlDeviceGetHandleByIndex(1)
        out["migs"] = []
        for k in range(2):
            m = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu, k)
            gi = n.nvmlDeviceGetGpuInstanceById(gpu, n.nvmlDeviceGetGpuInstanceId(m))
            ci = n.nvmlGpuInstanceGetComputeInstanceById(gi, n.nvmlDeviceGetComputeInstanceId(m))
            cinfo = n.nvmlComputeInstanceGetInfo(ci)
            cp = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, cinfo.profileId, 0)
            listed, count = (n.c_nvmlComputeInstance_t * 7)(), ctypes.c_uint(0)
            n.nvmlGpuInstanceGetComputeInstances(gi, cinfo.profileId, listed, ctypes.byref(count))
            a = n.nvmlDeviceGetAttributes_v2(m)
            out["migs"].append({
                "name": s(n.nvmlDeviceGetName(m)), "ci_profile": [cinfo.profileId, cp.sliceCount, s(cp.name)],
                "ci_placement": [cinfo.placement.start, cinfo.placement.size], "listed": count.value,
                "attrs": [a.multiprocessorCount, a.gpuInstanceSliceCount, a.computeInstanceSliceCount,
                          a.memorySizeMB]})
        n.nvmlShutdown()
    """)
    small, whole = out["migs"]
    assert small == {"name": "NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", "ci_profile": [0, 1, "MIG 1c.3g.20gb"],
                     "ci_placement": [0, 1], "listed": 1, "attrs": [14, 3, 1, 19968]}
    assert whole == {"name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "ci_profile": [2, 3, "MIG 3g.20gb"],
                     "ci_placement": [0, 3], "listed": 1, "attrs": [42, 3, 3, 19968]}
    done = subprocess.run([sys.executable, "-c", "import sys; from cdi.nvml import load_inventory; "
                           "print([m.profile for m in load_inventory(sys.argv[1]).gpus[1].mig_devices])", root],
                          capture_output=True, text=True)
    assert done.stdout.strip() == "['1c.3g.20gb', '3g.20gb']", done.stderr
    smi = subprocess.run([os.path.join(root, "usr/bin/nvidia-smi"), "-L"], capture_output=True, text=True)
    assert "MIG 1c.3g.20gb  Device  0:" in smi.stdout and "MIG 3g.20gb     Device  1:" in smi.stdout, smi.stdout


def test_errors_for_bad_handles_indices_versions_and_states(a100):
    out = run_nvml(a100, """
        n._LoadNvmlLibrary()
        out["before_init"] = err(n.nvmlDeviceGetCount)
        out["shutdown_before_init"] = err(n.nvmlShutdown)
        n.nvmlInit()
        full = n.nvmlDeviceGetHandleByIndex(0)          # MIG disabled
        parent = n.nvmlDeviceGetHandleByIndex(1)
        mig = n.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1)   # 1g.5gb, GI 11
        gi = n.nvmlDeviceGetGpuInstanceById(parent, 11)
        forged = ctypes.cast(ctypes.c_void_p(0xdeadbeef), n.c_nvmlDevice_t)
        null = n.c_nvmlDevice_t()
        out.update({
            "index_past_end": err(n.nvmlDeviceGetHandleByIndex, 3),
            "index_huge": err(n.nvmlDeviceGetHandleByIndex, 2**32 - 1),
            "unknown_uuid": err(n.nvmlDeviceGetHandleByUUID, "GPU-00000000-0000-0000-0000-000000000000"),
            "forged_name": err(n.nvmlDeviceGetName, forged),
            "forged_uuid": err(n.nvmlDeviceGetUUID, forged),
            "null_minor": err(n.nvmlDeviceGetMinorNumber, null),
            "null_mig_mode": err(n.nvmlDeviceGetMigMode, null),
            "forged_gi": err(n.nvmlGpuInstanceGetInfo, ctypes.cast(ctypes.c_void_p(0x1000), n.c_nvmlGpuInstance_t)),
            "forged_ci": err(n.nvmlComputeInstanceGetInfo, ctypes.cast(ctypes.c_void_p(0x1000), n.c_nvmlComputeInstance_t)),
            "mig_index_empty": err(n.nvmlDeviceGetMigDeviceHandleByIndex, parent, 2),
            "mig_index_past_max": err(n.nvmlDeviceGetMigDeviceHandleByIndex, parent, 7),
            "mig_index_mig_disabled": err(n.nvmlDeviceGetMigDeviceHandleByIndex, full, 0),
            "gi_mig_disabled": err(n.nvmlDeviceGetGpuInstanceById, full, 0),
            "gi_unknown_id": err(n.nvmlDeviceGetGpuInstanceById, parent, 5),
            "gi_of_mig_handle": err(n.nvmlDeviceGetGpuInstanceById, mig, 11),
            "gi_profile_mig_disabled": err(n.nvmlDeviceGetGpuInstanceProfileInfo, full, 0),
            "gi_profile_out_of_range": err(n.nvmlDeviceGetGpuInstanceProfileInfo, parent, n.NVML_GPU_INSTANCE_PROFILE_COUNT),
            "gi_profile_not_on_a100": err(n.nvmlDeviceGetGpuInstanceProfileInfo, parent, n.NVML_GPU_INSTANCE_PROFILE_6_SLICE),
            "ci_unknown_id": err(n.nvmlGpuInstanceGetComputeInstanceById, gi, 1),
            "ci_profile_bigger_than_gi": err(n.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, n.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, 0),
            "ci_engine_profile": err(n.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, 0, 1),
            "attributes_of_full_gpu": err(n.nvmlDeviceGetAttributes_v2, full),
            "gi_id_of_full_gpu": err(n.nvmlDeviceGetGpuInstanceId, full),
            "ci_id_of_full_gpu": err(n.nvmlDeviceGetComputeInstanceId, full),
            "parent_of_full_gpu": err(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, full),
            "minor_of_mig": err(n.nvmlDeviceGetMinorNumber, mig),
            "mig_mode_of_mig": err(n.nvmlDeviceGetMigMode, mig),
            "memory_v2_wrong_version": err(n.nvmlDeviceGetMemoryInfo, full, 0x01000028),
            "name_buffer_too_small": n.nvmlLib.nvmlDeviceGetName(full, ctypes.create_string_buffer(8), 8),
            "strings": [s(n.nvmlErrorString(c)) for c in (0, 1, 2, 3, 6, 7, 9, 25, 29, 999, 12345)],
        })
        n.nvmlInit()                      # reference counted: one shutdown leaves it initialised
        n.nvmlShutdown()
        out["after_one_shutdown"] = n.nvmlDeviceGetCount()
        n.nvmlShutdown()
        out["stale_handle_after_shutdown"] = err(n.nvmlDeviceGetName, full)
        out["second_shutdown"] = err(n.nvmlShutdown)
        n.nvmlInit()
        out["reinit_count"] = n.nvmlDeviceGetCount()
    """)
    INVALID_ARGUMENT, NOT_SUPPORTED, NOT_FOUND, UNINITIALIZED = 2, 3, 6, 1
    assert out.pop("before_init") == out.pop("shutdown_before_init") == UNINITIALIZED
    assert out.pop("strings") == ["Success", "Uninitialized", "Invalid Argument", "Not Supported", "Not Found",
                                  "Insufficient Size", "Driver Not Loaded", "Argument version mismatch",
                                  "Invalid state", "Unknown Error", "Unknown Error"]
    assert out == {
        "index_past_end": INVALID_ARGUMENT, "index_huge": INVALID_ARGUMENT, "unknown_uuid": NOT_FOUND,
        "forged_name": INVALID_ARGUMENT, "forged_uuid": INVALID_ARGUMENT, "null_minor": INVALID_ARGUMENT,
        "null_mig_mode": INVALID_ARGUMENT, "forged_gi": INVALID_ARGUMENT, "forged_ci": INVALID_ARGUMENT,
        "mig_index_empty": NOT_FOUND, "mig_index_past_max": INVALID_ARGUMENT,
        "mig_index_mig_disabled": INVALID_ARGUMENT, "gi_mig_disabled": 29, "gi_unknown_id": NOT_FOUND,
        "gi_of_mig_handle": INVALID_ARGUMENT, "gi_profile_mig_disabled": NOT_SUPPORTED,
        "gi_profile_out_of_range": INVALID_ARGUMENT, "gi_profile_not_on_a100": NOT_SUPPORTED,
        "ci_unknown_id": NOT_FOUND, "ci_profile_bigger_than_gi": NOT_SUPPORTED, "ci_engine_profile": INVALID_ARGUMENT,
        "attributes_of_full_gpu": NOT_SUPPORTED, "gi_id_of_full_gpu": NOT_SUPPORTED,
        "ci_id_of_full_gpu": NOT_SUPPORTED, "parent_of_full_gpu": INVALID_ARGUMENT, "minor_of_mig": NOT_SUPPORTED,
        "mig_mode_of_mig": INVALID_ARGUMENT, "memory_v2_wrong_version": 25, "name_buffer_too_small": 7,
        "after_one_shutdown": 3, "stale_handle_after_shutdown": UNINITIALIZED, "second_shutdown": UNINITIALIZED,
        "reinit_count": 3,
    }


def test_other_models_report_their_own_identity_and_profiles(tmp_path_factory):
    h100 = build(tmp_path_factory, "h100", gpus=1, model="NVIDIA H100 80GB HBM3", driver_version="535.104.05",
                 cuda_version="12.2", mig_options=["0=1g.10gb,2g.20gb,3g.40gb"])
    out = run_nvml(h100, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out["id"] = [s(n.nvmlDeviceGetName(h)), n.nvmlDeviceGetArchitecture(h), list(n.nvmlDeviceGetCudaComputeCapability(h)),
                     s(n.nvmlSystemGetDriverVersion()), n.nvmlSystemGetCudaDriverVersion()]
        out["migs"] = [s(n.nvmlDeviceGetName(n.nvmlDeviceGetMigDeviceHandleByIndex(h, k))).split(" MIG ")[1] for k in range(3)]
    """)
    assert out["id"] == ["NVIDIA H100 80GB HBM3", 9, [9, 0], "535.104.05", 12020]
    assert out["migs"] == ["1g.10gb", "2g.20gb", "3g.40gb"]

    t4 = build(tmp_path_factory, "t4", gpus=1, model="Tesla T4")
    out = run_nvml(t4, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out["id"] = [s(n.nvmlDeviceGetName(h)), n.nvmlDeviceGetBrand(h), n.nvmlDeviceGetArchitecture(h)]
        out["mig_mode"] = err(n.nvmlDeviceGetMigMode, h)
        out["max_mig"] = n.nvmlDeviceGetMaxMigDeviceCount(h)
        out["gi_profile"] = err(n.nvmlDeviceGetGpuInstanceProfileInfo, h, 0)
        out["gi"] = err(n.nvmlDeviceGetGpuInstanceById, h, 0)
    """)
    assert out == {"id": ["Tesla T4", 2, 6], "mig_mode": 3, "max_mig": 0, "gi_profile": 3, "gi": 3}


def test_load_inventory_matches_the_marker(a100):
    code = f"""
import json
from cdi.record import asdict
from cdi.nvml import load_inventory
print(json.dumps(asdict(load_inventory({a100!r}))))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    inv, want = json.loads(done.stdout), marker(a100)
    assert (inv["driver_version"], inv["cuda_version"]) == ("550.54.15", "12.4")
    for got, exp in zip(inv["gpus"], want["gpus"], strict=True):
        assert (got["uuid"], got["minor"], got["pci_bus_id"], got["mig_enabled"]) == \
               (exp["uuid"], exp["minor"], exp["pci_bus_id"], exp["mig_enabled"])
        assert (got["brand"], got["architecture"], got["compute_capability"]) == ("Nvidia", "Ampere", "8.0")
        assert [(m["uuid"], m["gi"], m["ci"], m["profile"], m["gi_cap_minor"], m["ci_cap_minor"])
                for m in got["mig_devices"]] == \
               [(m["uuid"], m["gi"], m["ci"], m["profile"], m["gi_cap_minor"], m["ci_cap_minor"])
                for m in exp["mig_devices"]]


def test_libcuda_reports_the_cuda_version(a100):
    code = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); v = ctypes.c_int(); "
            "print(lib.cuDriverGetVersion(ctypes.byref(v)), v.value, lib.cuInit(0))")
    done = subprocess.run([sys.executable, "-c", code, os.path.join(a100, "usr/lib/x86_64-linux-gnu/libcuda.so.1")],
                          capture_output=True, text=True)
    assert done.stdout.split() == ["0", "12040", "100"]   # CUDA_SUCCESS, 12.4, CUDA_ERROR_NO_DEVICE


def test_lookup_by_pci_bus_id_and_instance_listing(a100):
    inv = marker(a100)
    out = run_nvml(a100, """
        n.nvmlInit()
        out["by_bus"] = [n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(b))
                         for b in ("00000000:0F:00.0", "0000:0f:00.0", "0f:00.0", "00000000:47:00.0")]
        out["bus_unknown"] = err(n.nvmlDeviceGetHandleByPciBusId, "00000000:99:00.0")
        out["bus_malformed"] = err(n.nvmlDeviceGetHandleByPciBusId, "gpu-one")
        out["nvml_version"] = s(n.nvmlSystemGetNVMLVersion())
        gpu = n.nvmlDeviceGetHandleByIndex(1)
        gis = (n.c_nvmlGpuInstance_t * 7)()
        count = ctypes.c_uint(0)
        n.nvmlDeviceGetGpuInstances(gpu, 19, gis, ctypes.byref(count))         # profile id 19 = 1g.5gb
        out["gis_1g"] = [n.nvmlGpuInstanceGetInfo(gis[i]).id for i in range(count.value)]
        n.nvmlDeviceGetGpuInstances(gpu, 0, gis, ctypes.byref(count))          # 7g.40gb: none here
        out["gis_7g"] = count.value
        cis = (n.c_nvmlComputeInstance_t * 7)()
        n.nvmlGpuInstanceGetComputeInstances(n.nvmlDeviceGetGpuInstanceById(gpu, 1), 2, cis, ctypes.byref(count))
        out["cis_of_3g"] = [n.nvmlComputeInstanceGetInfo(cis[i]).id for i in range(count.value)]
        out["gis_mig_disabled"] = err(n.nvmlDeviceGetGpuInstances, n.nvmlDeviceGetHandleByIndex(0), 19, gis,
                                      ctypes.byref(count))
    """)
    assert out == {"by_bus": [1, 1, 1, 2], "bus_unknown": 6, "bus_malformed": 2, "nvml_version": "12.550.54.15",
                   "gis_1g": [inv["gpus"][1]["mig_devices"][1]["gi"]], "gis_7g": 0, "cis_of_3g": [0],
                   "gis_mig_disabled": 29}
