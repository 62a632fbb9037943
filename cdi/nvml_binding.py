"""A small ctypes binding of libnvidia-ml.so.1: exactly the NVML calls cdi.nvml makes, nothing more.

Why not pynvml (DESIGN names nvidia-ml-py as the NVML dependency; this is a deliberate deviation for
speed): the prestart hook reads NVML at every GPU container start, and `import pynvml` alone cost
~32 ms of wall time on the project's machines (~37 ms measured with `python -I -S`, ctypes' ~5 ms
included: pynvml builds ~370 ctypes classes at import, and imports ctypes.util, string and threading
for things the hook never uses), while the whole hook took ~58-66 ms. This module imports only ctypes
(~2 ms on top of what the hook path has loaded anyway) and defines the few structs it needs. pynvml
stays a test dependency: the tests use it as an independent NVML client to check this binding and the
simulated library.

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

Handles (nvmlDevice_t, nvmlGpuInstance_t, nvmlComputeInstance_t) are opaque pointers: c_void_p here.
A call that returns anything but NVML_SUCCESS raises NvmlCallError with the code and the library's
own nvmlErrorString text; a symbol the library lacks is NVML_ERROR_FUNCTION_NOT_FOUND, as NVML
itself reports it.
"""
from __future__ import annotations

import ctypes
from ctypes import byref, c_char, c_int, c_uint, c_ulonglong, c_void_p

# nvmlReturn_t values the callers tell apart
SUCCESS = 0
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
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
DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32
DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16


class NvmlCallError(Exception):
    """An NVML call failed: `code` is the nvmlReturn_t, `text` what nvmlErrorString says about it."""

    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code
        self.text = text


class PciInfo(ctypes.Structure):
    """nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 fills it."""
    _fields_ = [("busIdLegacy", c_char * DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE),
                ("domain", c_uint), ("bus", c_uint), ("device", c_uint), ("pciDeviceId", c_uint),
                ("pciSubSystemId", c_uint),
                ("busId", c_char * DEVICE_PCI_BUS_ID_BUFFER_SIZE)]


class Memory(ctypes.Structure):
    """nvmlMemory_t (v1), bytes."""
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


_GI_PROFILE_COUNTS = [("id", c_uint), ("isP2pSupported", c_uint), ("sliceCount", c_uint),
                      ("instanceCount", c_uint), ("multiprocessorCount", c_uint), ("copyEngineCount", c_uint),
                      ("decoderCount", c_uint), ("encoderCount", c_uint), ("jpegCount", c_uint),
                      ("ofaCount", c_uint), ("memorySizeMB", c_ulonglong)]


class GpuInstanceProfileInfoV1(ctypes.Structure):
    """nvmlGpuInstanceProfileInfo_t: what drivers without the V call give."""
    _fields_ = _GI_PROFILE_COUNTS


class GpuInstanceProfileInfo(ctypes.Structure):
    """nvmlGpuInstanceProfileInfo_v2_t; `name` is e.g. "MIG 1g.5gb" (empty when read as v1)."""
    _fields_ = [("version", c_uint), *_GI_PROFILE_COUNTS, ("name", c_char * DEVICE_NAME_V2_BUFFER_SIZE)]


_CI_PROFILE_COUNTS = [("id", c_uint), ("sliceCount", c_uint), ("instanceCount", c_uint),
                      ("multiprocessorCount", c_uint), ("sharedCopyEngineCount", c_uint),
                      ("sharedDecoderCount", c_uint), ("sharedEncoderCount", c_uint), ("sharedJpegCount", c_uint),
                      ("sharedOfaCount", c_uint)]


class ComputeInstanceProfileInfoV1(ctypes.Structure):
    """nvmlComputeInstanceProfileInfo_t: what drivers without the V call give."""
    _fields_ = _CI_PROFILE_COUNTS


class ComputeInstanceProfileInfo(ctypes.Structure):
    """nvmlComputeInstanceProfileInfo_v2_t (`name` empty when read as v1)."""
    _fields_ = [("version", c_uint), *_CI_PROFILE_COUNTS, ("name", c_char * DEVICE_NAME_V2_BUFFER_SIZE)]


class Placement(ctypes.Structure):
    """nvmlGpuInstancePlacement_t and nvmlComputeInstancePlacement_t (the same layout)."""
    _fields_ = [("start", c_uint), ("size", c_uint)]


class GpuInstanceInfo(ctypes.Structure):
    """nvmlGpuInstanceInfo_t: `device` is the parent GPU's handle."""
    _fields_ = [("device", c_void_p), ("id", c_uint), ("profileId", c_uint), ("placement", Placement)]


