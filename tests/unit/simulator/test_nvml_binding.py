"""cdi.nvml_binding against the simulated host's libnvidia-ml.so.1, with pynvml as the reference: both
read every GPU, every MIG device and every field of every struct the binding reads from the same
library, each in its own process (one NVML per process), and must agree, errors included. Then the
binding's own error paths: a missing library, NVML error codes and their texts, a missing symbol, a
driver without the versioned profile calls, and NOT_SUPPORTED as cdi.nvml meets it; and what the
binding costs the hook's start."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cdi.nvml import NO_DRIVER_HINT
from tests.support.simulated_host import create_in_process, marker_inventory

REPO = Path(__file__).resolve().parents[3]
LIB = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"


def build(tmp_path_factory, name: str, **options) -> Path:
    if os.geteuid() != 0 or shutil.which("gcc") is None:
        pytest.skip("a simulated host needs root (mknod) and gcc")
    root = tmp_path_factory.mktemp(name) / "host"
    create_in_process(root, **options)
    return root


@pytest.fixture(scope="module")
def a100(tmp_path_factory) -> Path:
    """3 GPUs: GPU 0 without MIG, GPU 1 with two 1g.5gb, GPU 2 with 3g.20gb, 2g.10gb and 1g.5gb."""
    return build(tmp_path_factory, "a100", gpus=3, mig_options=("1=1g.5gb,1g.5gb", "2=3g.20gb,2g.10gb,1g.5gb"))


@pytest.fixture(scope="module")
def t4(tmp_path_factory) -> Path:
    """A GPU without MIG support: the MIG calls answer NVML_ERROR_NOT_SUPPORTED."""
    if os.geteuid() != 0 or shutil.which("gcc") is None:
        pytest.skip("a simulated host needs root (mknod) and gcc")
    from simulator.host_builder import create_simulated_host

    root = tmp_path_factory.mktemp("t4") / "host"
    create_simulated_host(str(root), gpus=1, model="Tesla T4", driver_version="550.54.15", cuda_version="12.4",
                          mig_options=[])
    return root


# Reads everything through CLIENT (defined by the prelude of either side) and prints it as JSON.
# Handles differ between processes, so pointers in structs are recorded as what they point at.
READER = """
def fields(struct, pointers):
    out = record(struct)
    for name, handle in pointers.items():
        out[name] = out[name] == address(handle)   # the parent's handle, or not
    return out

def attempt(read):
    try:
        return read()
    except ERROR as e:
        return {"error": code(e), "text": str(e)}

out = {"before init": attempt(lambda: CLIENT["device_count"]())}
CLIENT["init"]()
out["driver"] = CLIENT["driver_version"]()
out["cuda"] = CLIENT["cuda_version"]()
out["count"] = CLIENT["device_count"]()
out["bad index"] = attempt(lambda: CLIENT["handle_by_index"](out["count"]))
out["gpus"] = []
for index in range(out["count"]):
    h = CLIENT["handle_by_index"](index)
    gpu = {"minor": CLIENT["minor"](h), "cc": list(CLIENT["compute_capability"](h)),
           "architecture": attempt(lambda: CLIENT["architecture"](h)),
           "mig mode": attempt(lambda: list(CLIENT["mig_mode"](h))),
           "uuid": CLIENT["uuid"](h), "name": CLIENT["name"](h), "brand": CLIENT["brand"](h),
           "pci": fields(CLIENT["pci_info"](h), {}), "memory": fields(CLIENT["memory_info"](h), {}),
           "gi profiles": [attempt(lambda: fields(CLIENT["gi_profile"](h, i), {}))
                           for i in range(GI_PROFILE_COUNT)],
           "max mig": attempt(lambda: CLIENT["max_mig"](h)), "migs": []}
    slots = gpu["max mig"] if isinstance(gpu["max mig"], int) else 1
    for slot in range(slots):
        mig = attempt(lambda: CLIENT["mig_handle"](h, slot))
        if isinstance(mig, dict):
            gpu["migs"].append(mig)
            continue
        gi_id, ci_id = CLIENT["gi_id"](mig), CLIENT["ci_id"](mig)
        gi = CLIENT["gi_by_id"](h, gi_id)
        ci = CLIENT["ci_by_id"](gi, ci_id)
        gpu["migs"].append({
            "slot": slot, "uuid": CLIENT["uuid"](mig), "gi": gi_id, "ci": ci_id,
            "memory": fields(CLIENT["memory_info"](mig), {}),
            "gi info": fields(CLIENT["gi_info"](gi), {"device": h}),
            "ci info": fields(CLIENT["ci_info"](ci), {"device": h, "gpuInstance": gi}),
            "ci profiles": [attempt(lambda: fields(CLIENT["ci_profile"](gi, p, 0), {})) for p in range(9)],
            "unknown gi": attempt(lambda: CLIENT["gi_by_id"](h, 99)),
        })
    out["gpus"].append(gpu)
