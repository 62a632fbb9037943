"""A small binding of libnvidia-ml.so.1: exactly the NVML calls cdi.nvml makes, nothing more.

Why not pynvml (DESIGN names nvidia-ml-py as the NVML dependency; this is a deliberate deviation for
speed): the prestart hook reads NVML at every GPU container start, and `import pynvml` alone cost
~32 ms of wall time on the project's machines (~37 ms measured with `python -I -S`, ctypes' ~5 ms
included: pynvml builds ~370 ctypes classes at import, and imports ctypes.util, string and threading
for things the hook never uses), while the whole hook took ~58-66 ms. pynvml stays a test
dependency: the tests use it as an independent NVML client to check this binding and the simulated
library.

Why cffi and not ctypes: with ctypes this binding cost ~3 ms of the hook's start (ctypes' import
~2.2-2.7 ms on top of what the hook has loaded, plus the struct classes), which made it the largest
import on the hook's path. The declarations are instead compiled ahead of time (cffi's out-of-line ABI
mode, cdi/nvml_ffi_build.py) into cdi/_nvml_ffi.py, a plain module that needs only `_cffi_backend`,
which the hook has loaded already for libcontainer_c: ~0.15 ms. It is committed, so the editable
install, the wheel and the packages ship the same file; a test holds it to its declarations.

The ABI is the one real drivers export (nvml.h, e.g. go-nvml's copy of it):
- Symbols: nvml.h maps some calls to versioned symbols unless NVML_NO_UNVERSIONED_FUNC_DEFS is set,
  and those versioned names are what a C program built against nvml.h calls: nvmlInit_v2,
  nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetPciInfo_v3 and
  nvmlComputeInstanceGetInfo_v2. Every other call used here has one, unversioned, symbol.
- Versioned structs: GPU-instance and compute-instance profile info are read as v2 (version field
  first, a `name` at the end) through nvmlDeviceGetGpuInstanceProfileInfoV and
  nvmlGpuInstanceGetComputeInstanceProfileInfoV, which every MIG driver since R470 accepts; a
  driver without those symbols is read through the v1 calls, and the profile then has no name.
- Memory info is the v1 nvmlMemory_t (total, free, used): what nvmlDeviceGetMemoryInfo fills.

Handles (nvmlDevice_t, nvmlGpuInstance_t, nvmlComputeInstance_t) are opaque: pass back what a call
returned. Structs come back as Fields (plain Python values). A call that returns anything but
NVML_SUCCESS raises NvmlCallError with the code and the library's own nvmlErrorString text; a symbol
the library lacks is NVML_ERROR_FUNCTION_NOT_FOUND, as NVML itself reports it.
"""
from __future__ import annotations

from cdi._nvml_ffi import ffi

# nvmlReturn_t values the callers tell apart
SUCCESS = 0
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_TIMEOUT = 10
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13

DEVICE_MIG_ENABLE = 1
# Profile indices (not ids) go 0 .. COUNT-1; older drivers know fewer and refuse the rest
# (NVML_ERROR_INVALID_ARGUMENT), which callers treat as "not a profile of this GPU".
GPU_INSTANCE_PROFILE_COUNT = 0x12
COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0

# Buffer sizes nvml.h guarantees to be large enough
SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80
DEVICE_NAME_V2_BUFFER_SIZE = 96
DEVICE_UUID_V2_BUFFER_SIZE = 96


def _struct_version(struct: str, version: int) -> int:
    """NVML_STRUCT_VERSION: the size of the struct with the version in the top byte."""
    return ffi.sizeof(struct) | (version << 24)


GPU_INSTANCE_PROFILE_INFO_V2 = _struct_version("nvmlGpuInstanceProfileInfo_v2_t", 2)          # 0x02000098
COMPUTE_INSTANCE_PROFILE_INFO_V2 = _struct_version("nvmlComputeInstanceProfileInfo_v2_t", 2)  # 0x02000088


class NvmlCallError(Exception):
    """An NVML call failed: `code` is the nvmlReturn_t, `text` what nvmlErrorString says about it."""

    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code
        self.text = text