class ComputeInstanceInfo(ctypes.Structure):
    """nvmlComputeInstanceInfo_t (as nvmlComputeInstanceGetInfo_v2 fills it, placement included)."""
    _fields_ = [("device", c_void_p), ("gpuInstance", c_void_p), ("id", c_uint), ("profileId", c_uint),
                ("placement", Placement)]


def _struct_version(struct: type, version: int) -> int:
    """NVML_STRUCT_VERSION: the size of the struct with the version in the top byte."""
    return ctypes.sizeof(struct) | (version << 24)


GPU_INSTANCE_PROFILE_INFO_V2 = _struct_version(GpuInstanceProfileInfo, 2)          # 0x02000098
COMPUTE_INSTANCE_PROFILE_INFO_V2 = _struct_version(ComputeInstanceProfileInfo, 2)  # 0x02000088


def load_library(path: str) -> NvmlLibrary:
    """Load libnvidia-ml from `path` (an absolute path, or the soname to let the loader search).
    A library that cannot be loaded is NvmlCallError(ERROR_LIBRARY_NOT_FOUND, the loader's message)."""
    try:
        return NvmlLibrary(ctypes.CDLL(path))
    except OSError as e:
        raise NvmlCallError(ERROR_LIBRARY_NOT_FOUND, str(e)) from None