print(json.dumps(out))
"""

BINDING = """
import json, sys
from cdi.nvml_binding import GPU_INSTANCE_PROFILE_COUNT as GI_PROFILE_COUNT, NvmlCallError as ERROR, Fields
from cdi.nvml_binding import handle_address as address, load_library
lib = load_library(sys.argv[1])
code = lambda e: e.code
record = lambda f: {k: record(v) if isinstance(v, Fields) else v for k, v in vars(f).items()}
CLIENT = {
    "init": lib.init, "driver_version": lib.system_driver_version, "cuda_version": lib.system_cuda_driver_version,
    "device_count": lib.device_count, "handle_by_index": lib.device_handle_by_index,
    "minor": lib.device_minor_number, "compute_capability": lib.device_cuda_compute_capability,
    "architecture": lib.device_architecture, "mig_mode": lib.device_mig_mode, "uuid": lib.device_uuid,
    "name": lib.device_name, "brand": lib.device_brand, "pci_info": lib.device_pci_info,
    "memory_info": lib.device_memory_info, "gi_profile": lib.device_gpu_instance_profile_info,
    "max_mig": lib.device_max_mig_device_count, "mig_handle": lib.device_mig_device_handle_by_index,
    "gi_id": lib.device_gpu_instance_id, "ci_id": lib.device_compute_instance_id,
    "gi_by_id": lib.device_gpu_instance_by_id, "gi_info": lib.gpu_instance_info,
    "ci_by_id": lib.gpu_instance_compute_instance_by_id, "ci_info": lib.compute_instance_info,
    "ci_profile": lib.gpu_instance_compute_instance_profile_info,
}
"""

PYNVML = """
import ctypes, json, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)   # pynvml then gets this object for the soname
import pynvml as n
ERROR, GI_PROFILE_COUNT = n.NVMLError, n.NVML_GPU_INSTANCE_PROFILE_COUNT
code = lambda e: e.value
address = lambda h: ctypes.cast(h, ctypes.c_void_p).value or 0

def record(struct):   # a ctypes struct as the binding's Fields are: str, int, nested dicts
    out = {}
    for name, kind, *_ in struct._fields_:
        value = getattr(struct, name)
        if hasattr(value, "_fields_"):
            value = record(value)
        elif isinstance(value, bytes):
            value = value.decode()
        elif issubclass(kind, ctypes._Pointer):
            value = address(value)
        out[name] = value
    return out

def text(read):   # pynvml gives str or bytes, depending on its version
    return lambda *args: (lambda value: value.decode() if isinstance(value, bytes) else value)(read(*args))