class Fields:
    """A struct NVML filled, as Python values named as in nvml.h: char arrays are str, nested structs
    Fields, pointers (a parent's handle) the address as an int (0 for NULL)."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def __eq__(self, other) -> bool:
        return isinstance(other, Fields) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"Fields({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


def _fields(struct) -> Fields:
    values = {}
    for name, field in ffi.typeof(struct).fields:
        value = getattr(struct, name)
        kind = field.type.kind
        if kind == "array":      # char name[96] and the like
            value = ffi.string(value).decode(errors="replace")
        elif kind == "struct":
            value = _fields(value)
        elif kind == "pointer":
            value = int(ffi.cast("uintptr_t", value))
        values[name] = value
    return Fields(**values)


def handle_address(handle) -> int:
    """A handle's address, to compare it with a Fields pointer (e.g. a GPU instance's `device`)."""
    return int(ffi.cast("uintptr_t", handle))


def load_library(path: str) -> NvmlLibrary:
    """Load libnvidia-ml from `path` (an absolute path, or the soname to let the loader search).
    A library that cannot be loaded is NvmlCallError(ERROR_LIBRARY_NOT_FOUND, the loader's message)."""
    try:
        return NvmlLibrary(ffi.dlopen(path))
    except OSError as e:   # the loader's own words (dlerror), without cffi's "cannot load library '...': "
        raise NvmlCallError(ERROR_LIBRARY_NOT_FOUND, str(e).removeprefix(f"cannot load library '{path}': ")) \
            from None


class NvmlLibrary:
    """One loaded libnvidia-ml. Methods are NVML calls named after them; each returns the value the
    call writes (an int, a str, a handle or Fields) or raises NvmlCallError."""

    def __init__(self, lib):
        self._lib = lib

    def _call(self, name: str, *args) -> None:
        try:
            function = getattr(self._lib, name)
        except (AttributeError, ffi.error):   # cffi's ABI mode says ffi.error: "symbol '...' not found"
            raise NvmlCallError(ERROR_FUNCTION_NOT_FOUND,
                                f"{name}: {self.error_text(ERROR_FUNCTION_NOT_FOUND)}") from None
        code = function(*args)
        if code != SUCCESS:
            raise NvmlCallError(code, self.error_text(code))

    def error_text(self, code: int) -> str:
        """nvmlErrorString(code); a library without it gives a generic text."""
        try:
            text = self._lib.nvmlErrorString(code)
        except (AttributeError, ffi.error):
            text = ffi.NULL
        if text == ffi.NULL:   # nvml.h's words for the two codes a library without nvmlErrorString can give
            return {ERROR_LIBRARY_NOT_FOUND: "Shared Library Not Found",
                    ERROR_FUNCTION_NOT_FOUND: "Function Not Found"}.get(code, f"NVML error {code}")
        return ffi.string(text).decode(errors="replace")

    def _out(self, name: str, ctype: str, *args):
        """Call `name` with a pointer to a new `ctype` after `args`; returns what the call wrote."""
        out = ffi.new(ctype + " *")
        self._call(name, *args, out)
        return out[0]

    def _string(self, name: str, size: int, *args) -> str:
        buffer = ffi.new("char[]", size)
        self._call(name, *args, buffer, size)
        return ffi.string(buffer).decode(errors="replace")

    def _struct(self, name: str, ctype: str, *args, version: int | None = None) -> Fields:
        out = ffi.new(ctype + " *")
        if version is not None:
            out.version = version
        self._call(name, *args, out)
        return _fields(out[0])

    # -- system

    def init(self) -> None:
        self._call("nvmlInit_v2")

    def system_driver_version(self) -> str:
        return self._string("nvmlSystemGetDriverVersion", SYSTEM_DRIVER_VERSION_BUFFER_SIZE)

    def system_cuda_driver_version(self) -> int:
        """E.g. 12040 for CUDA 12.4."""
        return self._out("nvmlSystemGetCudaDriverVersion", "int")

    # -- GPUs (and MIG devices, where NVML accepts their handles)

    def device_count(self) -> int:
        return self._out("nvmlDeviceGetCount_v2", "unsigned int")

    def device_handle_by_index(self, index: int):
        return self._out("nvmlDeviceGetHandleByIndex_v2", "nvmlDevice_t", index)

    def device_handle_by_uuid(self, uuid: str):
        """A GPU's or MIG device's handle; NVML_ERROR_GPU_IS_LOST while its GPU is lost."""
        return self._out("nvmlDeviceGetHandleByUUID", "nvmlDevice_t", uuid.encode())

    def device_minor_number(self, device) -> int:
        return self._out("nvmlDeviceGetMinorNumber", "unsigned int", device)

    def device_cuda_compute_capability(self, device) -> tuple[int, int]:
        major, minor = ffi.new("int *"), ffi.new("int *")
        self._call("nvmlDeviceGetCudaComputeCapability", device, major, minor)
        return major[0], minor[0]

    def device_architecture(self, device) -> int:
        """nvmlDeviceArchitecture_t (7 Ampere, 9 Hopper, ...)."""
        return self._out("nvmlDeviceGetArchitecture", "unsigned int", device)

    def device_mig_mode(self, device) -> tuple[int, int]:
        """(current, pending): DEVICE_MIG_ENABLE or 0."""
        current, pending = ffi.new("unsigned int *"), ffi.new("unsigned int *")
        self._call("nvmlDeviceGetMigMode", device, current, pending)
        return current[0], pending[0]

    def device_uuid(self, device) -> str:
        return self._string("nvmlDeviceGetUUID", DEVICE_UUID_V2_BUFFER_SIZE, device)

    def device_name(self, device) -> str:
        return self._string("nvmlDeviceGetName", DEVICE_NAME_V2_BUFFER_SIZE, device)

    def device_brand(self, device) -> int:
        """nvmlBrandType_t."""
        return self._out("nvmlDeviceGetBrand", "unsigned int", device)

    def device_pci_info(self, device) -> Fields:
        return self._struct("nvmlDeviceGetPciInfo_v3", "nvmlPciInfo_t", device)

    def device_memory_info(self, device) -> Fields:
        return self._struct("nvmlDeviceGetMemoryInfo", "nvmlMemory_t", device)

    # -- MIG

    def device_gpu_instance_profile_info(self, device, profile: int) -> Fields:
        """The profile at index `profile` (0 .. GPU_INSTANCE_PROFILE_COUNT-1), v2 fields; from a driver
        without nvmlDeviceGetGpuInstanceProfileInfoV, the v1 fields with version 0 and name ""."""
        try:
            return self._struct("nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlGpuInstanceProfileInfo_v2_t",
                                device, profile, version=GPU_INSTANCE_PROFILE_INFO_V2)
        except NvmlCallError as e:
            if e.code != ERROR_FUNCTION_NOT_FOUND:
                raise
        old = self._struct("nvmlDeviceGetGpuInstanceProfileInfo", "nvmlGpuInstanceProfileInfo_t", device, profile)
        return Fields(version=0, **vars(old), name="")

    def device_max_mig_device_count(self, device) -> int:
        return self._out("nvmlDeviceGetMaxMigDeviceCount", "unsigned int", device)

    def device_mig_device_handle_by_index(self, device, index: int):
        """NVML_ERROR_NOT_FOUND for an empty slot."""
        return self._out("nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDevice_t", device, index)

    def device_gpu_instance_id(self, mig_device) -> int:
        return self._out("nvmlDeviceGetGpuInstanceId", "unsigned int", mig_device)

    def device_compute_instance_id(self, mig_device) -> int:
        return self._out("nvmlDeviceGetComputeInstanceId", "unsigned int", mig_device)

    def device_attributes(self, mig_device) -> Fields:
        """A MIG device's multiprocessors, shared engines, slices and memory (MB); a full GPU's is
        NVML_ERROR_NOT_SUPPORTED."""
        return self._struct("nvmlDeviceGetAttributes_v2", "nvmlDeviceAttributes_t", mig_device)

    def device_gpu_instance_by_id(self, device, gpu_instance_id: int):
        return self._out("nvmlDeviceGetGpuInstanceById", "nvmlGpuInstance_t", device, gpu_instance_id)

    def gpu_instance_info(self, gpu_instance) -> Fields:
        """id, profileId, placement, and `device`: the parent GPU's handle_address."""
        return self._struct("nvmlGpuInstanceGetInfo", "nvmlGpuInstanceInfo_t", gpu_instance)

    def gpu_instance_compute_instance_by_id(self, gpu_instance, compute_instance_id: int):
        return self._out("nvmlGpuInstanceGetComputeInstanceById", "nvmlComputeInstance_t", gpu_instance,
                         compute_instance_id)

    def compute_instance_info(self, compute_instance) -> Fields:
        """id, profileId, placement; `device` and `gpuInstance` as handle addresses."""
        return self._struct("nvmlComputeInstanceGetInfo_v2", "nvmlComputeInstanceInfo_t", compute_instance)

    def gpu_instance_compute_instance_profile_info(self, gpu_instance, profile: int, engine_profile: int) -> Fields:
        """The compute-instance profile at index `profile`: v2 fields, or v1 ones (as above)."""
        args = (gpu_instance, profile, engine_profile)
        try:
            return self._struct("nvmlGpuInstanceGetComputeInstanceProfileInfoV",
                                "nvmlComputeInstanceProfileInfo_v2_t", *args, version=COMPUTE_INSTANCE_PROFILE_INFO_V2)
        except NvmlCallError as e:
            if e.code != ERROR_FUNCTION_NOT_FOUND:
                raise
        old = self._struct("nvmlGpuInstanceGetComputeInstanceProfileInfo", "nvmlComputeInstanceProfileInfo_t", *args)
        return Fields(version=0, **vars(old), name="")

    # -- topology

    def device_topology_common_ancestor(self, device1, device2) -> int:
        """nvmlGpuTopologyLevel_t of the closest PCIe ancestor of two GPUs (0 same board, 10 single
        switch, 20 multiple switches, 30 host bridge, 40 same NUMA node, 50 across CPUs)."""
        return self._out("nvmlDeviceGetTopologyCommonAncestor", "unsigned int", device1, device2)

    def device_nvlink_state(self, device, link: int) -> int:
        """1 when NVLink `link` of the GPU is active; NVML_ERROR_INVALID_ARGUMENT past its links,
        NVML_ERROR_NOT_SUPPORTED without NVLink."""
        return self._out("nvmlDeviceGetNvLinkState", "unsigned int", device, link)

    def device_nvlink_remote_pci_info(self, device, link: int) -> Fields:
        """PCI info of what NVLink `link` of the GPU connects to."""
        return self._struct("nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlPciInfo_t", device, link)

    def device_p2p_status(self, device1, device2, caps_index: int) -> int:
        """nvmlGpuP2PStatus_t (0 OK) of peer-to-peer `caps_index` (0 read, 1 write, 2 NVLink, 3 atomics,
        4 PCI) between two GPUs."""
        return self._out("nvmlDeviceGetP2PStatus", "unsigned int", device1, device2, caps_index)

    # -- events

    def event_set_create(self):
        return self._out("nvmlEventSetCreate", "nvmlEventSet_t")

    def device_supported_event_types(self, device) -> int:
        """The nvmlEventType* bits the GPU can report."""
        return self._out("nvmlDeviceGetSupportedEventTypes", "unsigned long long", device)

    def device_register_events(self, device, event_types: int, event_set) -> None:
        self._call("nvmlDeviceRegisterEvents", device, event_types, event_set)

    def event_set_wait(self, event_set, timeout_ms: int) -> Fields:
        """The next event of the set (device as a handle_address, eventType, eventData, gpuInstanceId,
        computeInstanceId); NvmlCallError ERROR_TIMEOUT when none came within timeout_ms. Blocks in C
        with the GIL released."""
        data = ffi.new("nvmlEventData_t *")
        self._call("nvmlEventSetWait_v2", event_set, data, timeout_ms)
        return _fields(data[0])

    def event_set_free(self, event_set) -> None:
        self._call("nvmlEventSetFree", event_set)