class NvmlLibrary:
    """One loaded libnvidia-ml. Methods are NVML calls named after them; each returns the value the
    call writes (a Python int or str, or the filled struct) or raises NvmlCallError."""

    def __init__(self, cdll: ctypes.CDLL):
        self._cdll = cdll

    def _function(self, name: str):
        try:
            return getattr(self._cdll, name)
        except AttributeError:
            raise NvmlCallError(ERROR_FUNCTION_NOT_FOUND, f"{name}: {self.error_text(ERROR_FUNCTION_NOT_FOUND)}") \
                from None

    def _call(self, name: str, *args) -> None:
        code = self._function(name)(*args)
        if code != SUCCESS:
            raise NvmlCallError(code, self.error_text(code))

    def error_text(self, code: int) -> str:
        """nvmlErrorString(code); a library without it gives a generic text."""
        try:
            error_string = self._cdll.nvmlErrorString
        except AttributeError:
            return f"NVML error {code}"
        error_string.restype = ctypes.c_char_p
        text = error_string(c_int(code))
        return text.decode(errors="replace") if text else f"NVML error {code}"

    def _uint(self, name: str, *args) -> int:
        value = c_uint()
        self._call(name, *args, byref(value))
        return value.value

    def _string(self, name: str, size: int, *args) -> str:
        buffer = ctypes.create_string_buffer(size)
        self._call(name, *args, buffer, c_uint(size))
        return buffer.value.decode(errors="replace")

    def _handle(self, name: str, *args) -> c_void_p:
        handle = c_void_p()
        self._call(name, *args, byref(handle))
        return handle

    def _struct(self, name: str, struct, *args):
        self._call(name, *args, byref(struct))
        return struct

    # -- system

    def init(self) -> None:
        self._call("nvmlInit_v2")

    def system_driver_version(self) -> str:
        return self._string("nvmlSystemGetDriverVersion", SYSTEM_DRIVER_VERSION_BUFFER_SIZE)

    def system_cuda_driver_version(self) -> int:
        """E.g. 12040 for CUDA 12.4."""
        value = c_int()
        self._call("nvmlSystemGetCudaDriverVersion", byref(value))
        return value.value

    # -- GPUs (and MIG devices, where NVML accepts their handles)

    def device_count(self) -> int:
        return self._uint("nvmlDeviceGetCount_v2")

    def device_handle_by_index(self, index: int) -> c_void_p:
        return self._handle("nvmlDeviceGetHandleByIndex_v2", c_uint(index))

    def device_minor_number(self, device: c_void_p) -> int:
        return self._uint("nvmlDeviceGetMinorNumber", device)

    def device_cuda_compute_capability(self, device: c_void_p) -> tuple[int, int]:
        major, minor = c_int(), c_int()
        self._call("nvmlDeviceGetCudaComputeCapability", device, byref(major), byref(minor))
        return major.value, minor.value

    def device_architecture(self, device: c_void_p) -> int:
        """nvmlDeviceArchitecture_t (7 Ampere, 9 Hopper, ...)."""
        return self._uint("nvmlDeviceGetArchitecture", device)

    def device_mig_mode(self, device: c_void_p) -> tuple[int, int]:
        """(current, pending): DEVICE_MIG_ENABLE or 0."""
        current, pending = c_uint(), c_uint()
        self._call("nvmlDeviceGetMigMode", device, byref(current), byref(pending))
        return current.value, pending.value

    def device_uuid(self, device: c_void_p) -> str:
        return self._string("nvmlDeviceGetUUID", DEVICE_UUID_V2_BUFFER_SIZE, device)

    def device_name(self, device: c_void_p) -> str:
        return self._string("nvmlDeviceGetName", DEVICE_NAME_V2_BUFFER_SIZE, device)

    def device_brand(self, device: c_void_p) -> int:
        """nvmlBrandType_t."""
        return self._uint("nvmlDeviceGetBrand", device)

    def device_pci_info(self, device: c_void_p) -> PciInfo:
        return self._struct("nvmlDeviceGetPciInfo_v3", PciInfo(), device)

    def device_memory_info(self, device: c_void_p) -> Memory:
        return self._struct("nvmlDeviceGetMemoryInfo", Memory(), device)

    # -- MIG

    def device_gpu_instance_profile_info(self, device: c_void_p, profile: int) -> GpuInstanceProfileInfo:
        """The profile at index `profile` (0 .. GPU_INSTANCE_PROFILE_COUNT-1): v2, or v1 copied into a
        v2 struct with an empty name when the driver has no nvmlDeviceGetGpuInstanceProfileInfoV."""
        info = GpuInstanceProfileInfo(version=GPU_INSTANCE_PROFILE_INFO_V2)
        try:
            return self._struct("nvmlDeviceGetGpuInstanceProfileInfoV", info, device, c_uint(profile))
        except NvmlCallError as e:
            if e.code != ERROR_FUNCTION_NOT_FOUND:
                raise
        old = self._struct("nvmlDeviceGetGpuInstanceProfileInfo", GpuInstanceProfileInfoV1(), device, c_uint(profile))
        return _widened(old, GpuInstanceProfileInfo(version=0))

    def device_max_mig_device_count(self, device: c_void_p) -> int:
        return self._uint("nvmlDeviceGetMaxMigDeviceCount", device)

    def device_mig_device_handle_by_index(self, device: c_void_p, index: int) -> c_void_p:
        """NVML_ERROR_NOT_FOUND for an empty slot."""
        return self._handle("nvmlDeviceGetMigDeviceHandleByIndex", device, c_uint(index))

    def device_gpu_instance_id(self, mig_device: c_void_p) -> int:
        return self._uint("nvmlDeviceGetGpuInstanceId", mig_device)

    def device_compute_instance_id(self, mig_device: c_void_p) -> int:
        return self._uint("nvmlDeviceGetComputeInstanceId", mig_device)

    def device_gpu_instance_by_id(self, device: c_void_p, gpu_instance_id: int) -> c_void_p:
        return self._handle("nvmlDeviceGetGpuInstanceById", device, c_uint(gpu_instance_id))

    def gpu_instance_info(self, gpu_instance: c_void_p) -> GpuInstanceInfo:
        return self._struct("nvmlGpuInstanceGetInfo", GpuInstanceInfo(), gpu_instance)

    def gpu_instance_compute_instance_by_id(self, gpu_instance: c_void_p, compute_instance_id: int) -> c_void_p:
        return self._handle("nvmlGpuInstanceGetComputeInstanceById", gpu_instance, c_uint(compute_instance_id))

    def compute_instance_info(self, compute_instance: c_void_p) -> ComputeInstanceInfo:
        return self._struct("nvmlComputeInstanceGetInfo_v2", ComputeInstanceInfo(), compute_instance)

    def gpu_instance_compute_instance_profile_info(self, gpu_instance: c_void_p, profile: int,
                                                   engine_profile: int) -> ComputeInstanceProfileInfo:
        """The compute-instance profile at index `profile`: v2, or v1 with an empty name (as above)."""
        info = ComputeInstanceProfileInfo(version=COMPUTE_INSTANCE_PROFILE_INFO_V2)
        args = (gpu_instance, c_uint(profile), c_uint(engine_profile))
        try:
            return self._struct("nvmlGpuInstanceGetComputeInstanceProfileInfoV", info, *args)
        except NvmlCallError as e:
            if e.code != ERROR_FUNCTION_NOT_FOUND:
                raise
        old = self._struct("nvmlGpuInstanceGetComputeInstanceProfileInfo", ComputeInstanceProfileInfoV1(), *args)
        return _widened(old, ComputeInstanceProfileInfo(version=0))


def _widened(old: ctypes.Structure, new: ctypes.Structure) -> ctypes.Structure:
    """Copy a v1 struct's fields into its v2 form (the v2 adds only `version` and `name`)."""
    for field, _ in old._fields_:
        setattr(new, field, getattr(old, field))
    return new