CLIENT = {
    "init": n.nvmlInit, "driver_version": text(n.nvmlSystemGetDriverVersion),
    "cuda_version": n.nvmlSystemGetCudaDriverVersion,
    "device_count": n.nvmlDeviceGetCount, "handle_by_index": n.nvmlDeviceGetHandleByIndex,
    "minor": n.nvmlDeviceGetMinorNumber, "compute_capability": n.nvmlDeviceGetCudaComputeCapability,
    "architecture": n.nvmlDeviceGetArchitecture, "mig_mode": n.nvmlDeviceGetMigMode,
    "uuid": text(n.nvmlDeviceGetUUID), "name": text(n.nvmlDeviceGetName), "brand": n.nvmlDeviceGetBrand,
    "pci_info": n.nvmlDeviceGetPciInfo, "memory_info": n.nvmlDeviceGetMemoryInfo,
    "gi_profile": n.nvmlDeviceGetGpuInstanceProfileInfo, "max_mig": n.nvmlDeviceGetMaxMigDeviceCount,
    "mig_handle": n.nvmlDeviceGetMigDeviceHandleByIndex, "gi_id": n.nvmlDeviceGetGpuInstanceId,
    "ci_id": n.nvmlDeviceGetComputeInstanceId, "gi_by_id": n.nvmlDeviceGetGpuInstanceById,
    "gi_info": n.nvmlGpuInstanceGetInfo, "ci_by_id": n.nvmlGpuInstanceGetComputeInstanceById,
    "ci_info": n.nvmlComputeInstanceGetInfo, "ci_profile": n.nvmlGpuInstanceGetComputeInstanceProfileInfo,
}
"""


def python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def read_all(prelude: str, root: Path) -> dict:
    done = python(prelude + READER, str(root / LIB))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("host", ["a100", "t4"])
def test_the_binding_reads_what_pynvml_reads(host, request):
    root = request.getfixturevalue(host)
    ours, reference = read_all(BINDING, root), read_all(PYNVML, root)
    assert ours == reference
    # and it is the host the simulator built, not two clients agreeing on nothing
    inventory = marker_inventory(root)
    assert [g["uuid"] for g in ours["gpus"]] == [g["uuid"] for g in inventory["gpus"]]
    assert ([[m["uuid"] for m in g["migs"] if "uuid" in m] for g in ours["gpus"]]
            == [[m["uuid"] for m in g["mig_devices"]] for g in inventory["gpus"]])
    assert ours["before init"] == {"error": 1, "text": "Uninitialized"}
    assert ours["bad index"]["error"] == 2


def test_every_struct_field_is_read_on_the_a100(a100):
    ours = read_all(BINDING, a100)
    gpu = ours["gpus"][2]
    assert gpu["pci"]["busId"] == inventory_gpu(a100, 2)["pci_bus_id"] and gpu["pci"]["domain"] == 0
    named = [p for p in gpu["gi profiles"] if "error" not in p]
    assert {p["name"] for p in named} >= {"MIG 1g.5gb", "MIG 2g.10gb", "MIG 3g.20gb", "MIG 7g.40gb"}
    assert all(p["version"] == 0x02000098 for p in named)
    mig = gpu["migs"][0]
    assert mig["gi info"]["device"] is True and mig["ci info"]["gpuInstance"] is True
    assert mig["gi info"]["placement"]["size"] > 0
    assert any(p.get("version") == 0x02000088 and p["sliceCount"] == 3 for p in mig["ci profiles"])
    assert mig["unknown gi"]["error"] == 6   # NOT_FOUND, told apart from NOT_SUPPORTED
    assert ours["gpus"][0]["gi profiles"][0]["error"] == 3


def inventory_gpu(root: Path, index: int) -> dict:
    return marker_inventory(root)["gpus"][index]


def test_a_missing_library_is_library_not_found(tmp_path):
    from cdi.nvml_binding import ERROR_LIBRARY_NOT_FOUND, NvmlCallError, load_library

    with pytest.raises(NvmlCallError) as err:
        load_library(str(tmp_path / "libnvidia-ml.so.1"))
    assert err.value.code == ERROR_LIBRARY_NOT_FOUND
    assert err.value.text == f"{tmp_path}/libnvidia-ml.so.1: cannot open shared object file: No such file or directory"


def test_no_driver_at_slash_is_the_no_driver_message():
    if subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout.count("libnvidia-ml.so.1"):
        pytest.skip("this machine has an NVIDIA driver")
    done = python("""
        from cdi.nvml import NvmlError, load_inventory
        try:
            load_inventory("/")
        except NvmlError as e:
            print(e.what, "|", e.where)
        """)
    assert done.stdout.strip() == (f"no NVIDIA driver: libnvidia-ml.so.1 is not installed; {NO_DRIVER_HINT} "
                                   "| driver root /"), done.stderr


def test_a_missing_symbol_is_function_not_found_with_its_name(t4):
    done = python("""
        import sys
        from cdi.nvml_binding import NvmlCallError, load_library
        lib = load_library(sys.argv[1])
        try:
            lib._call("nvmlDeviceGetNoSuchThing")
        except NvmlCallError as e:
            print(e.code, e.text)
        """, str(t4 / LIB))
    assert done.stdout.strip() == "13 nvmlDeviceGetNoSuchThing: Function Not Found", done.stderr


def test_a_driver_without_the_versioned_profile_calls_is_read_through_v1(a100):
    """Drivers before the ...ProfileInfoV calls (R470) have only the v1 structs, without names:
    cdi.nvml then builds the profile name from slices and memory, as nvidia-smi shows it."""
    done = python("""
        import json, sys
        from cdi.nvml import _gi_profiles
        from cdi.nvml_binding import NvmlLibrary, load_library

        class WithoutVersionedCalls:   # the symbol table of such a driver
            def __init__(self, cdll):
                self.cdll = cdll
            def __getattr__(self, name):
                if name.endswith("ProfileInfoV"):
                    raise AttributeError(name)
                return getattr(self.cdll, name)

        new = load_library(sys.argv[1])
        old = NvmlLibrary(WithoutVersionedCalls(new._lib))
        new.init()
        gpu = new.device_handle_by_index(1)
        gi = new.device_gpu_instance_by_id(gpu, new.device_gpu_instance_id(new.device_mig_device_handle_by_index(gpu, 0)))
        pairs = [(old.device_gpu_instance_profile_info(gpu, 0), new.device_gpu_instance_profile_info(gpu, 0)),
                 (old.gpu_instance_compute_instance_profile_info(gi, 0, 0),
                  new.gpu_instance_compute_instance_profile_info(gi, 0, 0))]
        print(json.dumps([[{f: v for f, v in vars(s).items() if f not in ("version", "name")}
                           for s in pair] + [pair[0].version, pair[0].name] for pair in pairs]))
        named, built = _gi_profiles(new, gpu), _gi_profiles(old, gpu)
        print(json.dumps([sorted(named) == sorted(built), built[19], built[9]]))
        """, str(a100 / LIB))
    assert done.returncode == 0, done.stderr
    structs, names = done.stdout.splitlines()
    for old, new, version, name in json.loads(structs):
        assert old == new and old["sliceCount"] == 1 and (version, name) == (0, "")
    assert json.loads(names) == [True, ["1g.5gb", 1], ["3g.20gb", 3]]   # profile ids 19 and 9


def test_not_supported_is_what_cdi_nvml_passes_over(t4):
    """MIG on a T4: NVML_ERROR_NOT_SUPPORTED, read as "MIG disabled"; the GPU is still listed."""
    done = python("""
        import sys
        from cdi.nvml import load_inventory
        gpu, = load_inventory(sys.argv[1]).gpus
        print(gpu.mig_enabled, gpu.architecture, gpu.name, len(gpu.mig_devices))
        """, str(t4))
    assert done.stdout.split() == ["False", "Turing", "Tesla", "T4", "0"], done.stderr


def test_an_nvml_error_is_one_message_with_nvmls_own_text(tmp_path_factory):
    """A driver whose control node cannot be opened: nvmlInit_v2 answers DRIVER_NOT_LOADED, reported
    with nvmlErrorString's text. (A host of its own: its dev/nvidiactl is removed.)"""
    root = build(tmp_path_factory, "no-ctl", gpus=1, mig_options=())
    (root / "dev/nvidiactl").unlink()
    done = python("""
        import sys
        from cdi.nvml import NvmlError, load_inventory
        try:
            load_inventory(sys.argv[1])
        except NvmlError as e:
            print(e.what, "|", e.where)
        """, str(root))
    library = os.path.realpath(root / LIB)   # the library that answered so, as gct-nvml-inventory names it
    assert done.stdout.strip() == f"NVML initialisation failed: Driver Not Loaded | {library}", done.stderr


def test_the_hooks_nvml_path_imports_neither_pynvml_nor_what_it_needed(a100):
    """Speed: reading the inventory as the prestart hook does (python -I -S) imports no pynvml, none
    of ctypes.util, string or threading, which pynvml and the old lock brought in, and not even
    ctypes (the binding's declarations are compiled ahead: cdi/_nvml_ffi.py)."""
    code = (f"import sys; sys.path[:0] = {[str(REPO), *sys.path]!r}\n"
            "from cdi.nvml import load_inventory\n"
            f"assert load_inventory({str(a100)!r}).gpus\n"
            "print(sorted(m for m in ('pynvml', 'ctypes', 'ctypes.util', 'string', 'threading', 'cffi')\n"
            "             if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.stdout.strip() == "[]", done.stderr


def test_the_compiled_declarations_are_those_of_the_build_script():
    """cdi/_nvml_ffi.py is generated from cdi/nvml_ffi_build.py's CDEF and committed: regenerate it
    (`python -m cdi.nvml_ffi_build`) whenever CDEF changes."""
    from cdi.nvml_ffi_build import OUTPUT, generated_source

    assert OUTPUT.read_text() == generated_source()
